"""A real TLS cluster: scheduler and worker as separate processes on loopback, ``dkpca fit`` on it.

The certificates are made in the test (``write_tls_files`` of ``test_cluster.py``); clients
without them, with plain TCP or with a certificate from another CA are refused.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr

import dkpca
from dkpca._cluster_workers import cluster_workers
from dkpca.cli import main
from dkpca.cluster import WORKER_ENV, connect, tls_security

distributed = pytest.importorskip("distributed")


def _load_cluster_tests():
    """``tests/test_cluster.py`` as a module (``tests`` is not a package)."""
    path = Path(__file__).with_name("test_cluster.py")
    spec = importlib.util.spec_from_file_location("_dkpca_test_cluster", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cluster_tests = _load_cluster_tests()
write_tls_files = _cluster_tests.write_tls_files
restore_dask_config = _cluster_tests.restore_dask_config  # autouse here too

pytestmark = pytest.mark.distributed

STARTUP_TIMEOUT = 60.0
CLI_TIMEOUT = 180


@dataclass
class TLSCluster:
    address: str
    ca: Path
    cert: Path
    key: Path
    scheduler_log: Path

    @property
    def options(self) -> list[str]:
        return ["--tls-ca-file", str(self.ca), "--tls-cert", str(self.cert),
                "--tls-key", str(self.key)]

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])


def _stop(process: subprocess.Popen) -> None:
    """Stop a process this module started: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)


def _wait_for(condition, what: str, processes: dict[str, tuple[subprocess.Popen, Path]]):
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not condition():
        for name, (process, log) in processes.items():
            if process.poll() is not None:
                pytest.fail(f"{name} exited ({process.returncode}) before {what}:\n"
                            f"{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {STARTUP_TIMEOUT} s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """``dask scheduler`` and ``dask worker`` processes on tls://127.0.0.1, torn down after."""
    folder = tmp_path_factory.mktemp("tls-cluster")
    ca, cert, key = write_tls_files(folder)
    tls = ["--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key)]
    scheduler_file = folder / "scheduler.json"
    env = {**os.environ, **WORKER_ENV}
    started: dict[str, tuple[subprocess.Popen, Path]] = {}

    def start(name: str, argv: list[str]) -> None:
        log = folder / f"{name}.log"
        with log.open("w") as stream:
            process = subprocess.Popen([sys.executable, "-m", "dask", *argv], stdout=stream,
                                       stderr=subprocess.STDOUT, env=env)
        started[name] = process, log

    try:
        start("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol",
                            "tls", "--no-dashboard", "--scheduler-file", str(scheduler_file),
                            *tls])
        _wait_for(scheduler_file.exists, "scheduler file", started)
        _wait_for(lambda: "address" in scheduler_file.read_text(), "scheduler address", started)
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tls://127.0.0.1:")
        start("worker", ["worker", address, "--nthreads", "1", "--memory-limit", "1GiB",
                         "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", *tls])
        with connect(address, security=tls_security(ca, cert, key)) as client:
            _wait_for(lambda: len(cluster_workers(client)) == 1,
                      "registered worker", started)
        yield TLSCluster(address, ca, cert, key, started["scheduler"][1])
    finally:
        for name in ("worker", "scheduler"):
            if name in started:
                _stop(started[name][0])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-data")
    X = np.random.default_rng(0).normal(size=(300, 4))
    zarr.create_array(folder / "X.zarr", data=X, chunks=(100, 4))
    return folder / "X.zarr", X


def _dkpca(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dkpca", *argv], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT, check=False)


def _transitions(cluster: TLSCluster) -> int:
    security = tls_security(cluster.ca, cluster.cert, cluster.key)
    with connect(cluster.address, security=security) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


def test_cluster_is_tls_only_and_has_one_worker(tls_cluster):
    security = tls_security(tls_cluster.ca, tls_cluster.cert, tls_cluster.key)
    with connect(tls_cluster.address, security=security) as client:
        workers = cluster_workers(client)
        assert len(workers) == 1
        assert all(address.startswith("tls://127.0.0.1:") for address in workers)
        (pid,) = client.run(os.getpid).values()
        assert pid != os.getpid()  # a separate process, not an in-process worker
        assert client.submit(sum, [1, 2]).result() == 3


def test_dkpca_fit_on_the_tls_cluster(tls_cluster, data, tmp_path):
    path, X = data
    model_path = tmp_path / "model.zarr"
    before = _transitions(tls_cluster)
    result = _dkpca("fit", str(path), "--out", str(model_path), "--n-components", "2",
                    "--gamma", "0.25", "--solver", "exact", "--scheduler", tls_cluster.address,
                    *tls_cluster.options, "--quiet")
    assert result.returncode == 0, result.stderr
    assert "fitted RBF(gamma=0.25) kernel PCA (exact) on 300 x 4: 2 components" in result.stdout
    assert _transitions(tls_cluster) > before  # the tasks ran on the cluster's worker

    model = dkpca.load(model_path)
    reference = dkpca.KernelPCA(2, gamma=0.25, solver="exact").fit(X)
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    scores, expected = model.transform(X), reference.transform(X)
    np.testing.assert_allclose(np.abs(scores), np.abs(expected), atol=1e-8)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zarr"]  # no temporary left


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dkpca: error: "), captured.err
    assert captured.out == ""
    return lines[0]


def test_cli_refuses_tls_address_without_certificates(tls_cluster, data, tmp_path, capsys):
    path, _ = data
    status = main(["fit", str(path), "--out", str(tmp_path / "m.zarr"), "--n-components", "2",
                   "--scheduler", tls_cluster.address, "--quiet"])
    assert status == 2
    assert "uses TLS, but no certificates were given" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_tcp_address_with_certificates(tls_cluster, data, tmp_path, capsys):
    path, _ = data
    tcp = tls_cluster.address.replace("tls://", "tcp://")
    status = main(["fit", str(path), "--out", str(tmp_path / "m.zarr"), "--n-components", "2",
                   "--scheduler", tcp, *tls_cluster.options, "--quiet"])
    assert status == 2
    assert f"must start with tls://, got {tcp}" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_scheduler_refuses_clients_without_certificates(tls_cluster):
    address = tls_cluster.address
    # Plain TCP reaches the TLS listener, which drops it.
    with pytest.raises(OSError):
        distributed.Client(address.replace("tls://", "tcp://"), timeout="3s")
    # distributed has no client context for tls:// without certificates: refused client side.
    with pytest.raises(TypeError, match="ssl_context"):
        distributed.Client(address, timeout="3s")
    # A TLS client that trusts the CA but shows no certificate of its own completes its side
    # of the handshake, then the scheduler refuses it (mutual TLS): the client reads a
    # "certificate required" alert, or an EOF when the scheduler closed first.
    context = ssl.create_default_context(cafile=str(tls_cluster.ca))
    context.check_hostname = False
    refusal = "did not return a certificate"
    refusals = tls_cluster.scheduler_log.read_text().count(refusal)
    with (
        pytest.raises(OSError),  # ssl.SSLError (alert or EOF) or a reset connection
        socket.create_connection(("127.0.0.1", tls_cluster.port), timeout=5) as raw,
        context.wrap_socket(raw) as connection,
    ):
        connection.sendall(b"hello")
        connection.recv(16)
    # the scheduler's own account of it
    deadline = time.monotonic() + 10
    while tls_cluster.scheduler_log.read_text().count(refusal) == refusals:
        assert time.monotonic() < deadline, tls_cluster.scheduler_log.read_text()[-3000:]
        time.sleep(0.1)


def test_scheduler_refuses_certificate_from_another_ca(tls_cluster, data, tmp_path):
    folder = tmp_path / "stranger"
    folder.mkdir()
    ca, cert, key = write_tls_files(folder, name="stranger")
    with (
        pytest.raises(ConnectionError, match="TLS certificate does not match"),
        connect(tls_cluster.address, security=tls_security(ca, cert, key)),
    ):
        pass
    # and from the command line: one line, status 2, nothing written
    path, _ = data
    result = _dkpca("fit", str(path), "--out", str(tmp_path / "m.zarr"), "--n-components", "2",
                    "--scheduler", tls_cluster.address, "--tls-ca-file", str(ca),
                    "--tls-cert", str(cert), "--tls-key", str(key), "--quiet")
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dkpca: error: cannot connect to scheduler")
    assert "TLS certificate does not match" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stranger"]
