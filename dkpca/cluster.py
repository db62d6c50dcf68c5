"""Dask clusters for the command line: an embedded ``LocalCluster`` or a running scheduler.

The library itself never starts a cluster; it uses whatever scheduler is active. The ``dkpca``
command calls :func:`connect` to get one, optionally over TLS with certificates from
:func:`tls_security`. A running scheduler may not be up yet (a pod still pending, an image
still pulling), so :func:`connect` waits for it, retrying with backoff.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import ssl
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import dask

from dkpca._errors import TransientError

if TYPE_CHECKING:  # distributed is imported lazily: `import dkpca` must not pay for it
    from distributed import Client, Security

__all__ = ["QUIET_HOUSEKEEPING", "connect", "dask_setup", "quiet_housekeeping", "spawned_with",
           "tls_security"]

logger = logging.getLogger(__name__)

#: Worker environment: BLAS single-threaded, dask threads supply the parallelism.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

#: Housekeeping settings of distributed that cost cores on a small machine: their default and
#: the lighter value :func:`quiet_housekeeping` gives them. Each worker samples its threads'
#: stacks every 10 ms for the dashboard's profile, and every server (scheduler, nannies,
#: workers) wakes every 20 ms to measure its event loop's delay. An idle ``LocalCluster`` of
#: two single-threaded workers used 19 % of a core with the defaults and 6 % with these on a
#: 2-core machine (BENCHMARKS.md §8), time taken from the workers' products. The profile is
#: still sampled, ten times a second, and a blocked event loop still reported: the 3 s
#: ``distributed.admin.tick.limit`` is six of these ticks.
QUIET_HOUSEKEEPING = {
    "distributed.worker.profile.interval": ("10ms", "100ms"),
    "distributed.admin.tick.interval": ("20ms", "500ms"),
}

_TLS = "tls://"

#: Seconds :func:`connect` waits for a scheduler by default: long enough for a cold pod.
SCHEDULER_TIMEOUT = 600.0
#: Seconds one connection attempt may take (distributed retries quickly within it).
_ATTEMPT_SECONDS = 15.0
#: Pauses between attempts double from the first to the last.
_FIRST_PAUSE, _LONGEST_PAUSE = 1.0, 30.0


def tls_security(
    ca_file: str | os.PathLike[str] | None = None,
    cert: str | os.PathLike[str] | None = None,
    key: str | os.PathLike[str] | None = None,
) -> Security | None:
    """Build the ``distributed.Security`` for a TLS cluster, or ``None`` without options.

    One certificate serves every role: the client, and the scheduler and workers of an
    embedded cluster. Encryption is then required, so plain ``tcp://`` is refused.

    Parameters
    ----------
    ca_file : str or os.PathLike, optional
        PEM file of the certificate authority that signed ``cert`` (``--tls-ca-file``).
    cert : str or os.PathLike, optional
        PEM certificate of this client and of the embedded scheduler and workers
        (``--tls-cert``).
    key : str or os.PathLike, optional
        PEM private key that goes with ``cert`` (``--tls-key``).

    Returns
    -------
    distributed.Security or None
        ``None`` when all three are ``None``; otherwise a ``Security`` with
        ``require_encryption=True``.

    Raises
    ------
    ValueError
        If only some of the three options are given (the message names the missing ones), if
        a file does not exist, or if the certificate and key cannot be loaded together.

    See Also
    --------
    connect : uses the result to reach or start a TLS cluster.

    Notes
    -----
    Distributed uses mutual TLS: every peer, the client included, must present a certificate
    signed by ``ca_file``. It does not check host names (``check_hostname=False``), so trust
    comes from a CA dedicated to the cluster, not from the name in the certificate.

    Examples
    --------
    >>> tls_security() is None
    True
    >>> tls_security(cert="node.pem", key="node.key")
    Traceback (most recent call last):
    ...
    ValueError: TLS needs --tls-ca-file, --tls-cert and --tls-key together; missing: --tls-ca-file
    >>> sec = tls_security("ca.pem", "node.pem", "node.key")  # doctest: +SKIP
    >>> sec.require_encryption  # doctest: +SKIP
    True
    """
    options = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    if all(path is None for path in options.values()):
        return None
    missing = [option for option, path in options.items() if path is None]
    if missing:
        raise ValueError(
            "TLS needs --tls-ca-file, --tls-cert and --tls-key together; "
            f"missing: {', '.join(missing)}"
        )
    paths = {option: os.fspath(path) for option, path in options.items()}  # type: ignore[arg-type]
    for option, path in paths.items():
        if not os.path.isfile(path):
            raise ValueError(f"TLS certificate file not found: {path} ({option})")

    from distributed import Security

    ca_path, cert_path, key_path = paths.values()
    security = Security(
        tls_ca_file=ca_path,
        tls_client_cert=cert_path,
        tls_client_key=key_path,
        tls_scheduler_cert=cert_path,
        tls_scheduler_key=key_path,
        tls_worker_cert=cert_path,
        tls_worker_key=key_path,
        require_encryption=True,
    )
    # Security loads the files only on first connection; load them now so that a wrong file
    # fails here with the paths in the message, not deep inside a connection attempt.
    try:
        security.get_connection_args("client")
    except ssl.SSLError as err:
        raise ValueError(
            f"TLS files do not load ({err}): check that {cert_path} and {key_path} are a PEM "
            f"certificate and its private key, and {ca_path} a PEM CA certificate"
        ) from err
    logger.debug("TLS security from CA %s, certificate %s", ca_path, cert_path)
    return security


def dask_setup(worker: object) -> None:
    """Preload of the embedded cluster's worker processes: quiet about what the command reports.

    They ignore SIGINT (see :func:`_workers_ignore_sigint`), and a task's error is not logged
    by the worker with its traceback: the error reaches the command, which reports it in one
    line (``--debug``: with its traceback). Distributed runs this in each worker process's
    main thread once the worker started, so it also covers a worker its nanny restarts.

    Parameters
    ----------
    worker : distributed.Worker
        The worker that started (unused).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("distributed.worker").addFilter(_not_reported_by_the_command)
    # A task still running when the command closes the cluster after an error is cancelled,
    # and the worker's state machine warns of it: the command's own line says what happened.
    logging.getLogger("distributed.worker.state_machine").addFilter(_not_a_cancelled_task)


#: What an embedded worker would log that the command reports itself: a task's error, and a
#: heartbeat that fails because the command, after an error, closed its scheduler while the
#: worker was still running (seen in CI: 31 lines of traceback after the command's one line).
_REPORTED_BY_THE_COMMAND = ("Compute Failed", "Failed to communicate with scheduler during heartbeat")


def _not_reported_by_the_command(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_REPORTED_BY_THE_COMMAND)


def _not_a_cancelled_task(record: logging.LogRecord) -> bool:
    message = str(record.msg)
    return not (message.startswith("Async instruction for")
                and message.endswith("ended with CancelledError"))


@contextlib.contextmanager
def _workers_ignore_sigint() -> Iterator[None]:
    """Ignore SIGINT in this process while the embedded cluster starts its worker processes.

    A terminal sends Ctrl-C to its whole foreground process group, worker processes included:
    each would die printing its tracebacks, and the scheduler would log their lost tasks, some
    hundred lines before the command's own one. A worker process inherits an ignored SIGINT
    (and Python keeps it ignored), so the workers started here never see Ctrl-C; the
    interrupted command closes the cluster, which stops them in order. :func:`dask_setup`
    does the same for a worker restarted later. The price: a Ctrl-C in the second or two the
    cluster takes to start is lost.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set in the main thread, nor can Ctrl-C reach another
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)


@contextlib.contextmanager
def spawned_with(env: dict[str, str]) -> Iterator[None]:
    """Give the worker processes started inside the block ``env`` from their first instruction.

    A nanny's ``env`` argument is applied inside the worker after its interpreter has started:
    too late for OpenBLAS, which sizes its thread pool at import, and for numpy's huge-page
    hint and glibc's allocator settings, read once at start. Variables set through
    ``distributed.nanny.pre-spawn-environ``, as here, are there before any of them.

    Parameters
    ----------
    env : dict of str to str
        Environment variables, added to those already configured.

    Examples
    --------
    >>> import dask
    >>> with spawned_with({"OPENBLAS_NUM_THREADS": "1"}):
    ...     dask.config.get("distributed.nanny.pre-spawn-environ")["OPENBLAS_NUM_THREADS"]
    '1'
    """
    spawn = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), **env}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": spawn}):
        yield


@contextlib.contextmanager
def quiet_housekeeping() -> Iterator[None]:
    """Start clusters inside the block with lighter housekeeping (:data:`QUIET_HOUSEKEEPING`).

    Distributed's servers read these settings when they start, and a nanny hands its worker
    the configuration of the moment, so a cluster started inside the block keeps them for its
    whole life. A setting already changed from distributed's default (in a configuration file,
    the environment or an enclosing ``dask.config.set``) is left as it is. The embedded
    cluster of :func:`connect` starts inside it.

    Examples
    --------
    >>> import dask
    >>> with quiet_housekeeping():
    ...     dask.config.get("distributed.admin.tick.interval")
    '500ms'
    >>> with dask.config.set({"distributed.admin.tick.interval": "50ms"}), quiet_housekeeping():
    ...     dask.config.get("distributed.admin.tick.interval")
    '50ms'
    """
    import distributed  # noqa: F401  (its defaults enter dask's configuration on import)

    quiet = {key: value for key, (default, value) in QUIET_HOUSEKEEPING.items()
             if dask.config.get(key) == default}
    with dask.config.set(quiet):
        yield


def _scheduler_address(scheduler: str, security: Security | None) -> str:
    """Check ``scheduler`` against ``security``; a bare ``host:port`` gets ``tls://`` with TLS."""
    if security is None:
        if scheduler.startswith(_TLS):
            raise ValueError(
                f"scheduler address {scheduler} uses TLS, but no certificates were given: "
                "pass --tls-ca-file, --tls-cert and --tls-key"
            )
        return scheduler
    if "://" not in scheduler:
        return _TLS + scheduler
    if not scheduler.startswith(_TLS):
        raise ValueError(
            f"TLS is configured, so the scheduler address must start with tls://, got {scheduler}"
        )
    return scheduler


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _client_when_up(address: str, security: Security | None, timeout: float) -> Client:
    """Connect to ``address``, retrying with backoff for up to ``timeout`` seconds."""
    from distributed import Client
    from distributed.comm.core import FatalCommClosedError

    started = time.monotonic()
    pause = _FIRST_PAUSE
    attempt = 0
    while True:
        attempt += 1
        left = timeout - (time.monotonic() - started)
        try:
            return Client(address, security=security,
                          timeout=max(1.0, min(left, _ATTEMPT_SECONDS)))
        except FatalCommClosedError as err:  # TLS refused: waiting cannot fix certificates
            raise ConnectionError(
                f"cannot connect to scheduler {address}: {_first_line(err)}") from err
        except OSError as err:  # unreachable, refused, no such host (yet), timed out
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                raise TransientError(
                    f"cannot connect to scheduler {address}: not reachable in {timeout:g} s "
                    f"({attempt} attempt{'s' * (attempt > 1)}): {_first_line(err)}") from err
            pause = min(pause, left)
            logger.warning("scheduler %s not reachable yet (attempt %d, %.0f s of %g s "
                           "left): %s; next attempt in %.0f s", address, attempt, left,
                           timeout, _first_line(err), pause)
            time.sleep(pause)
            pause = min(2 * pause, _LONGEST_PAUSE)


@contextlib.contextmanager
def connect(
    scheduler: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: str | int = "auto",
    processes: bool = True,
    security: Security | None = None,
    timeout: float = SCHEDULER_TIMEOUT,
) -> Iterator[Client]:
    """Yield a ``distributed.Client``: to ``scheduler`` if given, else to an embedded cluster.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler (``tcp://host:8786``, or ``tls://host:8786`` with
        ``security``). ``None`` starts a ``LocalCluster`` on this machine and closes it on exit.
    n_workers, threads_per_worker, memory_limit, processes
        Embedded cluster settings (``LocalCluster``'s parameters).
    security : distributed.Security, optional
        TLS settings, usually from :func:`tls_security`. With a ``scheduler``, its address
        must use ``tls://`` (a bare ``host:port`` gets it); without one, the embedded cluster
        listens on ``tls://`` with these certificates.
    timeout : float
        Seconds to wait for ``scheduler`` to come up, retrying with backoff (pauses from 1 s
        doubling to 30 s, each attempt logged).

    Yields
    ------
    distributed.Client
        The client, closed (with the embedded cluster, if any) on exit.

    Raises
    ------
    ValueError
        If ``scheduler``'s protocol disagrees with ``security``: ``tcp://`` with TLS
        configured, or ``tls://`` without it.
    ConnectionError
        If the scheduler refuses the TLS handshake (for example a certificate signed by
        another authority): not retried.
    dkpca._errors.TransientError
        A ``ConnectionError`` too: if ``scheduler`` is not reachable within ``timeout``, or
        if the connection to it is lost while the block runs (the block's own exception is
        its cause).

    See Also
    --------
    tls_security : builds ``security`` from the ``--tls-*`` options.

    Examples
    --------
    >>> with connect(n_workers=1, processes=False) as client:  # doctest: +SKIP
    ...     print(client)
    >>> sec = tls_security("ca.pem", "node.pem", "node.key")  # doctest: +SKIP
    >>> with connect("tls://10.0.0.5:8786", security=sec) as client:  # doctest: +SKIP
    ...     print(client.scheduler.address)
    tls://10.0.0.5:8786
    """
    from distributed import LocalCluster

    if scheduler is not None:
        address = _scheduler_address(scheduler, security)
        client = _client_when_up(address, security, timeout)
        with client:
            logger.info("connected to scheduler %s", address)
            try:
                yield client
            except Exception as err:
                # Futures of a lost scheduler fail with whatever was pending (cancelled
                # futures, closed comms); the client's own state says what happened.
                if client.status in ("running", "newly-created"):
                    raise
                raise TransientError(f"lost the connection to scheduler {address} "
                                     f"({type(err).__name__}: {_first_line(err)})") from err
        return
    from distributed import Client

    # Worker processes ignore Ctrl-C; in-process workers share our environment and signals.
    nanny_options = {"preload": [__name__]} if processes else {}
    tls_options = {} if security is None else {"protocol": _TLS, "security": security}
    with contextlib.ExitStack() as stack:
        with (_workers_ignore_sigint() if processes else contextlib.nullcontext(),
              spawned_with(WORKER_ENV), quiet_housekeeping()):
            cluster = stack.enter_context(LocalCluster(
                n_workers=n_workers,
                threads_per_worker=threads_per_worker,
                memory_limit=memory_limit,
                processes=processes,
                dashboard_address=":0",
                **nanny_options,
                **tls_options,
            ))
        client = stack.enter_context(Client(cluster, security=security))
        logger.info("embedded cluster: %s", cluster)
        yield client
