"""Tests for dkpca.cluster: TLS options and connecting to embedded or running clusters."""

from __future__ import annotations

import datetime
import gc
import ipaddress
import logging
from pathlib import Path

import dask
import distributed
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dkpca._cluster_workers import cluster_workers
from dkpca.cluster import QUIET_HOUSEKEEPING, connect, quiet_housekeeping, tls_security


@pytest.fixture(autouse=True)
def restore_dask_config():
    """A Client that fails to connect never closes, and leaves itself the default scheduler."""
    saved = dask.config.get("scheduler", None)
    yield
    gc.collect()  # and drop such a half-built client, which distributed still holds as default
    if saved is None:
        dask.config.config.pop("scheduler", None)
    else:
        dask.config.set(scheduler=saved)


def write_tls_files(directory: Path, name: str = "dkpca test") -> tuple[Path, Path, Path]:
    """Write a self-signed CA and a localhost certificate it signed, as PEM; return the paths."""
    now = datetime.datetime.now(datetime.UTC)
    valid = {
        "not_valid_before": now - datetime.timedelta(minutes=5),
        "not_valid_after": now + datetime.timedelta(days=1),
    }
    ca_key = ec.generate_private_key(ec.SECP256R1())  # EC: far faster to make than RSA
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (
        x509.CertificateBuilder(
            subject_name=ca_name,
            issuer_name=ca_name,
            public_key=ca_key.public_key(),
            serial_number=x509.random_serial_number(),
            **valid,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder(
            subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]),
            issuer_name=ca_name,
            public_key=key.public_key(),
            serial_number=x509.random_serial_number(),
            **valid,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # one certificate for every role, so it must be good for both ends of a connection
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[Path, Path, Path]:
    return write_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def security(tls_files):
    return tls_security(*tls_files)


@pytest.fixture
def tls_client(security):
    """A client to an embedded in-process TLS cluster started by ``connect``."""
    with connect(n_workers=1, threads_per_worker=1, processes=False, security=security) as c:
        yield c


# --- tls_security -------------------------------------------------------------------------


def test_tls_security_none_without_options():
    assert tls_security() is None
    assert tls_security(None, None, None) is None


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"cert": "c", "key": "k"}, "--tls-ca-file"),
        ({"ca_file": "a", "key": "k"}, "--tls-cert"),
        ({"ca_file": "a", "cert": "c"}, "--tls-key"),
        ({"ca_file": "a"}, "--tls-cert, --tls-key"),
    ],
)
def test_tls_security_names_missing_option(given, missing):
    with pytest.raises(ValueError, match=f"missing: {missing}$"):
        tls_security(**given)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_tls_security_missing_file(tls_files, tmp_path, which):
    paths = list(tls_files)
    paths[which] = tmp_path / "absent.pem"
    with pytest.raises(ValueError, match="TLS certificate file not found: .*absent.pem"):
        tls_security(*paths)


def test_tls_security_rejects_mismatched_files(tls_files):
    ca, cert, key = tls_files
    with pytest.raises(ValueError, match="TLS files do not load"):
        tls_security(ca, key, cert)  # certificate and key swapped


def test_tls_security_one_certificate_for_all_roles(tls_files):
    ca, cert, key = tls_files
    sec = tls_security(str(ca), cert, key)  # str and Path both accepted
    assert isinstance(sec, distributed.Security)
    assert sec.require_encryption
    assert sec.tls_ca_file == str(ca)
    for role in ("client", "scheduler", "worker"):
        assert getattr(sec, f"tls_{role}_cert") == str(cert)
        assert getattr(sec, f"tls_{role}_key") == str(key)


# --- connect: address checks, before any connection is tried ------------------------------


def test_connect_refuses_tcp_address_with_tls(security):
    with (
        pytest.raises(ValueError, match="must start with tls://, got tcp://127.0.0.1:1"),
        connect("tcp://127.0.0.1:1", security=security),
    ):
        pass


def test_connect_refuses_tls_address_without_certificates():
    with (
        pytest.raises(ValueError, match="pass --tls-ca-file, --tls-cert and --tls-key"),
        connect("tls://127.0.0.1:1"),
    ):
        pass


# --- connect: live TLS clusters ------------------------------------------------------------


@pytest.mark.distributed
def test_connect_embedded_tls_cluster(tls_client):
    assert tls_client.scheduler.address.startswith("tls://")
    assert tls_client.submit(sum, [1, 2]).result() == 3
    workers = cluster_workers(tls_client)
    assert len(workers) == 1
    assert all(address.startswith("tls://") for address in workers)


@pytest.mark.distributed
def test_connect_to_running_tls_scheduler(tls_client, security):
    address = tls_client.scheduler.address
    with connect(address, security=security) as client:
        assert client.scheduler.address == address
        assert client.submit(sum, [1, 2]).result() == 3
    # a bare host:port is taken to mean tls:// when TLS is configured
    with connect(address.removeprefix("tls://"), security=security) as client:
        assert client.scheduler.address == address


@pytest.mark.distributed
def test_running_tls_scheduler_refuses_clients_without_certificates(tls_client, security):
    address = tls_client.scheduler.address
    # Without a Security, distributed has no SSL context for tls:// and fails on the client
    # side, before contacting the scheduler.
    with pytest.raises(TypeError, match="ssl_context"):
        distributed.Client(address, timeout="2s")
    # Plain TCP reaches the TLS listener, which drops it during the handshake.
    with pytest.raises(OSError):
        distributed.Client(address.replace("tls://", "tcp://"), timeout="2s")
    with (
        pytest.raises(ValueError, match="must start with tls://"),
        connect(address.replace("tls://", "tcp://"), security=security),
    ):
        pass


@pytest.mark.distributed
def test_running_tls_scheduler_refuses_certificate_from_another_ca(tls_client, tmp_path):
    stranger = tls_security(*write_tls_files(tmp_path, name="stranger"))
    with (
        pytest.raises(OSError, match="TLS certificate does not match"),
        connect(tls_client.scheduler.address, security=stranger),
    ):
        pass


def test_worker_preload_keeps_task_errors_cancellations_and_heartbeats_off_the_terminal(
        monkeypatch):
    # The command reports a failure in one line; the worker's own log of the failed task, and
    # of the tasks the closing cluster cancels, would print before it (seen in CI: a
    # "Async instruction ... ended with CancelledError" warning ahead of the NaN error).
    import signal

    from dkpca.cluster import dask_setup

    monkeypatch.setattr(signal, "signal", lambda *args: None)
    for name in ("distributed.worker", "distributed.worker.state_machine"):
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    dask_setup(None)

    def shown(name, message):
        record = logging.LogRecord(name, logging.WARNING, __file__, 0, message, None, None)
        return logging.getLogger(name).filter(record)

    assert not shown("distributed.worker", "Compute Failed\nKey: x")
    # the command closed its scheduler after an error, with the worker still running
    assert not shown("distributed.worker", "Failed to communicate with scheduler during heartbeat.")
    assert not shown("distributed.worker.state_machine",
                     "Async instruction for <Task cancelled name='execute(x)'> ended with "
                     "CancelledError")
    assert shown("distributed.worker", "Worker is at 90% memory usage")
    assert shown("distributed.worker.state_machine",
                 "Unhandled exception in async instruction for <Task>")


def _blas_threads() -> list[int]:
    import numpy  # noqa: F401  (its OpenBLAS is what the tiles use)
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def _housekeeping() -> dict[str, str]:
    return {key: dask.config.get(key) for key in QUIET_HOUSEKEEPING}


def test_embedded_worker_processes_start_with_one_blas_thread_and_quiet_housekeeping():
    # OpenBLAS sizes its pool when it is loaded: the variable must be there when the worker
    # process starts, whatever distributed's own defaults for its environment say.
    user_tick = {"distributed.admin.tick.interval": "50ms"}  # the user's own setting stays
    with (dask.config.set({"distributed.nanny.pre-spawn-environ": {}, **user_tick}),
          connect(n_workers=1, threads_per_worker=2, processes=True) as client):
        (threads,) = client.run(_blas_threads).values()
        (settings,) = client.run(_housekeeping).values()
        scheduler_ticks = client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.periodic_callbacks["tick"].callback_time)
    assert threads and set(threads) == {1}, threads
    assert settings == {"distributed.worker.profile.interval": "100ms", **user_tick}
    assert scheduler_ticks == 50  # ms: the scheduler started with the user's setting too
    assert _housekeeping()["distributed.worker.profile.interval"] == "10ms"  # restored


def test_quiet_housekeeping_lightens_only_the_defaults():
    with quiet_housekeeping():
        assert _housekeeping() == {key: quiet for key, (_, quiet) in QUIET_HOUSEKEEPING.items()}
    with (dask.config.set({"distributed.worker.profile.interval": "1s"}), quiet_housekeeping()):
        assert _housekeeping() == {"distributed.worker.profile.interval": "1s",
                                   "distributed.admin.tick.interval": "500ms"}
    assert _housekeeping() == {key: default for key, (default, _) in QUIET_HOUSEKEEPING.items()}
