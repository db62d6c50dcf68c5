"""The ``dkpca`` command as a batch system sees it, with real processes.

A scheduler that comes up late (a pod still pending) is waited for; one that never comes, or
dies mid-run, ends the command with the transient status 75 that the Jobs retry; a user error
keeps status 2. Progress is a bar on a terminal and plain lines in a log (``kubectl logs``).
"""

from __future__ import annotations

import os
import pty
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from test_cluster import write_tls_files  # tests/ is on sys.path (pytest's rootdir import)

import dkpca
from dkpca._errors import EXIT_TRANSIENT, EXIT_USAGE
from dkpca.cluster import WORKER_ENV
from dkpca.datasets import make_two_rings

pytestmark = pytest.mark.distributed

#: The issue's start-up race: the scheduler comes up this long after the command.
CLI_TIMEOUT = 300


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _dkpca(*argv: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "DASK_ARRAY__QUERY_PLANNING": "False", "MPLBACKEND": "Agg"}
    return subprocess.Popen([sys.executable, "-m", "dkpca", *argv], env=env, text=True,
                            **popen)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)


class Cluster:
    """A TLS ``dask scheduler`` on a chosen port and one ``dask worker``, as processes."""

    def __init__(self, folder: Path, port: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.address = f"tls://127.0.0.1:{port}"
        ca, cert, key = write_tls_files(folder)
        self.options = ["--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key)]
        self.processes: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, argv: list[str]) -> None:
        with (self.folder / f"{name}.log").open("w") as log:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "dask", *argv, *self.options], stdout=log,
                stderr=subprocess.STDOUT, env={**os.environ, **WORKER_ENV})

    def start(self) -> None:
        port = self.address.rpartition(":")[2]
        self._start("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", port,
                                  "--protocol", "tls", "--no-dashboard"])
        self._start("worker", ["worker", self.address, "--nthreads", "1", "--memory-limit",
                               "2GiB", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"])

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text()

    def stop(self) -> None:
        for process in self.processes.values():
            _stop(process)


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path / "cluster", _free_port())
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def rings(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "rings.zarr"
    R, _, _ = make_two_rings(1000, random_state=0)
    zarr.create_array(path, data=R, chunks=(250, R.shape[1]))
    return path, R


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dkpca: error: ")]


@pytest.mark.slow  # 27 s: a scheduler started late (make test-all runs the waits)
def test_fit_waits_for_a_scheduler_that_comes_up_late(cluster, rings, tmp_path):
    path, R = rings
    out = tmp_path / "model.zarr"
    fit = _dkpca("fit", str(path), "--out", str(out), "--n-components", "2", "--gamma", "0.5",
                 "--solver", "exact", "--scheduler", cluster.address, *cluster.options,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = []
        for line in fit.stderr:  # the scheduler comes up once an attempt has failed
            seen.append(line)
            if "not reachable yet (attempt 1, " in line:
                break
        assert fit.poll() is None, "".join(seen)  # still waiting, not failed
        cluster.start()
        stdout, rest = fit.communicate(timeout=CLI_TIMEOUT)
        stderr = "".join(seen) + rest
    finally:
        _stop(fit)
    assert fit.returncode == 0, stderr[-3000:] + cluster.log("scheduler")[-2000:]
    attempts = re.findall(r"scheduler \S+ not reachable yet \(attempt (\d+), ", stderr)
    assert attempts[:1] == ["1"], stderr[-3000:]
    assert "connected to scheduler" in stderr and "fitted RBF(gamma=0.5)" in stdout
    reference = dkpca.KernelPCA(2, gamma=0.5, solver="exact").fit(R)
    np.testing.assert_allclose(dkpca.load(out).eigenvalues_, reference.eigenvalues_, rtol=1e-9)


@pytest.mark.slow  # 26 s (a 20 s wait); test_a_scheduler_lost_mid_run_is_transient checks status 75
def test_a_scheduler_that_never_comes_is_transient(tmp_path, rings):
    path, _ = rings
    address = f"tcp://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    fit = _dkpca("fit", str(path), "--out", str(tmp_path / "m.zarr"), "--scheduler", address,
                 "--scheduler-timeout", "20", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = fit.communicate(timeout=CLI_TIMEOUT)
    assert fit.returncode == EXIT_TRANSIENT, stderr[-3000:]
    assert 20 <= time.monotonic() - started < 80
    (error,) = _error_lines(stderr)
    assert error.startswith(f"dkpca: error: cannot connect to scheduler {address}: not "
                            "reachable in 20 s (2 attempts)")
    assert "not reachable yet (attempt 1, " in stderr
    assert stdout == "" and list(tmp_path.iterdir()) == []


def test_user_errors_keep_status_2(tmp_path, rings):
    path, _ = rings
    for extra in (["--scheduler-timeout", "5"],  # no --scheduler: nothing to wait for
                  ["--scheduler", "tcp://127.0.0.1:1", "--workers", "2"]):
        fit = _dkpca("fit", str(path), "--out", str(tmp_path / "m.zarr"), *extra,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, stderr = fit.communicate(timeout=CLI_TIMEOUT)
        assert fit.returncode == EXIT_USAGE, stderr
        assert len(_error_lines(stderr)) == 1


def test_a_scheduler_lost_mid_run_is_transient(cluster, rings, tmp_path):
    cluster.start()
    path, _ = rings
    plot = tmp_path / "selection.png"
    log = tmp_path / "select.log"
    with log.open("w") as stderr:
        select = _dkpca("select", str(path), "--plot", str(plot), "--scheduler",
                        cluster.address, *cluster.options, "--progress-interval", "0.5",
                        stdout=subprocess.PIPE, stderr=stderr)
    try:
        deadline = time.monotonic() + CLI_TIMEOUT
        while not re.search(r"select, step \d+.*% of \d+ tasks", log.read_text()):
            assert select.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        cluster.processes["scheduler"].send_signal(signal.SIGKILL)
        select.wait(timeout=CLI_TIMEOUT)
    finally:
        _stop(select)
    stderr = log.read_text()
    assert select.returncode == EXIT_TRANSIENT, stderr[-3000:]
    (error,) = _error_lines(stderr)
    assert error.startswith(f"dkpca: error: lost the connection to scheduler {cluster.address}")
    assert not plot.exists()


def _select_args(path: Path, tmp_path: Path, name: str) -> list[str]:
    return ["select", str(path), "--plot", str(tmp_path / f"{name}.png"), "--n-draws", "20",
            "--workers", "1", "--threads-per-worker", "1", "--progress-interval", "0.5"]


def test_progress_in_a_log_is_lines(rings, tmp_path):
    path, _ = rings
    select = _dkpca(*_select_args(path, tmp_path, "log"), stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    _, stderr = select.communicate(timeout=CLI_TIMEOUT)
    assert select.returncode == 0, stderr[-3000:]
    assert "\r" not in stderr
    pattern = (r"select, step \d+( \(\S+\))?: \d+% of \d+ tasks \(\d+ done\), [\d.hms ]+ "
               r"elapsed, (about [\d.hms ]+ left|done|time left not known yet)")
    progress = [line for line in stderr.splitlines() if line.startswith("select, step")]
    assert len(progress) >= 3, stderr[-3000:]
    assert all(re.fullmatch(pattern, line) for line in progress), progress
    assert any("about" in line for line in progress) and progress[-1].endswith("done")


@pytest.mark.slow  # 20 s; test_progress_in_a_log_is_lines checks the same progress as lines
def test_progress_on_a_terminal_is_a_bar(rings, tmp_path):
    path, _ = rings
    controller, terminal = pty.openpty()
    try:
        select = _dkpca(*_select_args(path, tmp_path, "tty"), stdout=subprocess.PIPE,
                        stderr=terminal)
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        select.wait(timeout=CLI_TIMEOUT)
    finally:
        os.close(controller)
    drawn = b"".join(chunks).decode()
    assert select.returncode == 0, drawn[-3000:]
    assert re.search(r"\r\[#*\s*\] \|\s+\d+% of \d+ tasks \| ", drawn), drawn[-3000:]
    assert "select, step" not in drawn  # no log lines on a terminal
