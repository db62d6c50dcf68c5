"""Freed blocks kept for reuse while a task reads block after block, in Dask's worker processes.

distributed's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``, so that glibc
returns freed memory to the system at once and a worker's memory is what distributed measures.
Setting that variable also fixes glibc's threshold for serving an allocation with an ``mmap``
of its own at 128 KiB (glibc otherwise raises it to the size of the blocks freed). So in a
worker every decoded Zarr chunk (25 MB at 2,500² float32), and the bytes it was decoded from,
land in newly mapped pages that the kernel must fault in and zero, and are unmapped when freed:
reading a chunk then takes about twice as long as in a plain Python process (BENCHMARKS.md §11).

:func:`freed_blocks_reused` raises both thresholds while a task that reads many blocks of one
size runs, so each block reuses the pages the one before it freed, and while a worker
evaluates its kernel tiles or multiplies them in a Krylov pass (the evaluation's temporaries,
``V``'s blocks in the tiles' dtype and each thread's scratch, made again every pass).
Afterwards it puts back the process's own settings and hands what glibc kept to the system
(``malloc_trim``): between tasks the worker's memory is what it would have been. It acts
only in a process started with either variable set (a worker of distributed's nanny, or a
user's own choice): elsewhere glibc's adaptive threshold already reuses freed blocks, and
setting a threshold would switch that off for good. Elsewhere than on glibc it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import threading
from collections.abc import Iterator

__all__ = ["freed_blocks_reused"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters, from glibc's malloc.h

#: glibc's default for both thresholds, in force once either variable is set.
_GLIBC_DEFAULT = 128 * 1024

#: While a task runs: blocks under 64 MiB come from the heap (glibc's per-thread heaps hold
#: at most 64 MiB each), and up to 1 GiB freed at its top stays there.
_HELD_MMAP_THRESHOLD, _HELD_TRIM_THRESHOLD = 64 * 2**20, 2**30

_lock = threading.Lock()
_depth = 0


def _environment_threshold(name: str) -> int | None:
    value = os.environ.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:  # glibc ignores what it cannot parse
        return None


def _process_thresholds() -> tuple[int, int] | None:
    """Return the process's mmap and trim thresholds, or ``None`` where glibc adapts them."""
    mmap = _environment_threshold("MALLOC_MMAP_THRESHOLD_")
    trim = _environment_threshold("MALLOC_TRIM_THRESHOLD_")
    if mmap is None and trim is None:
        return None
    return (_GLIBC_DEFAULT if mmap is None else mmap,
            _GLIBC_DEFAULT if trim is None else trim)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _set_thresholds(libc: ctypes.CDLL, mmap: int, trim: int) -> None:
    # mallopt takes a C int; a threshold set from the environment may not fit in one
    libc.mallopt(_M_MMAP_THRESHOLD, min(mmap, 2**31 - 1))
    libc.mallopt(_M_TRIM_THRESHOLD, min(trim, 2**31 - 1))


@contextlib.contextmanager
def freed_blocks_reused() -> Iterator[None]:
    """Keep freed blocks of up to 64 MiB in the heap while the block runs (glibc, Dask workers).

    Counted: from any number of threads at once, the first block entered raises the
    thresholds and the last one left restores the process's own and trims the heap.

    Examples
    --------
    >>> import numpy as np
    >>> with freed_blocks_reused():
    ...     sizes = [np.ones(2**20).nbytes for _ in range(3)]
    >>> sizes
    [8388608, 8388608, 8388608]
    """
    global _depth
    own, libc = _process_thresholds(), _glibc()
    if own is None or libc is None:
        yield
        return
    with _lock:
        if _depth == 0:
            _set_thresholds(libc, _HELD_MMAP_THRESHOLD, _HELD_TRIM_THRESHOLD)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _set_thresholds(libc, *own)
                libc.malloc_trim(0)
