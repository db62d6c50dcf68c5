"""Progress bars for long computations, switched on by the command line.

The library computes everything through :func:`dkpca.blocked.compute`, which calls
:func:`compute` here. Outside a :func:`progress_bar` block it is plain ``dask.compute`` and
prints nothing; inside one, every computation that runs longer than ``minimum`` seconds draws a
task bar on ``stream``: dask's own bar on the local schedulers, a bar fed by the scheduler when
a ``distributed.Client`` is active.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import dask

__all__ = ["compute", "progress_bar"]


@dataclass(frozen=True)
class _Settings:
    stream: TextIO
    minimum: float


_settings: _Settings | None = None  # process-wide: computes also run in helper threads


@contextlib.contextmanager
def progress_bar(stream: TextIO | None = None, minimum: float = 1.0) -> Iterator[None]:
    """Show a bar for every dkpca computation longer than ``minimum`` seconds in the block.

    Examples
    --------
    >>> import io, dask.array as da
    >>> from dkpca.blocked import compute
    >>> with progress_bar(io.StringIO(), minimum=0.0):
    ...     compute(da.ones(4, chunks=2).sum())
    (np.float64(4.0),)
    """
    global _settings
    previous = _settings
    _settings = _Settings(stream if stream is not None else sys.stderr, minimum)
    try:
        yield
    finally:
        _settings = previous


def _client() -> Any:
    distributed = sys.modules.get("distributed")  # no client can exist if never imported
    if distributed is None:
        return None
    try:
        return distributed.get_client()
    except ValueError:
        return None


def _scheduler_bar(futures: list, settings: _Settings) -> None:
    """Block until ``futures`` finish, drawing the scheduler's task counts after ``minimum``."""
    from dask.utils import format_time
    from distributed.diagnostics.progressbar import TextProgressBar

    class Bar(TextProgressBar):
        drawn = False

        def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
            if self.elapsed < settings.minimum and remaining:
                return
            if not self.drawn and not remaining:
                return  # finished before the bar was due: stay silent
            self.drawn = True
            done = 1 - remaining / all if all else 1.0
            bar = "#" * int(40 * done)
            settings.stream.write(
                f"\r[{bar:<40}] | {done:4.0%} of {all} tasks | {format_time(self.elapsed)}"
            )
            settings.stream.flush()

        def _draw_stop(self, **kwargs: Any) -> None:
            if self.drawn:
                settings.stream.write("\n")
                settings.stream.flush()

    Bar(futures, interval="200ms")


def compute(*collections: Any, **kwargs: Any) -> tuple:
    """``dask.compute``, with a progress bar inside a :func:`progress_bar` block.

    Examples
    --------
    >>> import dask.array as da
    >>> compute(da.arange(3).sum())
    (np.int64(3),)
    """
    settings = _settings
    if settings is None:
        return dask.compute(*collections, **kwargs)
    client = _client()
    if client is None or dask.config.get("scheduler", None) not in (None, "dask.distributed"):
        from dask.diagnostics import ProgressBar

        with ProgressBar(minimum=settings.minimum, out=settings.stream):
            return dask.compute(*collections, **kwargs)
    futures = client.compute(list(collections), **kwargs)
    try:
        _scheduler_bar(futures, settings)
        return tuple(client.gather(futures))
    except BaseException:
        client.cancel(futures)  # stop the rest of the work (and its writes) now
        raise
