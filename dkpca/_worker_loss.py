"""A worker lost in the middle of a computation: how to tell, and how to run it again.

A worker killed between two Krylov passes takes its tiles (or its stripes of the data) with
it. The pass that finds them gone raises one of distributed's errors; the caller rebuilds what
was lost on live workers and runs the pass again (:func:`recovering`), while any other error
is raised at once.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import TypeVar

__all__ = ["MAX_RECOVERIES", "recovering", "worker_lost"]

#: Times a pass is retried after holders were lost (each retry first rebuilds them).
MAX_RECOVERIES = 3

_T = TypeVar("_T")


def _lost_errors() -> tuple[type[BaseException], ...]:
    """Return what a computation raises when a worker it needed died.

    ``TimeoutError`` too: a scatter to a holder whose worker the scheduler has dropped (after
    a recovery that still saw it alive) waits for it, then raises "No valid workers found".
    """
    errors: list[type[BaseException]] = [concurrent.futures.CancelledError, TimeoutError]
    try:
        from distributed.comm import CommClosedError
        from distributed.scheduler import KilledWorker
    except ImportError:
        return tuple(errors)
    return (*errors, KilledWorker, CommClosedError)


_LOST_ERRORS = _lost_errors()


def worker_lost(err: BaseException) -> bool:
    """Return whether ``err`` says that a worker the computation needed died.

    The error itself or any error it was raised from counts: a direct scatter to a worker
    killed since the last pass fails in ``distributed``'s ``connect`` with a plain
    ``OSError`` ("Timed out trying to connect") raised from the refused connection's
    ``CommClosedError``. Other errors (a missing file, a bad array) are not losses.

    Examples
    --------
    >>> try:
    ...     try:
    ...         raise TimeoutError("no reply")
    ...     except TimeoutError as refused:
    ...         raise OSError("Timed out trying to connect") from refused
    ... except OSError as err:
    ...     worker_lost(err), worker_lost(FileNotFoundError("data.zarr"))
    (True, False)
    """
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, _LOST_ERRORS):
            return True
        seen = seen.__cause__
    return False


def recovering(attempt: Callable[[], _T], recover: Callable[[], None], log: logging.Logger,
               lost: str, again: str) -> _T:
    """Run ``attempt``; when it lost a worker (:func:`worker_lost`), ``recover`` and run it again.

    At most :data:`MAX_RECOVERIES` recoveries; the last attempt's error is raised, and any
    other error at once. Each recovery is a warning on ``log`` (the caller's): "``lost`` lost
    with a worker (error); ``again``".

    Examples
    --------
    >>> tries = []
    >>> def attempt():
    ...     tries.append(1)
    ...     if len(tries) < 3:
    ...         raise TimeoutError("a worker died")
    ...     return len(tries)
    >>> recovering(attempt, lambda: None, logging.getLogger("example"), "an example", "again")
    3
    """
    for _ in range(MAX_RECOVERIES):
        try:
            return attempt()
        except Exception as err:
            if not worker_lost(err):
                raise
            log.warning("%s lost with a worker (%s: %s); %s", lost, type(err).__name__, err,
                        again)
            recover()
    return attempt()
