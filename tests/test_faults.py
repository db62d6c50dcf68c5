"""Faults: a worker process killed mid-computation, and a ``dkpca`` run killed outright.

A fit or a write on a ``LocalCluster`` with nannies, one of whose worker processes is killed
while it has tasks (or, for a fit whose kernel tiles are cached on the workers, between two
passes), finishes with the result of an undisturbed run (the nanny restarts the worker; the
scheduler recomputes what it held). A ``dkpca transform`` killed mid-write never
leaves its destination: after SIGINT nothing is left at all; after SIGKILL (no cleanup
possible) only the hidden ``.NAME.dkpca-tmp-*`` sibling stays.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import dkpca
import dkpca._shared_memory as shared_memory
from dkpca._cluster_workers import live_workers
from dkpca.blocked import compute
from dkpca.cluster import connect
from dkpca.io import atomic_group, store_array
from dkpca.options import Nystrom

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.distributed

TIMEOUT = 120.0


# --- a worker process killed mid-computation -----------------------------------------------


@pytest.fixture(scope="module")
def client():
    """Two nanny-managed worker processes with one thread each."""
    with connect(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB") as c:
        yield c


@pytest.fixture
def own_client():
    """The same cluster, for one test: a worker killed there leaves nothing to the next test."""
    with connect(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB") as c:
        live_workers(c, 2, TIMEOUT)
        yield c


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    """Zarr inputs: ``train`` (6000 x 20) for the fit, ``new`` (60000 x 20) to project."""
    folder = tmp_path_factory.mktemp("faults")
    rng = np.random.default_rng(0)
    zarr.create_array(folder / "train.zarr", data=rng.normal(size=(6_000, 20)),
                      chunks=(500, 20))
    zarr.create_array(folder / "new.zarr", data=rng.normal(size=(60_000, 20)),
                      chunks=(3_000, 20))
    return folder / "train.zarr", folder / "new.zarr"


class WorkerKiller(threading.Thread):
    """SIGKILL the process of a worker that has tasks (any, ``tasks=False``) once ``ready()`` holds.

    The worker processes are the nannies' children, so the nanny notices and starts a new one.
    """

    def __init__(self, client, ready=lambda: True, tasks=True):
        super().__init__(daemon=True)
        self.client, self.ready, self.tasks = client, ready, tasks
        live_workers(client, 2, TIMEOUT)  # a previous test may have killed one
        self.pids = client.run(os.getpid)
        self.victim: str | None = None
        self.killed_at: float | None = None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            busy = ([w for w, keys in self.client.processing().items() if keys] if self.tasks
                    else sorted(self.pids))  # a direct call: every worker has one
            if busy and self.ready():
                self.victim = busy[0]
                os.kill(self.pids[self.victim], signal.SIGKILL)
                self.killed_at = time.monotonic()
                return
            time.sleep(0.02)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join(timeout=TIMEOUT)

    def check(self, finished: float) -> None:
        """Assert the kill came before ``finished``, hit running work, and was repaired."""
        assert self.killed_at is not None, "no worker had tasks: nothing was killed"
        assert self.killed_at < finished, "the worker was killed after the computation ended"
        removals = [msg for _, msg in self.client.get_events("all")
                    if isinstance(msg, dict) and msg.get("action") == "remove-worker"
                    and msg.get("worker") == self.victim]
        assert removals and not removals[-1]["expected"]
        assert removals[-1]["processing-tasks"] or not self.tasks, "the killed worker had no tasks"
        live_workers(self.client, 2, TIMEOUT)  # the nanny restarted it
        pids = set(self.client.run(os.getpid).values())
        assert self.pids[self.victim] not in pids and len(pids) == 2


def _fit(train: Path) -> dkpca.KernelPCA:
    """Randomized kernel PCA, its kernel tiles re-evaluated on the workers at every pass."""
    model = dkpca.KernelPCA(3, solver="randomized", random_state=0, max_memory="1MiB",
                            block_size="8MiB")
    return model.fit(da.from_zarr(train))


@pytest.fixture(scope="module")
def undisturbed(client, arrays):
    """The fit and the stored scores of a run on the same cluster without faults."""
    train, new = arrays
    model = _fit(train)
    group = zarr.open_group(train.parent / "undisturbed.zarr", mode="w")
    compute(store_array(group, "scores", model.transform(da.from_zarr(new))))
    return model, group["scores"][...]


@pytest.mark.parametrize("transport", [
    pytest.param("sockets", marks=pytest.mark.slow),  # 10 s; the default transport is below
    "shared memory"])
def test_fit_survives_a_killed_worker(client, arrays, undisturbed, monkeypatch, transport):
    reference, _ = undisturbed
    train, _ = arrays
    # kill a worker while it multiplies its tiles, so that the kill lands in the middle of a
    # pass: a product task, or a direct call (workers on this machine, dkpca._shared_memory)
    calls = []
    if transport == "sockets":
        monkeypatch.setitem(dask.config.config.setdefault("dkpca", {}), "shared-memory", False)
    else:
        call = shared_memory._call

        async def flagged(*args, **kwargs):
            calls.append(1)
            try:
                return await call(*args, **kwargs)
            finally:
                calls.pop()

        monkeypatch.setattr(shared_memory, "_call", flagged)

    def in_a_pass() -> bool:
        return bool(calls) or any("state_product" in str(key)
                                  for keys in client.processing().values() for key in keys)

    with WorkerKiller(client, ready=in_a_pass, tasks=transport == "sockets") as killer:
        model = _fit(train)
        finished = time.monotonic()
    killer.check(finished)
    assert model.n_iter_ == reference.n_iter_
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    X = zarr.open_array(train, mode="r")[:500]
    np.testing.assert_allclose(model.transform(X), reference.transform(X), rtol=1e-8,
                               atol=1e-10)


@pytest.mark.slow  # 9 s: the default run is within 20 s of its 15 minutes on 2 cores
def test_linear_pca_pass_survives_a_killed_worker(client, tmp_path):
    """A worker killed while it reads and multiplies its group of stripes (dkpca/_pca_stripes.py)."""
    rng = np.random.default_rng(0)
    signal_ = rng.normal(size=(20_000, 5)) * np.linspace(10, 2, 5)
    data = signal_ @ rng.normal(size=(5, 200)) + rng.normal(size=(20_000, 200))
    train = tmp_path / "train.zarr"  # 32 MB in 20 row stripes: a pass lasts a while
    zarr.create_array(train, data=data, chunks=(1_000, 100))

    def fit() -> dkpca.PCA:
        return dkpca.PCA(3, solver="randomized", tol=1e-10, random_state=0).fit(
            da.from_zarr(train))

    reference = fit()

    def in_a_pass() -> bool:
        return any("scatter_group" in str(key)
                   for keys in client.processing().values() for key in keys)

    with WorkerKiller(client, ready=in_a_pass) as killer:
        model = fit()
        finished = time.monotonic()
    killer.check(finished)
    assert model.n_iter_ == reference.n_iter_
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_,
                               rtol=1e-12)


def test_write_survives_a_killed_worker(client, arrays, undisturbed, tmp_path):
    model, expected = undisturbed
    _, new = arrays
    out = tmp_path / "scores.zarr"

    def chunks_written() -> bool:
        return any(tmp_path.glob(".scores.zarr.dkpca-tmp-*/scores/c/*/*"))

    with atomic_group(out) as group:
        pending = store_array(group, "scores", model.transform(da.from_zarr(new)))
        with WorkerKiller(client, ready=chunks_written) as killer:
            compute(pending)
            finished = time.monotonic()
    killer.check(finished)
    written = zarr.open_group(out, mode="r")["scores"]
    assert written.chunks == (3_000, 3)
    np.testing.assert_allclose(written[...], expected, rtol=1e-12, atol=1e-14)
    assert [p.name for p in tmp_path.iterdir()] == ["scores.zarr"]


def _cached_fit(train: Path) -> dkpca.KernelPCA:
    """Randomized kernel PCA, its kernel tiles cached on the workers (about 80 MB)."""
    model = dkpca.KernelPCA(3, solver="randomized", random_state=0, block_size="8MiB")
    return model.fit(da.from_zarr(train))


@pytest.mark.parametrize("layout", ["symmetric", "stripes"])
def test_cached_tiles_of_a_killed_worker_are_recomputed(own_client, arrays, monkeypatch, layout):
    # Between two Krylov passes, SIGKILL a worker process that holds cached kernel tiles. Its
    # tiles are lost; they are evaluated again on a live worker for the next product, and the
    # fit ends with the undisturbed result, in either layout (a stripe keeps its rows).
    import dask

    from dkpca.tiles import KernelTiles

    client = own_client
    monkeypatch.setitem(dask.config.config.setdefault("dkpca", {}), "tile-layout", layout)
    train, _ = arrays
    reference = _cached_fit(train)
    live_workers(client, 2, TIMEOUT)
    pids = client.run(os.getpid)
    original, passes, killed = KernelTiles.matmul, [], {}

    def matmul_after_a_kill(self, V):
        assert self.layout == layout
        passes.append(V.shape)
        if len(passes) == 3:
            holders = client.who_has(distributed.futures_of(self.states))
            held = {worker for workers in holders.values() for worker in workers}
            killed["victim"] = victim = min(held)
            killed["tiles"] = sum(len(pairs) for pairs, state in zip(self._pairs, self.states, strict=True)
                                  if victim in holders[state.key])
            os.kill(pids[victim], signal.SIGKILL)
        return original(self, V)

    monkeypatch.setattr(KernelTiles, "matmul", matmul_after_a_kill)

    def refresh_of_the_clusters_copy(*args, **kwargs):
        # Refreshing the LocalCluster's own list of workers before it has processed the
        # victim's removal breaks distributed's status watcher (KeyError on the dead address,
        # and a close that raises): the recovery must ask the scheduler only.
        raise AssertionError("the recovery refreshed the LocalCluster's copy of the workers")

    monkeypatch.setattr(distributed.deploy.Cluster, "wait_for_workers",
                        refresh_of_the_clusters_copy)
    model = _cached_fit(train)
    assert killed["tiles"] > 0, "the victim held no tiles"
    assert len(passes) == model.n_iter_ > 3
    removals = [msg for _, msg in client.get_events("all")
                if isinstance(msg, dict) and msg.get("action") == "remove-worker"
                and msg.get("worker") == killed["victim"]]
    assert removals and not removals[-1]["expected"]
    assert model.n_iter_ == reference.n_iter_
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    live_workers(client, 2, TIMEOUT)  # the nanny restarted it, for later tests


def _failing_kernel() -> dkpca.kernels.Kernel:
    """An RBF kernel whose evaluation raises on any block holding the value 123.

    Defined inside a function, so that the worker processes receive the class by value.
    """
    from dkpca.kernels import RBF, Kernel

    class Failing(Kernel):
        name = "failing"

        def pairwise(self, X, Y=None):
            Y = X if Y is None else Y
            if (X == 123.0).any() or (Y == 123.0).any():
                raise RuntimeError("boom")
            return RBF(gamma=0.2).pairwise(X, Y)

        def diag(self, X):
            return np.ones(X.shape[0])

    return Failing()


@pytest.mark.parametrize("max_memory", ["auto", "10KB"], ids=["cached", "streamed"])
def test_a_failed_fit_leaves_nothing_on_the_workers(client, max_memory, monkeypatch):
    # The client keeps a failed task's error, whose traceback holds the frames that hold the
    # tiles' futures: each failed fit used to leave its data rows and tiles on the workers
    # (cached: the tiles' sums fail; streamed, through tasks: the first product fails).
    import dask

    monkeypatch.setitem(dask.config.config.setdefault("dkpca", {}), "shared-memory", False)

    X = np.random.default_rng(0).normal(size=(1_200, 4))
    X[700, 0] = 123.0

    def tasks(dask_scheduler):
        return len(dask_scheduler.tasks)

    with dask.config.set(scheduler=client.get):
        futures, held = len(client.refcount), client.run_on_scheduler(tasks)
        for _ in range(2):
            with pytest.raises(RuntimeError, match="boom"):
                dkpca.KernelPCA(3, kernel=_failing_kernel(), solver="randomized",
                                block_size="64KiB", max_memory=max_memory).fit(X)
    # the client's own bookkeeping of the cancelled futures ends a moment later
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        gc.collect()
        if len(client.refcount) <= futures and client.run_on_scheduler(tasks) <= held:
            break
        time.sleep(0.05)
    # at most the futures held before: earlier tests' may have been released meanwhile
    assert len(client.refcount) <= futures
    assert client.run_on_scheduler(tasks) <= held


# --- a dkpca run killed outright -----------------------------------------------------------


@pytest.fixture(scope="module")
def transform_inputs(tmp_path_factory):
    """A saved Nyström model, and 120000 x 20 rows to project with it (30 chunks)."""
    folder = tmp_path_factory.mktemp("killed")
    rng = np.random.default_rng(1)
    model = dkpca.KernelPCA(3, solver=Nystrom(n_landmarks=1000), random_state=0)
    dkpca.save(model.fit(rng.normal(size=(3_000, 20))), folder / "model.zarr")
    zarr.create_array(folder / "X.zarr", data=rng.normal(size=(120_000, 20)),
                      chunks=(4_000, 20))
    return folder / "model.zarr", folder / "X.zarr"


@pytest.fixture
def interrupted_transform(transform_inputs, tmp_path):
    """Start ``dkpca transform`` in its own session; ``interrupt(sig)`` sends ``sig`` mid-write.

    Returns the process after it ended, and its stderr. Whatever of the session is still
    alive at teardown (its embedded cluster's worker) is killed.
    """
    model, X = transform_inputs
    sessions: list[int] = []

    def interrupt(sig: int) -> tuple[subprocess.Popen, str]:
        argv = ["dkpca", "transform", str(model), str(X), "--out", str(tmp_path / "scores.zarr"),
                "--workers", "1", "--threads-per-worker", "1"]
        # Ctrl-C as at a terminal: a test run started in the background by a non-interactive
        # shell ignores SIGINT, and its children inherit that, so restore Python's handler.
        start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, "
                 f"signal.default_int_handler); sys.argv = {argv!r}; "
                 "runpy.run_module('dkpca', run_name='__main__')")
        process = subprocess.Popen(
            [sys.executable, "-c", start],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        sessions.append(process.pid)
        deadline = time.monotonic() + TIMEOUT
        # mid-write: two of the 30 score chunks are in the temporary store
        while len(list(tmp_path.glob(".scores.zarr.dkpca-tmp-*/scores/c/*/*"))) < 2:
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the transform wrote nothing"
            time.sleep(0.02)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=TIMEOUT)
        return process, stderr

    yield interrupt
    for session in sessions:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session, signal.SIGKILL)
        _session_ends(session)  # gone before the next test measures its own workers


def _session_ends(session: int) -> bool:
    """Wait for every process of ``session`` (a group we started) to exit."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(session, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow  # 24 s; test_sigint_leaves_nothing checks the same clean exit on SIGINT
def test_sigkill_leaves_no_output(interrupted_transform, transform_inputs, tmp_path):
    process, _ = interrupted_transform(signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    # the orphaned worker notices its nanny's death and exits: nothing writes any more
    assert _session_ends(process.pid)
    assert not (tmp_path / "scores.zarr").exists()
    # no cleanup is possible after SIGKILL: the hidden temporary sibling stays...
    (temp,) = tmp_path.iterdir()
    assert temp.name.startswith(".scores.zarr.dkpca-tmp-")
    # ...until the same command runs again: its writer is gone, so the rerun sweeps it
    model, X = transform_inputs
    rerun = subprocess.run(
        [sys.executable, "-m", "dkpca", "transform", str(model), str(X), "--out",
         str(tmp_path / "scores.zarr"), "--workers", "1", "--threads-per-worker", "1"],
        capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "removed the abandoned temporary" in rerun.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["scores.zarr"]


def test_a_live_writers_temporary_survives_a_sweep(tmp_path):
    """A writer still at work keeps its temporary store; once it is killed, it is swept."""
    from dkpca.io import Location
    from dkpca.io._temporaries import sweep_stale_siblings

    destination = tmp_path / "out.zarr"
    program = ("import sys, zarr; from dkpca.io import atomic_location\n"
               f"with atomic_location({str(destination)!r}) as temp:\n"
               "    zarr.open_group(temp.store, mode='w-')\n"
               "    print(temp.store, flush=True)\n"
               "    sys.stdin.readline()\n")
    writer = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        temp = Path(writer.stdout.readline().strip())
        assert temp.is_dir() and temp.name.startswith(".out.zarr.dkpca-tmp-")
        assert sweep_stale_siblings(Location(destination)) == []  # alive: kept
        assert temp.is_dir()
    finally:
        writer.kill()
        writer.wait(timeout=TIMEOUT)
    assert sweep_stale_siblings(Location(destination)) == [str(temp)]  # gone: swept
    assert list(tmp_path.iterdir()) == []


def test_sweeping_judges_other_hosts_by_age(tmp_path):
    from dkpca.io import Location
    from dkpca.io._temporaries import FOREIGN_WRITER_AGE, sweep_stale_siblings

    now = int(time.time())
    old, recent = now - int(FOREIGN_WRITER_AGE) - 60, now - 60
    names = {
        f".out.zarr.dkpca-tmp-0badc0de-1-{old}-abcd1234": False,  # other host, long ago
        f".out.zarr.dkpca-tmp-0badc0de-1-{recent}-abcd1234": True,  # other host, recent
        ".out.zarr.dkpca-tmp-0123456789ab": True,  # no writer recorded, recent
        ".out.zarr.dkpca-old-0badc0de-1-1-abcd1234": True,  # a previous version: never
        ".other.zarr.dkpca-tmp-0badc0de-1-1-abcd1234": True,  # another destination's
    }
    for name in names:
        (tmp_path / name).mkdir()
    stale_legacy = tmp_path / ".out.zarr.dkpca-tmp-fedcba987654"
    stale_legacy.mkdir()
    os.utime(stale_legacy, (old, old))
    names[stale_legacy.name] = False
    sweep_stale_siblings(Location(tmp_path / "out.zarr"))
    assert {p.name for p in tmp_path.iterdir()} == {n for n, kept in names.items() if kept}


def test_sigint_leaves_nothing(interrupted_transform, tmp_path):
    process, stderr = interrupted_transform(signal.SIGINT)
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.strip().endswith("dkpca: interrupted; no output was written")
    assert _session_ends(process.pid)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_sigterm_leaves_nothing(interrupted_transform, tmp_path):
    """SIGTERM (what Kubernetes sends) is handled like Ctrl-C."""
    process, stderr = interrupted_transform(signal.SIGTERM)
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.strip().endswith("dkpca: interrupted; no output was written")
    assert _session_ends(process.pid)
    assert list(tmp_path.iterdir()) == [], stderr[-3000:]


@pytest.mark.distributed
def test_a_failed_write_stops_the_embedded_cluster_before_cleaning_up(tmp_path, monkeypatch):
    """No worker may be left to write into a temporary store once it is being removed."""
    import distributed
    import zarr

    from dkpca.cli._shared import cluster
    from dkpca.io import Location, atomic_location

    options = {"scheduler": None, "n_workers": 1, "threads_per_worker": 1,
               "memory_limit": "1GiB", "security": None, "timeout": 60}
    remove, seen = Location.remove, {}

    def observed_remove(location, *args, **kwargs):
        seen["cluster"] = str(distributed.get_client().cluster.status)
        return remove(location, *args, **kwargs)

    monkeypatch.setattr(Location, "remove", observed_remove)
    with (
        pytest.raises(KeyboardInterrupt),
        cluster(options),
        atomic_location(tmp_path / "out.zarr") as temp,
    ):
        zarr.open_group(temp.store, mode="w")
        raise KeyboardInterrupt  # Ctrl-C mid-write
    assert seen["cluster"] == "Status.closed"
    assert list(tmp_path.iterdir()) == []


def test_two_writers_to_one_destination(tmp_path):
    """Started at once with the same --out: one wins, the other exits 2 with one line."""
    X = np.random.default_rng(3).normal(size=(3000, 8))
    zarr.create_array(tmp_path / "X.zarr", data=X, chunks=(500, 8))
    out = tmp_path / "model.zarr"
    argv = [sys.executable, "-m", "dkpca", "fit", str(tmp_path / "X.zarr"), "--out", str(out),
            "--n-components", "3", "--solver", "nystrom", "--n-landmarks", "200",
            "--random-state", "0", "--workers", "1", "--threads-per-worker", "1", "--quiet"]
    writers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    outputs = [w.communicate(timeout=TIMEOUT) for w in writers]
    results = [(w.returncode, *output) for w, output in zip(writers, outputs, strict=True)]
    assert sorted(status for status, _, _ in results) == [0, 2], results
    (loser,) = [err for status, _, err in results if status == 2]
    lines = loser.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dkpca: error: ")
    assert "already exists" in lines[0] or "another writer was first" in lines[0]
    model = dkpca.load(out)  # complete and loadable
    assert model.n_components_ == 3
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["X.zarr", "model.zarr"]


def test_ctrl_c_mid_fit_prints_one_line(tmp_path):
    """Ctrl-C at a terminal reaches the whole process group, the embedded cluster's workers
    included: the command still prints its one line, and no worker or scheduler tracebacks."""
    zarr.create_array(tmp_path / "X.zarr", data=np.random.default_rng(4).normal(size=(12_000, 20)),
                      chunks=(500, 20))
    argv = ["dkpca", "fit", str(tmp_path / "X.zarr"), "--out", str(tmp_path / "model.zarr"),
            "--n-components", "3", "--solver", "randomized", "--max-memory", "1MiB",
            "--random-state", "0", "--workers", "2", "--threads-per-worker", "1",
            "--progress-interval", "1000"]
    start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, "
             f"signal.default_int_handler); sys.argv = {argv!r}; "
             "runpy.run_module('dkpca', run_name='__main__')")
    process = subprocess.Popen([sys.executable, "-c", start], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        before = []
        for line in process.stderr:  # the fit's log: interrupt once its Krylov passes run
            before.append(line)
            if "Krylov pass 1 " in line:
                break
        assert process.poll() is None, "".join(before)[-3000:]
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: every process of it
        _, after = process.communicate(timeout=TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, after[-3000:]
    assert len(after.strip().splitlines()) <= 2, after[-3000:]
    assert after.strip().endswith("dkpca: interrupted; no output was written")
    assert _session_ends(process.pid)
    assert [p.name for p in tmp_path.iterdir()] == ["X.zarr"]
