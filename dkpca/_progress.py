"""Progress of long computations, switched on by the command line: a bar or log lines.

The library computes everything through :func:`dkpca.blocked.compute`, which calls
:func:`compute` here. Outside a :func:`progress_bar` block it is plain ``dask.compute`` and
prints nothing; inside one, every computation that runs longer than ``minimum`` seconds reports
its progress on ``stream``: dask's own task counts on the local schedulers, counts fed by the
scheduler when a ``distributed.Client`` is active.

On a terminal that is a bar redrawn in place. Anywhere else (``kubectl logs``, a batch
system's log file, a pipe) a redrawn bar shows nothing until it ends, so each report is a line
of its own, every ``interval`` seconds: the phase, the percentage, the task counts, the time
elapsed and an estimate of the time left.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import dask
from dask.callbacks import Callback

__all__ = ["compute", "progress_bar", "progress_line"]

#: Seconds between log lines when the stream is not a terminal.
LINE_INTERVAL = 10.0
#: Seconds between redraws of the bar on a terminal, and between polls of the task counts.
BAR_INTERVAL = 0.2


@dataclass
class _Settings:
    stream: TextIO
    minimum: float
    lines: bool
    interval: float
    phase: str
    step: int = 0  # computations reported so far: silent ones take no number


_settings: _Settings | None = None  # process-wide: computes also run in helper threads
_lock = threading.Lock()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


@contextlib.contextmanager
def progress_bar(
    stream: TextIO | None = None,
    minimum: float = 1.0,
    *,
    phase: str = "",
    lines: bool | None = None,
    interval: float | None = None,
) -> Iterator[None]:
    """Report every dkpca computation longer than ``minimum`` seconds in the block.

    Parameters
    ----------
    stream : file, optional
        Where to write; standard error by default.
    minimum : float
        Computations shorter than this stay silent.
    phase : str
        What the block does (``"fit"``), at the start of each log line.
    lines : bool, optional
        Log lines (``True``) or a bar redrawn in place (``False``); by default a bar on a
        terminal and lines elsewhere.
    interval : float, optional
        Seconds between reports: :data:`LINE_INTERVAL` for lines, :data:`BAR_INTERVAL` for
        the bar.

    Examples
    --------
    >>> import io, dask.array as da
    >>> from dkpca.blocked import compute
    >>> with progress_bar(io.StringIO(), minimum=0.0):
    ...     compute(da.ones(4, chunks=2).sum())
    (np.float64(4.0),)
    """
    global _settings
    stream = stream if stream is not None else sys.stderr
    lines = not _is_terminal(stream) if lines is None else lines
    if interval is None:
        interval = LINE_INTERVAL if lines else BAR_INTERVAL
    previous = _settings
    _settings = _Settings(stream, minimum, lines, interval, phase)
    try:
        yield
    finally:
        _settings = previous


def _duration(seconds: float) -> str:
    """``4.2s``, ``1m 35s``, ``2h 05m``: as precise as a log reader needs."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def progress_line(phase: str, done: int, total: int, elapsed: float,
                  rate: float | None = None) -> str:
    """One log line: phase, percentage, tasks, time elapsed and an estimate of the time left.

    Parameters
    ----------
    phase : str
        What runs, at the start of the line.
    done, total : int
        Tasks finished, and tasks in all.
    elapsed : float
        Seconds since the computation started.
    rate : float, optional
        Tasks finished per second lately (see :func:`recent_rate`); by default the average
        since the start.

    Examples
    --------
    >>> progress_line("fit, step 2 (moments)", 300, 1200, 95.0)
    'fit, step 2 (moments): 25% of 1200 tasks (300 done), 1m 35s elapsed, about 4m 45s left'
    >>> progress_line("denoise, step 1 (store)", 300, 1200, 95.0, rate=1.0)
    'denoise, step 1 (store): 25% of 1200 tasks (300 done), 1m 35s elapsed, about 15m 00s left'
    >>> progress_line("fit", 1200, 1200, 3725.0)
    'fit: 100% of 1200 tasks (1200 done), 1h 02m elapsed, done'
    """
    fraction = done / total if total else 1.0
    if rate is None and done:
        rate = done / elapsed if elapsed > 0 else None
    if done >= total:
        left = "done"
    elif rate:
        left = f"about {_duration((total - done) / rate)} left"
    else:
        left = "time left not known yet"
    return (f"{phase}: {fraction:.0%} of {total} tasks ({done} done), "
            f"{_duration(elapsed)} elapsed, {left}")


def recent_rate(samples: list[tuple[float, int]]) -> float | None:
    """Tasks finished per second over the latter half of the time elapsed.

    ``samples`` are ``(elapsed, done)`` pairs in time order, the last one now. A computation's
    tasks differ in cost, and the cheap ones often finish first: every chunk read at once,
    then one slow task per chunk (``denoise``'s fixed-point pre-images), so the average since
    the start overstates the pace of what is left, by 2-3x there. The pace of the latter half
    forgets such a start once as much time again has passed, and needs no knowledge of the
    graph. ``None`` while nothing finished in that half.

    Examples
    --------
    >>> recent_rate([(0.0, 0), (1.0, 60), (5.0, 64), (10.0, 69)])  # 60 cheap, then 1 per s
    1.0
    """
    now, done = samples[-1]
    half = now / 2
    then, done_then = next((t, d) for t, d in reversed(samples) if t <= half)
    if done <= done_then or now <= then:
        return None
    return (done - done_then) / (now - then)


def _bar(done: int, total: int, elapsed: float) -> str:
    fraction = done / total if total else 1.0
    return (f"\r[{'#' * int(40 * fraction):<40}] | {fraction:4.0%} of {total} tasks | "
            f"{_duration(elapsed)}")


class _Report:
    """Writes one computation's progress as the settings say; silent until ``minimum``."""

    def __init__(self, settings: _Settings, what: str):
        self.settings = settings
        self.what = what
        self.label = ""  # numbered when first drawn, so that the step numbers run on
        self.last = -float("inf")  # when the last report was written
        self.samples: list[tuple[float, int]] = [(0.0, 0)]

    def update(self, done: int, total: int, elapsed: float, final: bool = False) -> None:
        settings = self.settings
        if done != self.samples[-1][1]:
            self.samples.append((elapsed, done))
        if not final and (elapsed < settings.minimum or elapsed - self.last < settings.interval):
            return
        if final and not self.label and elapsed < settings.minimum:
            return  # finished before the first report was due: stay silent
        if not self.label:
            with _lock:
                settings.step += 1
                phase = f"{settings.phase}, " if settings.phase else ""
                self.label = f"{phase}step {settings.step}{self.what}"
        self.last = elapsed
        if settings.lines:
            rate = recent_rate([*self.samples, (elapsed, done)])
            text = progress_line(self.label, done, total, elapsed, rate) + "\n"
        else:
            text = _bar(done, total, elapsed) + ("\n" if final else "")
        with contextlib.suppress(ValueError):  # a stream closed under us
            settings.stream.write(text)
            settings.stream.flush()


class _LocalProgress(Callback):
    """Task counts of dask's local schedulers, reported from a timer thread."""

    def __init__(self, report: _Report):
        super().__init__()
        self.report = report
        self.state: dict | None = None
        self.started = 0.0
        self.running = threading.Event()

    def _counts(self) -> tuple[int, int]:
        state = self.state
        if not state:
            return 0, 0
        done = len(state["finished"])
        return done, done + sum(len(state[k]) for k in ("ready", "waiting", "running"))

    def _tick(self) -> None:
        while not self.running.wait(BAR_INTERVAL):
            self.report.update(*self._counts(), time.perf_counter() - self.started)

    def _start(self, dsk: Any) -> None:
        self.started = time.perf_counter()
        self.running.clear()
        self.timer = threading.Thread(target=self._tick, daemon=True)
        self.timer.start()

    def _pretask(self, key: Any, dsk: Any, state: dict) -> None:
        self.state = state

    def _finish(self, dsk: Any, state: dict, errored: bool) -> None:
        self.running.set()
        self.timer.join()
        self.state = state
        done, total = self._counts()
        if not errored:
            done = total = max(total, len(dsk))
        self.report.update(done, total, time.perf_counter() - self.started, final=True)


def _scheduler_progress(futures: list, report: _Report) -> None:
    """Block until ``futures`` finish, reporting the scheduler's task counts."""
    from distributed.diagnostics.progressbar import TextProgressBar

    class Feed(TextProgressBar):
        def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
            if remaining:
                report.update(all - remaining, all, self.elapsed)

        def _draw_stop(self, remaining: int = 0, all: int = 0, **kwargs: Any) -> None:
            report.update(all - remaining, all, self.elapsed, final=True)

    # The feed's interval also sets how soon the end is seen, so it stays short; the report
    # throttles what is written.
    Feed(futures, interval=f"{BAR_INTERVAL}s")


def _client() -> Any:
    distributed = sys.modules.get("distributed")  # no client can exist if never imported
    if distributed is None:
        return None
    try:
        return distributed.get_client()
    except ValueError:
        return None


def _what(collections: tuple) -> str:
    """Return what dask calls a computation's output, for its label: `` (moments)``, or ``""``."""
    from dask.utils import key_split

    name = getattr(collections[0], "name", None) if collections else None
    return f" ({key_split(name)})" if isinstance(name, str) else ""


def compute(*collections: Any, **kwargs: Any) -> tuple:
    """``dask.compute``, reporting progress inside a :func:`progress_bar` block.

    Examples
    --------
    >>> import dask.array as da
    >>> compute(da.arange(3).sum())
    (np.int64(3),)
    """
    settings = _settings
    if settings is None:
        return dask.compute(*collections, **kwargs)
    report = _Report(settings, _what(collections))
    client = _client()
    if client is None or dask.config.get("scheduler", None) not in (None, "dask.distributed"):
        with _LocalProgress(report):
            return dask.compute(*collections, **kwargs)
    # As with dask.compute, a plain value (an array, a number) comes back as it is: the client
    # would send it to the cluster, and the progress display cannot follow it. Builtin
    # containers go to the client, which computes the collections inside them.
    lazy = [k for k, c in enumerate(collections)
            if dask.is_dask_collection(c) or isinstance(c, list | tuple | dict | set)]
    if not lazy:
        return collections
    futures = client.compute([collections[k] for k in lazy], **kwargs)
    try:
        _scheduler_progress(futures, report)
        results = dict(zip(lazy, client.gather(futures), strict=True))
    except BaseException:
        client.cancel(futures)  # stop the rest of the work (and its writes) now
        raise
    return tuple(results.get(k, c) for k, c in enumerate(collections))
