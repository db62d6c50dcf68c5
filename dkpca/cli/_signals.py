"""Signals: SIGTERM taken as Ctrl-C, and the embedded cluster closed when either interrupts.

A batch system or Kubernetes stops a job with SIGTERM; treated as Ctrl-C, it ends the command
with status 130 after its partial output is removed. An interrupt that lands while the
embedded cluster starts is the one case that needs more: see
:func:`closing_clusters_on_interrupt`. Outputs already written whole stay, and the message
names them (:func:`output_written`, :func:`interrupted_message`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["closing_clusters_on_interrupt", "forget_outputs", "interrupt_on_sigterm",
           "interrupted_message", "output_written", "raise_interrupt"]

#: The outputs the running command has written whole: an interrupt after them (the embedded
#: cluster shutting down, the next figure) leaves them in place, and its message says so.
_written: list[str] = []


def output_written(place: Any) -> None:
    """Record that the running command has written ``place`` whole (its rename is done).

    Examples
    --------
    >>> forget_outputs()
    >>> output_written("model.zarr")
    >>> interrupted_message()
    'dkpca: interrupted; written before it, whole: model.zarr'
    >>> forget_outputs()
    """
    _written.append(str(place))


def forget_outputs() -> None:
    """Start a command's record of written outputs afresh."""
    _written.clear()


def interrupted_message() -> str:
    """Return the line printed when Ctrl-C or SIGTERM ends the command.

    Examples
    --------
    >>> forget_outputs()
    >>> interrupted_message()
    'dkpca: interrupted; no output was written'
    """
    if not _written:
        return "dkpca: interrupted; no output was written"
    return f"dkpca: interrupted; written before it, whole: {', '.join(_written)}"


def raise_interrupt(signum: int, frame: Any) -> None:
    """Raise :class:`KeyboardInterrupt`, as Ctrl-C does: the SIGTERM handler."""
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> Any:
    """Treat SIGTERM (Kubernetes, batch systems) like Ctrl-C, so outputs are cleaned up.

    Returns the previous handler, or ``None`` where handlers cannot be set (not the main
    thread).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, raise_interrupt)


@contextlib.contextmanager
def closing_clusters_on_interrupt() -> Iterator[None]:
    """Close the embedded clusters started in the block if Ctrl-C or SIGTERM interrupts it.

    An interrupt that lands while ``LocalCluster`` starts leaves a cluster that nothing holds
    and whose workers are still starting; distributed's exit hook then fails on them
    (``AssertionError: Status.init``, a 27-line traceback after the one-line message). Here
    they are closed, with the cluster, before the interrupt goes on.
    """
    from distributed.deploy.spec import SpecCluster

    before = {id(c) for c in SpecCluster._instances}  # the registry distributed's hook closes
    try:
        yield
    except KeyboardInterrupt:
        for started in [c for c in SpecCluster._instances if id(c) not in before]:
            _close_started(started)
        raise


def _close_started(started: Any) -> None:
    """Close a cluster whose start was interrupted, with the workers it was starting.

    Maintenance note: distributed cancels the interrupted start, but not the start of the
    workers it had created; those are in the cluster's ``_created`` set, which its exit hook
    checks, yet not in ``workers``, which ``close`` shuts down. So each is let finish its
    start (its own lock serialises the two) and closed here, then the cluster.
    """
    from distributed.core import Status

    async def stop_unlisted_workers() -> None:
        listed = list(started.workers.values())
        for worker in list(started._created):
            if any(worker is w for w in listed):
                continue
            with contextlib.suppress(Exception):  # one that failed to start is closed
                await worker
            with contextlib.suppress(Exception):
                await worker.close()

    if started.status == Status.closed:
        return
    with contextlib.suppress(Exception):
        started.sync(stop_unlisted_workers, callback_timeout=30)
    with contextlib.suppress(Exception):
        started.close(timeout=30)
