"""A Krylov pass through shared memory: workers on the client's machine, called directly.

On a ``LocalCluster`` a pass writes ``V`` once into ``/dev/shm``, calls each holder's worker
straight from the client (no task, no scheduler) and reads the partials from files the
workers wrote. The numbers must be those of the task-and-socket path, bit for bit; nothing
may be left in ``/dev/shm``; and wherever shared memory is off, missing, full or not shared
with a worker, the sockets take over.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import tasks_run

import dkpca._shared_memory as shared_memory
from dkpca._shared_memory import (
    PREFIX,
    HolderStateMissing,
    PassFiles,
    SharedFiles,
    SharedMemoryFull,
    shared_memory_reaches,
    shared_product,
)
from dkpca.kernels import RBF
from dkpca.tiles import KernelTiles, cache_kernel_tiles

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(not os.path.isdir(shared_memory.SHARED_DIR),
                       reason="no shared-memory file system"),
]


def _files() -> set[str]:
    return {name for name in os.listdir(shared_memory.SHARED_DIR) if name.startswith(PREFIX)}


def _tiles(n: int = 2_000, block_rows: int = 300):
    X = np.random.default_rng(0).normal(size=(n, 8))
    return cache_kernel_tiles(RBF(gamma=0.1), X, block_bytes=block_rows**2 * 8, dtype="float64")


def _V(n: int = 2_000) -> np.ndarray:
    return np.random.default_rng(1).normal(size=(n, 4))


@pytest.mark.parametrize("layout", ["symmetric", "stripes"])
def test_a_pass_calls_each_worker_once_runs_no_task_and_equals_the_sockets(
        process_client, monkeypatch, layout):
    calls = []
    call = shared_memory._call

    async def counting(client, address, **message):
        calls.append(address)
        return await call(client, address, **message)

    monkeypatch.setattr(shared_memory, "_call", counting)
    V = _V()
    with dask.config.set({"dkpca.tile-layout": layout}):
        tiles = _tiles()
        assert tiles.layout == layout and tiles.n_tiles >= 20
        tasks = tasks_run(process_client, lambda: tiles.matmul(V))  # the first pass probes
        calls.clear()
        shared = tiles.matmul(V)
        assert tiles._shared is True
        assert sorted(calls) == sorted(h.address for h in tiles.holders)
        assert len(set(calls)) == 2
        tiles._shared = False
        sockets = tiles.matmul(V)
    assert tasks == 2  # the probe's one task on each worker; the pass itself runs none
    np.testing.assert_array_equal(shared, sockets)


def test_no_task_runs_in_a_pass_after_the_probe(process_client):
    tiles, V = _tiles(), _V()
    tiles.matmul(V)
    assert tasks_run(process_client, lambda: tiles.matmul(V)) == 0


def test_a_fit_on_worker_processes_equals_the_threaded_fit_and_leaves_no_file(process_client):
    from dkpca import KernelPCA

    X = np.random.default_rng(0).normal(size=(1_500, 6))
    before = _files()
    on_cluster = KernelPCA(4, kernel="rbf", gamma=0.2, random_state=0).fit(X)
    assert _files() == before
    with dask.config.set(scheduler="threads"):
        threaded = KernelPCA(4, kernel="rbf", gamma=0.2, random_state=0).fit(X)
    np.testing.assert_allclose(on_cluster.eigenvalues_, threaded.eigenvalues_, rtol=1e-10)


def test_a_pass_that_fails_on_a_worker_raises_and_leaves_no_file(process_client):
    before = _files()
    tiles = _tiles()
    tiles.matmul(_V())
    assert len(_files() - before) == 5  # V, and a double-double partial for each holder
    with pytest.raises(ValueError):  # V's rows do not match the tiles'
        tiles.matmul(_V(1_000))
    assert _files() == before
    assert tiles.matmul(_V()).shape == (2_000, 4)  # the next pass makes its files anew
    tiles.release()  # the error's traceback holds this frame until a garbage collection
    assert _files() == before


@pytest.mark.parametrize("layout", ["symmetric", "stripes"])
def test_the_files_are_kept_from_pass_to_pass_and_removed_with_the_tiles(process_client,
                                                                         layout):
    before = _files()
    V = _V()
    with dask.config.set({"dkpca.tile-layout": layout}):
        tiles = _tiles()
    first = tiles.matmul(V)
    kept = _files() - before
    assert kept
    kept_first = first.copy()
    second = tiles.matmul(2 * V)  # the same files, written again
    assert _files() - before == kept
    np.testing.assert_array_equal(first, kept_first)  # a result is not the files' memory
    np.testing.assert_array_equal(second, 2 * first)
    tiles.matmul(V[:, :3])  # another width: new files, the old ones removed
    assert not (_files() - before) & kept
    del tiles
    assert _files() == before


def test_released_tiles_remove_their_files_and_the_workers_drop_their_mappings(process_client):
    import time

    before = _files()
    tiles = _tiles()
    tiles.matmul(_V())

    def mapped(dask_worker):
        return len(dask_worker.plugins[shared_memory.HANDLER].mapped)

    assert sorted(process_client.run(mapped).values()) == [1, 1]  # one holder on each worker
    tiles.release()
    assert _files() == before
    deadline = time.monotonic() + 10
    while sum(process_client.run(mapped).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(process_client.run(mapped).values()) == 0


def test_a_full_shared_memory_sends_the_passes_through_sockets(process_client, monkeypatch,
                                                               caplog):
    tiles, V, narrower = _tiles(), _V(), _V()[:, :3]
    shared = tiles.matmul(narrower)
    tiles.matmul(V)  # the files kept are V's width now

    def full(self, shape):
        raise SharedMemoryFull("no space left")

    monkeypatch.setattr(SharedFiles, "create", full)
    with caplog.at_level(logging.INFO, logger="dkpca.tiles"):
        np.testing.assert_array_equal(tiles.matmul(narrower), shared)
    assert tiles._shared is False
    assert "through tasks and sockets from now on: no space left" in caplog.text


def test_a_worker_without_the_state_says_so(process_client):
    tiles, V = _tiles(), _V()
    tiles.matmul(V)

    class Gone:
        key = "a-state-no-worker-holds"

    spans = [(0, V.shape[0])] * len(tiles.holders)
    with pytest.raises(HolderStateMissing, match="a-state-no-worker-holds"):
        shared_product(process_client, tiles.holders, [Gone()] * len(tiles.holders), spans, V,
                       exclusive=True, files=PassFiles())


def test_a_streamed_pass_waits_for_the_states_and_keeps_shared_memory(process_client, caplog):
    # Streamed states are not waited for when built: the first pass, a direct call, used to
    # reach a worker before its state did (an ERROR there) and give shared memory up for good.
    X, V = np.random.default_rng(0).normal(size=(1_000, 8)), _V(1_000)
    with caplog.at_level(logging.INFO, logger="dkpca.tiles"):
        tiles = KernelTiles(RBF(gamma=0.1), da.from_array(X, chunks=(100, 2)),
                            block_bytes=128 * 128 * 8, dtype=np.dtype("float64"), cached=False)
        got = tiles.matmul(V)
    assert tiles._shared is True
    assert "from now on" not in caplog.text
    keys = {state.key for state in tiles.states}
    missing = [message for logs in process_client.get_worker_logs().values()
               for level, message in logs
               if level == "ERROR" and any(key in message for key in keys)]
    assert not missing
    np.testing.assert_allclose(got, RBF(gamma=0.1).pairwise(X) @ V, rtol=1e-12, atol=1e-12)


def test_shared_memory_off_or_missing_means_sockets(process_client, monkeypatch):
    addresses = sorted(process_client.scheduler_info()["workers"])
    assert shared_memory_reaches(process_client, addresses)
    with dask.config.set({"dkpca.shared-memory": False}):
        assert not shared_memory_reaches(process_client, addresses)
    with dask.config.set({"dkpca.shared-memory": "sometimes"}), \
            pytest.raises(ValueError, match="'auto', True or False"):
        shared_memory_reaches(process_client, addresses)
    monkeypatch.setattr(shared_memory, "SHARED_DIR", "/no/such/dir")
    assert not shared_memory_reaches(process_client, addresses)


def test_a_worker_that_cannot_read_the_probe_means_sockets(client, monkeypatch, caplog):
    # The in-process cluster's workers share this module: make them read a different file.
    monkeypatch.setattr(shared_memory, "_reads", lambda probe, token: False)
    tiles, V = _tiles(), _V()
    with caplog.at_level(logging.INFO, logger="dkpca._shared_memory"):
        product = tiles.matmul(V)
    assert tiles._shared is False and "a worker has its own" in caplog.text
    with dask.config.set(scheduler="threads"):
        np.testing.assert_allclose(product, _tiles().matmul(V), rtol=1e-12, atol=1e-12)


def test_a_file_left_by_a_dead_client_is_removed(process_client):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    orphan = os.path.join(shared_memory.SHARED_DIR, f"{PREFIX}{int(dead.stdout)}-0123456789ab")
    ours = os.path.join(shared_memory.SHARED_DIR, f"{PREFIX}{os.getpid()}-0123456789ab")
    for path in (orphan, ours):
        open(path, "wb").close()
    try:
        shared_memory_reaches(process_client, sorted(process_client.scheduler_info()["workers"]))
        assert not os.path.exists(orphan) and os.path.exists(ours)
    finally:
        for path in (orphan, ours):
            if os.path.exists(path):
                os.unlink(path)


def test_a_probe_of_a_vanished_worker_gives_up_and_means_sockets(process_client, monkeypatch):
    # Right after a kill, a recovery can still list the dead worker: a probe task pinned to
    # it would wait for ever (a hang seen in CI), so the probe gives up and the sockets serve.
    monkeypatch.setattr(shared_memory, "PROBE_TIMEOUT", 1.0)
    addresses = [*sorted(process_client.scheduler_info()["workers"]), "tcp://127.0.0.1:9"]
    assert not shared_memory_reaches(process_client, addresses)
