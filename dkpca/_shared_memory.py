"""A Krylov pass's ``V`` and partial products through shared memory, on the client's machine.

On a ``LocalCluster`` every worker shares the client's machine, yet a pass would still copy
``V`` into a socket once per worker and each worker's partial product back through another:
on 8 workers at 100,000 × 32 that is about 200 MiB a pass, serialised, copied and received
in Python, against a product of about a second. Here the client writes ``V`` once into a file
of the shared-memory file system (``/dev/shm``), every worker maps it, and each worker writes
its partial into a file the client made for it; the task messages carry only the files'
names.

The client creates every file with its whole size reserved (``posix_fallocate``, so a full
file system is an error here, never a ``SIGBUS`` in a worker); workers only map them. The
files of a set of tiles are kept from pass to pass while their shapes stay
(:class:`PassFiles`), and removed when the tiles are released or collected, or when a pass
fails. A file left by a client that was killed is removed by the next client that finds its
process gone.

Whether the workers see the client's files is checked, never assumed: a probe file with a
random token must be read back by every worker (a container with its own ``/dev/shm`` fails
it, as does a worker on another machine). The ``dkpca.shared-memory`` setting turns the path
off (``False``); by default (``"auto"``) it is used wherever the probe passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import mmap
import os
import secrets
from collections.abc import Iterator
from typing import Any, Self

import dask
import numpy as np
from distributed import wait
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

from ._tile_holders import state_product

__all__ = ["SHARED_MEMORY_KEY", "HolderStateMissing", "PassFiles", "SharedArray", "SharedFiles",
           "SharedMemoryFull", "shared_memory_allowed", "shared_memory_reaches", "shared_product"]

logger = logging.getLogger(__name__)

#: The setting that allows (``"auto"``, ``True``) or forbids (``False``) shared memory.
SHARED_MEMORY_KEY = "dkpca.shared-memory"

#: Where the files go: a memory-backed file system on Linux (absent elsewhere: not used).
SHARED_DIR = "/dev/shm"

#: Seconds the probe waits for every worker's answer before the sockets are used instead.
PROBE_TIMEOUT = 30.0

#: Prefix of every file, followed by the creating process's id.
PREFIX = "dkpca-"

#: Map every page of a file when it is mapped (Linux; elsewhere no flag, pages fault in).
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class SharedMemoryFull(Exception):
    """The shared-memory file system cannot hold a pass's files (the sockets will)."""


@dataclasses.dataclass(frozen=True)
class SharedArray:
    """A float64 array in a file of :data:`SHARED_DIR`: what a task message carries of it.

    Examples
    --------
    >>> with SharedFiles() as files:
    ...     shared = files.create((2, 3))
    ...     shared.view()[...] = 1.0
    ...     float(shared.view(writable=False).sum())
    6.0
    """

    path: str
    shape: tuple[int, ...]

    def view(self, writable: bool = True) -> np.ndarray:
        """Map the file as an array (changes are seen by every process that maps it).

        Its pages are mapped now, in one call (``MAP_POPULATE``): a pass touches every one of
        them, and a fault for each 4 KiB page cost a millisecond or more per megabyte.
        """
        count = int(np.prod(self.shape))
        descriptor = os.open(self.path, os.O_RDWR if writable else os.O_RDONLY)
        try:
            pages = mmap.mmap(descriptor, max(1, count) * 8, flags=mmap.MAP_SHARED | _POPULATE,
                              prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
        finally:
            os.close(descriptor)
        array = np.frombuffer(pages, dtype=np.float64, count=count).reshape(self.shape)
        array.flags.writeable = writable  # the buffer says writable whatever ``prot`` is
        return array


class SharedFiles:
    """Shared arrays made by this process, all removed by :meth:`close` or when the context ends.

    Examples
    --------
    >>> with SharedFiles() as files:
    ...     shared = files.create((4, 2))
    ...     os.path.exists(shared.path)
    True
    >>> os.path.exists(shared.path)
    False
    """

    def __init__(self) -> None:
        self._paths: list[str] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove every file made so far (mappings of them stay valid until dropped)."""
        for path in self._paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._paths.clear()

    def create(self, shape: tuple[int, ...]) -> SharedArray:
        """Make a zero-filled float64 array of ``shape``, its memory reserved now.

        Raises :class:`SharedMemoryFull` when the file system cannot hold it.
        """
        path = os.path.join(SHARED_DIR, f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}")
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            self._paths.append(path)
            try:
                os.posix_fallocate(descriptor, 0, max(1, int(np.prod(shape)) * 8))
            finally:
                os.close(descriptor)
        except OSError as err:
            raise SharedMemoryFull(f"{SHARED_DIR} cannot hold {shape} float64: {err}") from err
        return SharedArray(path, tuple(int(s) for s in shape))


def shared_memory_allowed() -> bool:
    """Whether workers on this machine may be reached through shared memory at all.

    True unless the ``dkpca.shared-memory`` setting is ``False`` or :data:`SHARED_DIR` is
    missing; whether the workers do see the files is :func:`shared_memory_reaches`'s probe.

    Examples
    --------
    >>> import dask
    >>> with dask.config.set({"dkpca.shared-memory": False}):
    ...     shared_memory_allowed()
    False
    """
    setting = dask.config.get(SHARED_MEMORY_KEY, "auto")
    if setting not in ("auto", True, False):
        raise ValueError(f"{SHARED_MEMORY_KEY} must be 'auto', True or False, got {setting!r}")
    return setting is not False and os.path.isdir(SHARED_DIR)


def shared_memory_reaches(client: Any, addresses: list[str]) -> bool:
    """Whether the workers at ``addresses`` see this process's shared-memory files.

    False when the ``dkpca.shared-memory`` setting is ``False``, where :data:`SHARED_DIR` is
    missing or full, and when any worker fails to read back a probe's random token.

    Examples
    --------
    >>> import dask
    >>> with dask.config.set({"dkpca.shared-memory": False}):
    ...     shared_memory_reaches(None, ["tcp://127.0.0.1:4000"])
    False
    """
    if not shared_memory_allowed():
        return False
    _remove_orphans()
    token = np.array([secrets.randbits(52) for _ in range(2)], dtype=np.float64)
    try:
        with SharedFiles() as files:
            probe = files.create(token.shape)
            probe.view()[...] = token
            futures = [client.submit(_reads, probe, token, workers=[address],
                                     allow_other_workers=False, pure=False)
                       for address in addresses]
            # A task pinned to a worker that has just vanished would wait for it for ever.
            try:
                wait(futures, timeout=PROBE_TIMEOUT)
            except TimeoutError:
                client.cancel(futures)
                logger.info("shared memory not used for kernel products: a worker did not "
                            "answer the probe in %g s", PROBE_TIMEOUT)
                return False
            seen = client.gather(futures)
            if all(seen):
                client.register_plugin(_ProductHandler(), name=HANDLER)
    except SharedMemoryFull as err:
        logger.info("shared memory not used for kernel products: %s", err)
        return False
    if not all(seen):
        logger.info("shared memory not used for kernel products: a worker has its own %s",
                    SHARED_DIR)
    return all(seen)


class _ProductHandler(WorkerPlugin):
    """Worker plugin installing :data:`HANDLER` (also on workers that join later).

    It keeps the worker's mappings of each holder state's pass files, ``mapped``: state key
    → (the files' paths, their arrays), dropped when the state is released.
    """

    def __init__(self) -> None:
        self.mapped: dict[Any, tuple[tuple[str, ...], tuple[np.ndarray | None, ...]]] = {}

    def setup(self, worker: Any) -> None:
        _install_handler(worker, self.mapped)

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish in ("released", "forgotten"):
            self.mapped.pop(key, None)


def _reads(probe: SharedArray, token: np.ndarray) -> bool:
    try:
        return bool(np.array_equal(probe.view(writable=False), token))
    except OSError:
        return False


def _remove_orphans() -> None:
    """Remove files whose creating process is gone (a client killed in the middle of a pass)."""
    for path in _own_kind():
        pid = int(os.path.basename(path)[len(PREFIX):].split("-")[0])
        if not _alive(pid):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _own_kind() -> Iterator[str]:
    with contextlib.suppress(OSError):
        for entry in os.scandir(SHARED_DIR):
            name = entry.name
            if name.startswith(PREFIX) and name[len(PREFIX):].split("-")[0].isdigit():
                yield entry.path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class PassFiles:
    """A tile set's pass files, kept from one pass to the next while their shapes stay.

    A file for ``V`` and, for each holder, two for its double-double partial (or, when no two
    partials overlap, one result that every holder writes its rows of). Making five files,
    mapping them and removing them took about 14 ms of the client's time a pass at
    20,000 × 32, and each worker's mapping of its files a few more (BENCHMARKS.md §8); kept, a
    pass only copies ``V`` in. :meth:`close` removes them: the tiles call it when they are
    released or collected, and after a failed pass. The workers drop their mappings when the
    holder's state is released.

    Examples
    --------
    >>> files = PassFiles()
    >>> files.prepare((4, 2), [(0, 4), (2, 4)], exclusive=False)
    >>> files.V.shape, [high.shape for high, _, _ in files.outs]
    ((4, 2), [(4, 2), (2, 2)])
    >>> files.close()
    >>> files.outs
    []
    """

    def __init__(self) -> None:
        self._files = SharedFiles()
        self._layout: tuple | None = None
        self._views: dict[str, np.ndarray] = {}
        self.V: SharedArray | None = None
        self.outs: list[tuple[SharedArray, SharedArray | None, int]] = []

    def prepare(self, shape: tuple[int, int], spans: list[tuple[int, int]],
                exclusive: bool) -> None:
        """Have the files for ``V`` of ``shape`` and partials over ``spans``: kept, or new.

        Raises :class:`SharedMemoryFull` (and keeps no file) when they do not fit.
        """
        layout = (tuple(shape), tuple(spans), exclusive)
        if layout == self._layout:
            return
        self.close()
        try:
            self.V = self._files.create(shape)
            if exclusive:
                result = self._files.create(shape)
                self.outs = [(result, None, lo) for lo, _ in spans]
            else:
                self.outs = [(self._files.create((hi - lo, shape[1])),
                              self._files.create((hi - lo, shape[1])), 0) for lo, hi in spans]
        except BaseException:
            self.close()
            raise
        self._layout = layout

    def view(self, shared: SharedArray) -> np.ndarray:
        """Return this process's mapping of one of the files, made when first asked for."""
        if shared.path not in self._views:
            self._views[shared.path] = shared.view()
        return self._views[shared.path]

    def close(self) -> None:
        """Remove the files and drop this process's mappings of them."""
        self._files.close()
        self._views.clear()
        self._layout, self.V, self.outs = None, None, []


def shared_product(client: Any, holders: list, states: list, spans: list[tuple[int, int]],
                   V: np.ndarray, exclusive: bool,
                   files: PassFiles) -> list[tuple[int, np.ndarray, Any]]:
    """``K V`` with one call to each holder's worker, ``V`` and the partials in shared memory.

    Each call goes straight from the client to the worker (:data:`HANDLER`, installed by
    :func:`shared_memory_reaches`) and runs there on the worker's threads: no task, no
    scheduler, a message of a few hundred bytes each way. ``spans`` are the holders' partial
    rows (:func:`dkpca._tile_holders.partial_rows`). The partials come back as
    :func:`dkpca._tile_holders.state_product` returns them; exclusive ones (no two overlap) are
    written by their holders into one ``n``-row result, returned as the only partial. They are
    the memory of ``files`` (:class:`PassFiles`), which the next product writes again. Raises
    :class:`HolderStateMissing` when a worker no longer holds its state; any error is raised
    once every call has ended (the first holder's, in ``holders`` order), and the files are
    removed.
    """
    files.prepare(V.shape, spans, exclusive)

    async def call_each() -> None:
        ended = await asyncio.gather(*(
            _call(client, holder.address, key=state.key,
                  args=to_serialize((files.V, high, low, at, holder.nthreads, exclusive)))
            for holder, state, (high, low, at) in zip(holders, states, files.outs, strict=True)),
            return_exceptions=True)
        # Every call has ended before an error is raised: no worker still writes into the
        # files, and no call left running on the event loop keeps the error (and with it the
        # caller's frames and futures) alive.
        for outcome in ended:
            if isinstance(outcome, BaseException):
                raise outcome

    try:
        files.view(files.V)[...] = V
        client.sync(call_each)
    except BaseException:
        files.close()  # a worker may have stopped mid-write, or gone: the next pass starts anew
        raise
    if exclusive:
        return [(0, files.view(files.outs[0][0]), None)]
    return [(lo, files.view(high), files.view(low))
            for (lo, _), (high, low, _) in zip(spans, files.outs, strict=True)]


async def _call(client: Any, address: str, **message: Any) -> Any:
    """Call :data:`HANDLER` on the worker at ``address``, straight from the client."""
    return await getattr(client.rpc(address), HANDLER)(**message)


class HolderStateMissing(LookupError):
    """A worker called for a product no longer holds the holder's state (the tasks will)."""


#: The worker handler that runs a holder's product when the client calls it.
HANDLER = "dkpca_tile_product"


def _install_handler(dask_worker: Any, mapped: dict) -> None:
    """Give the worker :data:`HANDLER` (run on each worker, and on workers that join later)."""

    async def product(key: Any = None, args: tuple = ()) -> None:
        try:
            state = dask_worker.data[key]
        except KeyError:
            raise HolderStateMissing(f"no state {key!r} on {dask_worker.address}") from None
        await dask_worker.loop.run_in_executor(dask_worker.executors["default"],
                                               _product_into, state, mapped, key, *args)

    dask_worker.handlers[HANDLER] = product


def _product_into(state: Any, mapped: dict, key: Any, V: SharedArray, high: SharedArray,
                  low: SharedArray | None, at: int, threads: int, exclusive: bool) -> None:
    """On a worker: a holder's product, summed in rows ``at:`` of the files.

    The files are mapped once per holder state and kept in ``mapped`` (a pass writes the same
    files again while the shapes stay, see :class:`PassFiles`).
    """
    paths = (V.path, high.path, "" if low is None else low.path)
    if key not in mapped or mapped[key][0] != paths:
        mapped[key] = paths, (V.view(writable=False), high.view(),
                              None if low is None else low.view())
    V_view, high_view, low_view = mapped[key][1]
    rows = slice(at, at + state.hi - state.lo)
    out = high_view[rows, ...], None if low_view is None else low_view[rows, ...]
    for part in out:
        if part is not None:
            part[...] = 0.0  # the last pass's partial
    state_product(state, V_view, threads, exclusive, out=out)
