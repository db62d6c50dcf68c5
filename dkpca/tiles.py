"""The training kernel's upper tiles, held where they were computed, multiplied in place.

Kernel PCA's iterative solver needs ``K V`` for the symmetric training kernel ``K = K(X, X)``
many times. The matrix is cut into square tiles (:func:`balanced_tile_rows`) and only the tiles
on and above the diagonal are used: tile ``(i, j)`` serves both ``K_ij V_j`` and ``K_ijᵀ V_i``.
The tiles are dealt to *holders* (each worker of a ``distributed`` cluster, or this process
under the local schedulers), see :mod:`dkpca._tile_holders`, in one of two layouts (each upper
tile held once, or row stripes: :func:`tile_layout`): a product is one task per holder, which
multiplies all of its tiles with all of its threads and returns one partial. Two modes:

* **cached** (:func:`cache_kernel_tiles`): each holder evaluates its tiles once and keeps them;
  the client only ever holds ``n × b`` arrays;
* **streamed** (:func:`symmetric_kernel_product`): each holder keeps the data rows of its tiles
  and evaluates every tile again at every product, for kernels larger than the memory available.

Tiles are stored in float32 where that keeps the eigenvalues accurate, shifted by their own mean
first, and products are accumulated in float64 (:mod:`dkpca._tile_values`). On workers that
share the client's machine, a product calls each worker directly and its bytes go through
shared memory (:mod:`dkpca._shared_memory`); elsewhere it is one task per holder
(:mod:`dkpca._tile_transport`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import dask.array as da
import numpy as np
import psutil

from ._cluster_workers import cluster_workers, live_workers
from ._device import c_float64, to_host
from ._shared_memory import (
    HolderStateMissing,
    PassFiles,
    SharedMemoryFull,
    shared_memory_allowed,
    shared_memory_reaches,
    shared_product,
)
from ._tile_holders import (
    Holder,
    active_client,
    build_state,
    holders,
    partial_rows,
    state_product,
    state_summary,
)
from ._tile_layout import (
    LAYOUT_KEY,
    TILE_LAYOUTS,
    balanced_tile_rows,
    cached_kernel_bytes,
    plan_tiles,
    striped_kernel_bytes,
    tile_layout,
)
from ._tile_transport import (
    _direct_to_holders,
    _gather_or_cancel,
    _on_this_machine,
    _scatter_to_each,
    _sum_partials,
)
from ._tile_values import StoredTile, evaluate_tile
from ._worker_loss import recovering
from .blocked import compute, tile_blocks
from .kernels import Kernel

__all__ = [
    "CACHE_DTYPES",
    "LAYOUT_KEY",
    "TILE_LAYOUTS",
    "KernelTiles",
    "StoredTile",
    "balanced_tile_rows",
    "cache_kernel_tiles",
    "cache_memory_budget",
    "cached_kernel_bytes",
    "evaluate_tile",
    "storage_dtype",
    "striped_kernel_bytes",
    "symmetric_kernel_product",
    "tile_layout",
]

logger = logging.getLogger(__name__)

#: Accepted values of ``cache_dtype``.
CACHE_DTYPES = ("auto", "float32", "float64")

#: Share of a worker's memory limit that cached tiles may fill, less what the worker already
#: uses: distributed starts spilling to disk at 60 % and pauses at 80 %.
WORKER_CACHE_SHARE = 0.5


def storage_dtype(X: Any, dtype: np.dtype | str | None = None) -> np.dtype:
    """Return the tiles' dtype: ``dtype`` if given, else the data's floating dtype.

    Examples
    --------
    >>> import numpy as np
    >>> storage_dtype(np.ones((2, 2), dtype=np.int32)), storage_dtype(np.ones(2), "float32")
    (dtype('float64'), dtype('float32'))
    """
    return np.dtype(np.result_type(X.dtype, np.float32) if dtype is None else dtype)


class KernelTiles:
    """The upper tiles of a symmetric kernel matrix, dealt to holders that keep and multiply them.

    Build it with :func:`cache_kernel_tiles` (tiles evaluated once and kept) or for a streamed
    product (``cached=False``: each holder keeps the data rows of its tiles and evaluates them
    again at every product). Under a ``distributed.Client`` each worker is a holder; under the
    local schedulers this process is the only one. Either way the caller holds only ``n``-sized
    results, and a product is one task per holder.

    Parameters
    ----------
    kernel : Kernel
    X : numpy, scipy.sparse or dask array, (n, d)
        In-memory data is sent to the workers once, each block to the workers that need it,
        never inside a task graph; dask data is read by the workers themselves.
    block_bytes : int
        Memory for one tile.
    dtype : numpy dtype
        Storage dtype of the tiles (float32 or float64).
    cached : bool, default=True
    max_memory : int, optional
        Memory the cached tiles may take on all holders together (by default
        :func:`cache_memory_budget`): decides the layout (see :func:`tile_layout`).

    Attributes
    ----------
    bounds : list of (start, stop)
        Row range of every tile row.
    dtype : numpy.dtype
        Storage dtype of the tiles.
    layout : str
        ``"symmetric"`` or ``"stripes"`` (see :func:`tile_layout`).
    nbytes : int
        Memory of the stored tiles (about half of ``n² × itemsize`` in the symmetric layout,
        up to all of it in stripes; 0 when streamed).
    row_sums : ndarray (n,) or None
        ``K @ 1``, accumulated in float64 before rounding (cached only).
    trace : float or None
        Sum of ``K``'s diagonal (cached only).
    holders : list of Holder
        Where the tiles are: a worker's address and threads, or ``None`` for this process.
    states : list
        Each holder's state: futures on a cluster, the objects themselves locally.
    """

    def __init__(self, kernel: Kernel, X: Any, *, block_bytes: int, dtype: np.dtype,
                 cached: bool = True, max_memory: int | None = None):
        self.kernel, self.dtype, self.cached = kernel, np.dtype(dtype), cached
        n = X.shape[0]
        self.n = n
        self._client = active_client()
        found = holders()
        # partials in shared memory are summed on the client's cores, cheaper than the
        # tiles between stripes evaluated twice (tile_layout)
        by_socket = self._client is not None and not (
            shared_memory_allowed() and all(_on_this_machine(h.address) for h in found))
        plan = plan_tiles(n, self.dtype.itemsize, block_bytes, found, cached,
                          cache_memory_budget if max_memory is None else lambda: max_memory,
                          partials_by_socket=by_socket)
        self.layout, self.bounds = plan.layout, plan.bounds
        rows = self.bounds[0][1]
        self.holders: list[Holder] = [h for h, _, _ in plan.kept]
        self._pairs = [p for _, p, _ in plan.kept]
        self._stripes = [stripe for _, _, stripe in plan.kept]
        # partials that no other overlaps are rounded by their holders (half the bytes back)
        self._exclusive = self.layout == "stripes" or len(self.holders) == 1
        self._shared: bool | None = None  # whether the holders see our shared memory: probed
        self._pass_files = PassFiles()  # kept from pass to pass, removed with the tiles
        weakref.finalize(self, self._pass_files.close)
        self._pass_lock = threading.Lock()  # one product at a time writes the pass files
        self._source: list = []
        self._recipe: list = []
        self.states: list = []
        self.row_sums: np.ndarray | None = None
        self.trace: float | None = None
        self.nbytes = 0
        with self.released_on_error():  # a failed build leaves nothing on the workers
            self._source = self._source_blocks(X, rows)
            self.states = [self._build(h, p, stripe) for h, p, stripe in plan.kept]
            if self._client is None:  # the states hold what they need; only a cluster recovers
                self._source = self._recipe = []
            if cached:
                self._summarise()
        logger.info("%s %d kernel tiles (%s, %d MiB) on %d holder(s), %s layout",
                    "cached" if cached else "streaming", self.n_tiles, self.dtype,
                    self.nbytes // 2**20, len(self.holders), self.layout)

    def release(self) -> None:
        """Drop the holders' states and data rows; on a cluster, cancel their tasks first.

        Builds still running stop and nothing of the tiles stays on the workers. The tiles
        cannot multiply afterwards. Done when building them, or a computation using them,
        fails (:meth:`released_on_error`): the error's traceback holds this object, and a
        ``distributed`` client keeps the error of a failed task (and with it the frames and the
        futures) as long as that task's futures live, so they would never be freed.
        """
        futures = [f for f in (*self.states, *self._source) if hasattr(f, "key")]
        if futures and self._client is not None and self._client.status == "running":
            self._client.cancel(futures)
        self.states, self._source, self._recipe = [], [], []
        self._pass_files.close()

    @contextlib.contextmanager
    def released_on_error(self) -> Iterator[None]:
        """Run the block; if it raises, :meth:`release` the tiles and raise the error again.

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca.kernels import Linear
        >>> tiles = cache_kernel_tiles(Linear(), np.ones((3, 2)), block_bytes=2 * 2 * 8)
        >>> try:
        ...     with tiles.released_on_error():
        ...         raise KeyboardInterrupt
        ... except KeyboardInterrupt:
        ...     tiles.states
        []
        """
        try:
            yield
        except BaseException:
            self.release()
            raise

    @property
    def n_tiles(self) -> int:
        """Number of tiles held, on every holder together."""
        return sum(len(pairs) for pairs in self._pairs)

    def _source_blocks(self, X: Any, rows: int) -> list:
        """Return the data's row blocks: in memory locally, futures on a cluster (sent once).

        The recipe is kept (the caller's array, or the blocks' graph) so that a block lost with
        a worker can be sent or computed again.
        """
        if isinstance(X, da.Array):
            self._recipe, _ = tile_blocks(X, rows)
            if self._client is None:
                return list(compute(*self._recipe))
        else:
            self._recipe = [X[start:stop, :] for start, stop in self.bounds]
            if self._client is None:
                return self._recipe
            if not any(hasattr(block, "dask") for block in self._recipe):  # as _send, at once
                return self._client.scatter(self._recipe, hash=False)
        return [self._send(k) for k in range(len(self._recipe))]

    def _send(self, k: int) -> Any:
        """Return a future of row block ``k`` on the cluster: scattered, or computed there."""
        if isinstance(self._recipe[k], np.ndarray) or not hasattr(self._recipe[k], "dask"):
            return self._client.scatter(self._recipe[k], hash=False)
        return self._client.compute(self._recipe[k])

    def _build(self, holder: Holder, pairs: list[tuple[int, int]], stripe: range | None) -> Any:
        ids = sorted({i for pair in pairs for i in pair})
        args = (self.kernel, self.dtype, self.bounds, pairs, ids, *(self._source[i] for i in ids))
        options = {"cached": self.cached, "threads": holder.nthreads, "device": holder.device,
                   "stripe": stripe}
        if self._client is None:
            return build_state(*args, **options)
        # Pinned to its holder; loosely, so that a lost worker's tiles can be rebuilt elsewhere.
        return self._client.submit(build_state, *args, **options, workers=[holder.address],
                                   allow_other_workers=True, pure=False)

    def _summarise(self) -> None:
        if self._client is None:
            summaries = [state_summary(state) for state in self.states]
        else:
            summaries = _gather_or_cancel(self._client, [
                self._client.submit(state_summary, state, workers=[h.address],
                                    allow_other_workers=True, pure=False)
                for h, state in zip(self.holders, self.states, strict=True)])
        self.row_sums = _sum_partials(self.n, [s[:3] for s in summaries])
        self.trace = math.fsum(s[3] for s in summaries)
        self.nbytes += sum(s[4] for s in summaries)

    def matmul(self, V: np.ndarray) -> np.ndarray:
        """Return ``K @ V`` (float64): one task per holder, one partial back from each.

        A product that fails cancels its tasks on the other holders before the error is
        raised; the tiles stay (:meth:`release` them when they are no longer wanted).

        Raises
        ------
        RuntimeError
            When the tiles were released (:meth:`release`).

        Examples
        --------
        >>> import numpy as np, dask.array as da
        >>> from dkpca.kernels import Linear
        >>> X = np.arange(6.0).reshape(3, 2)
        >>> tiles = cache_kernel_tiles(Linear(), da.from_array(X), block_bytes=2 * 2 * 8)
        >>> tiles.matmul(np.ones((3, 1))).ravel()
        array([ 9., 39., 69.])
        """
        if not self.states:
            raise RuntimeError("these kernel tiles were released (a computation using them "
                               "failed, or release() was called); build them again")
        if self._client is None:  # in this process: the product is where V is
            V = c_float64(V)
            return _sum_partials(self.n, [
                state_product(state, V, h.nthreads, self._exclusive)
                for h, state in zip(self.holders, self.states, strict=True)])
        with self._pass_lock:
            partials = self._distributed_product(np.ascontiguousarray(to_host(V),
                                                                      dtype=np.float64))
            # shared-memory partials are the pass files, written again by the next product
            return _sum_partials(self.n, partials, reused=bool(self._shared))

    @property
    def local(self) -> bool:
        """Whether the holders are this process (no ``distributed`` client)."""
        return self._client is None

    def _distributed_product(self, V: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        return recovering(lambda: self._product_tasks(V), self._recover, logger, "kernel tiles",
                          "evaluating them again")

    def _product_tasks(self, V: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        client = self._client
        addresses = [h.address for h in self.holders]
        if self._shared is None:
            self._shared = (all(_on_this_machine(address) for address in addresses)
                            and shared_memory_reaches(client, addresses))
            logger.info("kernel products: %s", "direct calls, V and the partials in shared "
                        "memory" if self._shared else "one task per holder, through sockets")
        if self._shared and self._states_built():
            spans = [partial_rows(self.bounds, pairs, stripe)
                     for pairs, stripe in zip(self._pairs, self._stripes, strict=True)]
            try:
                return shared_product(client, self.holders, self.states, spans, V,
                                      self._exclusive, self._pass_files)
            except (SharedMemoryFull, HolderStateMissing) as err:
                logger.info("kernel products go through tasks and sockets from now on: %s", err)
                self._shared = False
        direct = _direct_to_holders(client, addresses)
        # One copy of V to each holder, all sent at once (a broadcast scatter would do the
        # same, but logs an event that distributed cannot serialise).
        copies = client.sync(_scatter_to_each, client, V, addresses, direct)
        return _gather_or_cancel(client, [
            client.submit(state_product, state, copy, h.nthreads, self._exclusive,
                          workers=[h.address], allow_other_workers=True, pure=False)
            for h, state, copy in zip(self.holders, self.states, copies, strict=True)],
            direct=direct)

    def _states_built(self) -> bool:
        """Wait for the states still being built; return whether every one is in memory.

        A direct call finds a holder's state in its worker's memory only once the task that
        builds it has run: cached states have (their sums were gathered), streamed ones are
        not waited for when built. A state that failed or was lost is not waited for: the
        pass then goes through tasks, which raise its error or recover it.
        """
        from distributed import wait

        pending = [state for state in self.states if state.status == "pending"]
        if pending:
            wait(pending)
        return all(state.status == "finished" for state in self.states)

    def _recover(self) -> None:
        """Rebuild every holder whose state (or the data it needs) was lost, on live workers."""
        client = self._client
        workers = sorted(live_workers(client, 1, timeout=60).items())
        self._shared = None  # new workers: probe them again
        for k, block in enumerate(self._source):  # scattered data is gone with its worker
            if block.status in ("lost", "cancelled", "error"):
                self._source[k] = self._send(k)
        alive = {address for address, _ in workers}
        for k, (holder, state) in enumerate(zip(self.holders, self.states, strict=True)):
            if state.status == "finished" and holder.address in alive:
                continue
            used = [h.address for h in self.holders]
            address, info = min(workers, key=lambda w: used.count(w[0]))
            self.holders[k] = Holder(address, max(1, int(info["nthreads"])), holder.device)
            self.states[k] = self._build(self.holders[k], self._pairs[k], self._stripes[k])


def cache_kernel_tiles(
    kernel: Kernel,
    X: Any,
    *,
    block_bytes: int,
    dtype: np.dtype | str | None = None,
) -> KernelTiles:
    """Evaluate the upper tiles of ``K(X, X)`` on the holders and keep them there.

    Parameters
    ----------
    kernel : Kernel
    X : numpy, scipy.sparse or dask array, (n, d)
    block_bytes : int
        Memory for one tile (capped by the workers' memory, see
        :func:`dkpca.blocked.worker_block_bytes`).
    dtype : numpy dtype, optional
        Storage dtype (float32 or float64); by default the data's floating dtype.

    Returns
    -------
    KernelTiles

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = da.from_array(np.random.default_rng(0).normal(size=(40, 2)))
    >>> tiles = cache_kernel_tiles(RBF(gamma=1.0), X, block_bytes=16 * 16 * 4, dtype="float32")
    >>> tiles.bounds, tiles.dtype, tiles.nbytes
    ([(0, 14), (14, 28), (28, 40)], dtype('float32'), 4272)
    """
    return KernelTiles(kernel, X, block_bytes=block_bytes, dtype=storage_dtype(X, dtype))


def symmetric_kernel_product(
    kernel: Kernel,
    X: Any,
    V: np.ndarray,
    *,
    block_bytes: int,
    dtype: np.dtype | str | None = None,
) -> np.ndarray:
    """Compute ``K(X, X) @ V`` (float64) from the upper tiles, evaluating each on the fly.

    Each holder evaluates its tiles (see :func:`evaluate_tile`: a float32 GEMM when ``dtype`` is
    float32 and the kernel is translation invariant), multiplies them by the matching blocks of
    ``V`` and drops them. Memory stays at a tile per thread, the data rows and ``V``'s size.
    For several products with the same kernel, build ``KernelTiles(..., cached=False)`` once:
    the data is then sent to the workers once.

    Parameters
    ----------
    kernel : Kernel
    X : numpy, scipy.sparse or dask array, (n, d)
    V : numpy array, (n, b)
    block_bytes : int
        Memory for one tile.
    dtype : numpy dtype, optional
        Precision of the tiles' evaluation and product (the data's by default).

    Returns
    -------
    numpy array, (n, b)

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(10, 2))
    >>> V = np.ones((10, 1))
    >>> got = symmetric_kernel_product(RBF(gamma=0.5), da.from_array(X, chunks=3), V,
    ...                                block_bytes=16 * 16 * 8)
    >>> bool(np.allclose(got, RBF(gamma=0.5).pairwise(X) @ V))
    True
    """
    tiles = KernelTiles(kernel, X, block_bytes=block_bytes, dtype=storage_dtype(X, dtype),
                        cached=False)
    try:
        return tiles.matmul(V)
    finally:  # the data rows leave the workers now, whether the product failed or not
        tiles.release()


def cache_memory_budget() -> int:
    """Bytes the cached tiles may take where they will be held.

    Under a running ``distributed.Client`` whose workers have memory limits: the sum over
    workers of :data:`WORKER_CACHE_SHARE` of their limit less the memory they already use.
    Otherwise (threads, or workers without limits): half of this machine's available memory.

    Examples
    --------
    >>> cache_memory_budget() > 0
    True
    """
    client = active_client()
    if client is not None:
        workers = cluster_workers(client).values()
        limits = [w.get("memory_limit") for w in workers]
        if workers and all(limits):
            return int(sum(
                max(0.0, WORKER_CACHE_SHARE * w["memory_limit"] - w["metrics"]["memory"])
                for w in workers
            ))
    return int(psutil.virtual_memory().available // 2)
