"""Who holds each kernel tile, and a Krylov pass as one task per holder.

A *holder* is a place where tiles live and are multiplied: each worker of a ``distributed``
cluster, or this process under the local schedulers (the one-holder case of the same design).
The upper tiles of the training kernel are dealt to the holders (see
:mod:`dkpca._tile_layout`); each holder evaluates its tiles once with all of its threads
(cached mode) and keeps them, or keeps the data rows they need and evaluates them again every
pass (streamed mode). A pass then costs:

* **communication proportional to holders, not tiles**: ``V`` (``n × b``) is sent once to each
  worker, each worker multiplies all of its tiles and sums its partial products locally, and the
  client receives one partial per worker and places or adds them;
* **O(holders) tasks**, whatever the number of tiles: the scheduler's per-task cost and the
  tree of partial sums between workers that one task per tile needed are gone;
* **every core busy without oversubscription**: inside a holder, its ``T`` threads take tiles
  from one queue (largest first) and run single-threaded BLAS on them; products are added into
  one ``n × b`` buffer under a lock per row block.

Two layouts (:func:`dkpca.tiles.tile_layout`). **Symmetric**: each upper tile is held once (the
cluster holds ``n² / 2`` entries), dealt in contiguous runs of the row-major order; holder ``h``
returns rows ``lo_h:n``, the rows its tiles touch, which overlap: about ``2/3 · W · n · b``
values a pass for ``W`` workers, added on the client. **Stripes**: holder ``h`` owns whole row
blocks (:attr:`HolderState.stripe`) and holds every upper tile that touches them, so a tile
between two stripes is held (and evaluated) by both; each uses the one product that falls in
its rows and returns only those, ``n · b`` values a pass in all, at up to twice the memory.
A partial that no other overlaps (a stripe, or the one holder's) is rounded where it is made:
one float64 array comes back instead of a double-double pair, half the bytes, the same
numbers.
A holder lost between passes (a killed worker) is rebuilt: the pass that finds its tiles gone
evaluates them again on a live worker from the engine's own copy of the data rows, then runs
(:mod:`dkpca._worker_loss`).

On a GPU (``dkpca.device = "cuda"``, see :mod:`dkpca._device`) a holder copies its data rows to
its GPU once, evaluates and keeps its tiles there, and multiplies them one after another on
one thread (the GPU runs each GEMM on all of its cores); ``V`` goes to the GPU and the partial
comes back once a pass.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import numpy as np
from dask.sizeof import sizeof

from ._cluster_workers import cluster_workers
from ._device import (
    array_module,
    c_float64,
    configured_device,
    device_free_bytes,
    first_call_alone,
    import_cupy,
    into,
    namespace_dtype,
    nbytes,
    to_device,
    to_host,
)
from ._heap import freed_blocks_reused
from ._tile_values import BlockOfV, ProductScratch, StoredTile
from .kernels import Kernel
from .linalg import single_threaded_blas

__all__ = [
    "Holder",
    "active_client",
    "device_memory",
    "holders",
    "local_threads",
    "partial_rows",
    "tile_areas",
    "two_sum_into",
]

def active_client() -> Any:
    """Return the ``distributed.Client`` of dask's current scheduler, or ``None``.

    ``dask.config.set(scheduler="threads")`` runs on threads even where a client exists, as
    every other dask computation does.

    Examples
    --------
    >>> active_client() is None  # no cluster in a doctest
    True
    """
    if "distributed" not in sys.modules:  # no client can exist if it was never imported
        return None
    scheduler = dask.base.get_scheduler()
    client = getattr(scheduler, "__self__", None)
    if type(client).__name__ != "Client" or client.status != "running":
        return None
    return client


def local_threads() -> int:
    """Threads of the local scheduler: its ``num_workers``, one for ``sync``, else all cores.

    Examples
    --------
    >>> import dask
    >>> with dask.config.set(scheduler="sync"):
    ...     local_threads()
    1
    """
    if dask.config.get("scheduler", None) in ("sync", "synchronous", "single-threaded"):
        return 1
    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


@dataclasses.dataclass
class Holder:
    """A place that holds tiles: a worker or this process.

    ``address`` is the worker's (``None``: this process), ``nthreads`` its threads and
    ``device`` where its tiles live (``"cpu"``, or ``"cuda"``: that worker's GPU).
    """

    address: str | None
    nthreads: int
    device: str = "cpu"


def holders() -> list[Holder]:
    """Return the holders under dask's current scheduler: each worker, or this process.

    Every holder uses the device of the ``dkpca.device`` setting; on ``"cuda"``, CuPy and a
    GPU must be there (checked here for this process, by each worker when it builds).

    Examples
    --------
    >>> [(h.address, h.device) for h in holders()]
    [(None, 'cpu')]
    """
    device = configured_device()
    client = active_client()
    if client is None:
        if device == "cuda":
            import_cupy()
        return [Holder(None, local_threads(), device)]
    workers = cluster_workers(client)
    return [Holder(address, max(1, int(info["nthreads"])), device)
            for address, info in sorted(workers.items())]


def device_memory() -> int:
    """Return the GPU memory the holders can still take, all GPUs together.

    This process's GPU under the local schedulers, else the sum over the workers' GPUs (each
    worker asked for its own).
    """
    client = active_client()
    if client is None:
        return device_free_bytes()
    return int(sum(client.run(device_free_bytes).values()))


@dataclasses.dataclass
class HolderState:
    """What one holder keeps between passes: its tiles, or the data rows to evaluate them.

    Lives where the holder is (a worker's memory, or this process), so it stays picklable for a
    worker that must spill; no thread pool or lock is kept in it.
    """

    kernel: Kernel
    dtype: np.dtype
    bounds: list[tuple[int, int]]
    pairs: list[tuple[int, int]]
    blocks: dict[int, Any]  # streamed: the data rows of every tile's two row blocks
    tiles: list[StoredTile] | None  # cached: the evaluated tiles, in ``pairs`` order
    device: str = "cpu"
    stripe: range | None = None  # row blocks whose products it returns; None: all it touches
    forms: dict[int, bool] = dataclasses.field(default_factory=dict)  # streamed: exp's form

    def owns(self, block: int) -> bool:
        """Whether products into row block ``block`` are this holder's to return."""
        return self.stripe is None or block in self.stripe

    @property
    def nbytes(self) -> int:
        """Memory of what is held (on the GPU for a ``"cuda"`` holder)."""
        held = sum(t.nbytes for t in self.tiles) if self.tiles is not None else 0
        return held + sum(nbytes(b) for b in self.blocks.values())

    @property
    def namespace(self) -> Any:
        """The array library of what it holds: numpy, CuPy on a GPU, or the one of its rows."""
        held = self.blocks.values() if self.tiles is None else (t.values for t in self.tiles)
        return array_module(*held)

    def zeros(self, shape: int | tuple[int, ...]) -> Any:
        """float64 zeros in its library, on its device."""
        xp = self.namespace
        return xp.zeros(shape, dtype=xp.float64)

    @property
    def threads(self) -> int | None:
        """Threads its products may use: one on a GPU (which parallelises each product)."""
        return 1 if self.device == "cuda" else None

    @property
    def lo(self) -> int:
        """First row of its partial product (see :func:`partial_rows`)."""
        return partial_rows(self.bounds, self.pairs, self.stripe)[0]

    @property
    def hi(self) -> int:
        """End of its partial product's rows (see :func:`partial_rows`)."""
        return partial_rows(self.bounds, self.pairs, self.stripe)[1]


def partial_rows(bounds: Sequence[tuple[int, int]], pairs: Sequence[tuple[int, int]],
                 stripe: range | None) -> tuple[int, int]:
    """Return the rows ``lo:hi`` of a holder's partial product.

    Its stripe's rows, else from the first row its tiles touch to ``n``.

    Examples
    --------
    >>> bounds = [(0, 10), (10, 20), (20, 30)]
    >>> partial_rows(bounds, [(1, 1), (1, 2)], None), partial_rows(bounds, [(0, 1)], range(1, 2))
    ((10, 30), (10, 20))
    """
    if stripe is not None:
        return bounds[stripe[0]][0], bounds[stripe[-1]][1]
    return min((bounds[i][0] for i, _ in pairs), default=bounds[-1][1]), bounds[-1][1]


@sizeof.register(HolderState)
def _sizeof_state(state: HolderState) -> int:  # distributed's memory accounting: host memory
    return state.nbytes if state.device == "cpu" else 0


def tile_areas(bounds: Sequence[tuple[int, int]],
               pairs: Sequence[tuple[int, int]]) -> np.ndarray:
    """Entries of each tile ``(i, j)`` of ``pairs``, as float64.

    Examples
    --------
    >>> tile_areas([(0, 10), (10, 15)], [(0, 0), (0, 1), (1, 1)])
    array([100.,  50.,  25.])
    """
    return np.array([(bounds[i][1] - bounds[i][0]) * (bounds[j][1] - bounds[j][0])
                     for i, j in pairs], dtype=np.float64)


def _largest_first(bounds: list[tuple[int, int]], pairs: list[tuple[int, int]]) -> list[int]:
    sizes = tile_areas(bounds, pairs)
    return sorted(range(len(pairs)), key=lambda k: -sizes[k])


def build_state(kernel: Kernel, dtype: np.dtype, bounds: list[tuple[int, int]],
                pairs: list[tuple[int, int]], block_ids: list[int], *blocks: Any,
                cached: bool, threads: int, device: str = "cpu",
                stripe: range | None = None) -> HolderState:
    """Make a holder's state on ``device``; cached: evaluate its tiles on ``threads`` threads."""
    rows = {i: to_device(block, device) for i, block in zip(block_ids, blocks, strict=True)}
    if not cached:
        return HolderState(kernel, dtype, bounds, pairs, rows, None, device, stripe)
    state = HolderState(kernel, dtype, bounds, pairs, {}, None, device, stripe)
    tiles: list[StoredTile | None] = [None] * len(pairs)

    def evaluate(k: int) -> None:
        i, j = pairs[k]
        with first_call_alone(("tile", repr(kernel), dtype.str, i == j), device):
            tiles[k] = StoredTile.evaluate(kernel, rows[i], rows[j], dtype, i == j)

    # in a nanny's worker, temporaries and scratch reuse freed pages (see dkpca._heap)
    with single_threaded_blas(), freed_blocks_reused(), \
            ThreadPoolExecutor(state.threads or threads) as pool:
        list(pool.map(evaluate, _largest_first(bounds, pairs)))
    state.tiles = tiles
    return state


def state_summary(state: HolderState) -> tuple[int, np.ndarray, np.ndarray, float, int]:
    """Sum a cached holder's tiles: ``(lo, high, low, trace, bytes)``.

    Row sums of its rows ``lo:hi`` as a double-double (see :func:`two_sum_into`), the trace of
    its diagonal tiles and the memory of all it holds.
    """
    lo, hi = state.lo, state.hi
    high, low, trace = state.zeros(hi - lo), state.zeros(hi - lo), 0.0

    def add(block: int, sums: np.ndarray) -> None:
        rows = slice(state.bounds[block][0] - lo, state.bounds[block][1] - lo)
        two_sum_into(high[rows], low[rows], sums)

    for (i, j), tile in zip(state.pairs, state.tiles or (), strict=True):
        if state.owns(i):
            add(i, tile.row_sums)
            trace += tile.trace
        if i != j and state.owns(j):
            add(j, tile.col_sums)
    return lo, to_host(high), to_host(low), trace, state.nbytes


def _operand(V: Any, xp: Any) -> Any:
    """``V`` in float64 in the holder's library ``xp``, C-ordered where the library has order."""
    if array_module(V) is not xp:
        V = xp.asarray(np.ascontiguousarray(to_host(V), dtype=np.float64))
    return c_float64(V)


def two_sum_into(high: np.ndarray, low: np.ndarray, term: np.ndarray,
                 scratch: Sequence[np.ndarray] | None = None) -> None:
    """Add ``term`` to the double-double sum ``high + low`` in place (Knuth's TwoSum).

    Partial products are summed as double-doubles, so that the rounded total is the same
    whatever the order and grouping of the terms: whichever holder, thread or task order made
    them, a pass returns the same float64 numbers, and a fit on a cluster gives the threaded
    fit's result (a Krylov iteration turns a last-bit difference into a 1e-8 one).
    ``scratch``, three float64 arrays with at least ``term``'s rows, holds the intermediate
    values (new arrays by default).

    Examples
    --------
    >>> import numpy as np
    >>> high, low = np.array([1.0]), np.zeros(1)
    >>> for term in (1e-17, 1e-17, -1.0):
    ...     two_sum_into(high, low, np.array([term]))
    >>> high + low
    array([2.e-17])
    """
    xp = array_module(high)
    if scratch is None:
        scratch = [xp.empty(high.shape, dtype=high.dtype) for _ in range(3)]
    total, virtual, error = (buffer[: term.shape[0], ...] for buffer in scratch)
    into(xp, "add", high, term, out=total)
    into(xp, "subtract", total, high, out=virtual)
    into(xp, "subtract", total, virtual, out=error)
    into(xp, "subtract", high, error, out=error)  # high - (total - virtual)
    into(xp, "subtract", term, virtual, out=virtual)  # term - virtual
    into(xp, "add", error, virtual, out=error)
    low += error
    high[...] = total


def state_product(state: HolderState, V: np.ndarray, threads: int,
                  exclusive: bool = False,
                  out: tuple[np.ndarray, np.ndarray | None] | None = None) -> tuple[int, Any, Any]:
    """Multiply every held tile by ``V``: ``(lo, high, low)``.

    Rows ``lo:hi`` of the product (its stripe, or every row its tiles touch), as a
    double-double sum ``high + low`` (see :func:`two_sum_into`), on the holder's device when
    ``V`` is on a GPU (a holder in this process, whose Krylov basis stays there), else on the
    host. ``exclusive``: no other holder's partial overlaps these rows, so the sum is rounded
    here, ``(lo, high + low, None)``: the same numbers as rounding after the transfer, in
    half the bytes. ``out``: host arrays of zeros, ``(high, low)`` of the partial's shape
    (``low`` ``None`` when exclusive), that the sum is made in and returned (a shared-memory
    file: the product is not copied there afterwards).
    """
    lo, xp = state.lo, state.namespace
    shape = (state.hi - lo, V.shape[1])
    if out is None or xp is not np:
        high, low = state.zeros(shape), state.zeros(shape)
    else:
        high, low = out[0], state.zeros(shape) if out[1] is None else out[1]
    locks = [threading.Lock() for _ in state.bounds]
    keep_on_device = xp is not np and array_module(V) is xp
    V = _operand(V, xp)
    used = sorted({b for pair in state.pairs for b in pair})
    blocks = {b: BlockOfV.of(V[slice(*state.bounds[b]), ...], state.dtype) for b in used}
    forms: dict[int, Any] = {}  # each streamed tile's form of exp, found this pass
    local = threading.local()  # each thread's ProductScratch (host holders only)
    tile_rows = max(b - a for a, b in state.bounds)

    def scratch() -> ProductScratch | None:
        if xp is not np:
            return None
        if not hasattr(local, "scratch"):
            local.scratch = ProductScratch(tile_rows, V.shape[1], state.dtype)
        return local.scratch

    def add(block: int, part: np.ndarray, buffers: ProductScratch | None) -> None:
        rows = slice(state.bounds[block][0] - lo, state.bounds[block][1] - lo)
        with locks[block]:
            two_sum_into(high[rows, ...], low[rows, ...], part, buffers.sums if buffers else None)

    kernel_name = repr(state.kernel)

    def multiply(k: int) -> None:
        i, j = state.pairs[k]
        key = ("tile product", kernel_name, state.dtype.str, i == j, state.tiles is None)
        with first_call_alone(key, state.device):
            multiply_tile(k, i, j)

    def multiply_tile(k: int, i: int, j: int) -> None:
        if state.tiles is not None:
            tile = state.tiles[k]
        else:
            tile = StoredTile.evaluate(state.kernel, state.blocks[i], state.blocks[j],
                                       state.dtype, i == j, statistics=False,
                                       near_one=state.forms.get(k))
            if k not in state.forms and tile.near_one is not None:
                forms[k] = tile.near_one
        buffers = scratch()
        if state.owns(i):
            add(i, tile.product(blocks[j], buffers), buffers)
        if i != j and state.owns(j):
            add(j, tile.product(blocks[i], buffers, transposed=True), buffers)

    # in a nanny's worker, temporaries and scratch reuse freed pages (see dkpca._heap)
    with single_threaded_blas(), freed_blocks_reused(), \
            ThreadPoolExecutor(state.threads or threads) as pool:
        list(pool.map(multiply, _largest_first(state.bounds, state.pairs)))
    if forms:  # read back once, after the pass: later passes know each tile's form
        found = xp.stack([xp.asarray(f, dtype=namespace_dtype(xp, np.bool_))
                          for f in forms.values()])
        state.forms.update(zip(forms, to_host(found).tolist(), strict=True))
    if exclusive:
        high += low
        low = None
    if out is not None and xp is not np:  # a GPU holder's sum, into the host's arrays
        out[0][...] = to_host(high)
        if low is not None:
            out[1][...] = to_host(low)
        return lo, out[0], out[1]
    if keep_on_device:  # a GPU holder in this process: its Krylov basis stays on the GPU
        return lo, high, low
    return lo, to_host(high), None if low is None else to_host(low)
