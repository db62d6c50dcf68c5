"""The training kernel's upper tiles as dask tasks, kept where they were computed.

Kernel PCA's iterative solver needs ``K V`` for the symmetric training kernel ``K = K(X, X)``
many times. The matrix is cut into square tiles (see :func:`dkpca.blocked.tile_rows`) and only
the tiles on and above the diagonal are evaluated: tile ``(i, j)`` serves both ``K_ij V_j`` and
``K_ijᵀ V_i``. Two ways to run the product:

* **cached** (:func:`cache_kernel_tiles`): the tiles are evaluated once and *persisted* where
  they were computed, on the workers of a ``distributed`` cluster or in local memory under the
  threaded scheduler (the same code path). Every product is a set of tasks next to the tiles:
  each block of ``V`` is one key (sent once per pass), each tile task returns two
  ``t × b`` partial products, and the partial products of a row block are summed in a tree.
  The client only ever holds ``n × b`` arrays. A lost worker loses its tiles; dask recomputes
  them from their graph when the next product needs them.
* **streamed** (:func:`symmetric_kernel_product`): the same tasks evaluate their tile, multiply
  and drop it, for kernels larger than the memory available.

**Store in float32, accumulate in float64.** A tile is stored as ``K_ij - s_ij`` for its own
mean ``s_ij``, evaluated relative to a constant where the kernel allows (RBF: ``exp(z) - 1``
for a tile whose entries are mostly near 1, ``exp(z)`` for one mostly near 0, see
:meth:`~dkpca.kernels.Kernel.pairwise_offset`), so rounding to float32 keeps the digits
that matter even when the raw kernel is nearly constant (a small RBF ``gamma`` puts every entry
near 1 and the top uncentred eigenvalue near ``n``). The shift comes back exactly as a rank-one
term, ``K_ij V_j = (K_ij - s_ij) V_j + s_ij 1 (1ᵀ V_j)``, added in float64; partial products are
converted to float64 before they are summed. Translation-invariant kernels (RBF) are also
*evaluated* with a float32 GEMM when tiles are stored in float32: both blocks are first moved by
the same vector (the first block's mean), which leaves the kernel unchanged and removes the
cancellation a large offset would cause in ``||x||² - 2<x, y> + ||y||²``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
import psutil
import scipy.sparse

from .blocked import (
    compute,
    persist,
    scheduler_threads,
    tile_blocks,
    tile_rows,
    tree_sum,
    upper_pairs,
)
from .kernels import Kernel

__all__ = [
    "CACHE_DTYPES",
    "KernelTiles",
    "StoredTile",
    "balanced_tile_rows",
    "cache_kernel_tiles",
    "cache_memory_budget",
    "cached_kernel_bytes",
    "evaluate_tile",
    "symmetric_kernel_product",
]

logger = logging.getLogger(__name__)

#: Rows of a streamed tile whose mean serves as its shift.
_SHIFT_SAMPLE_ROWS = 64

#: Accepted values of ``cache_dtype``.
CACHE_DTYPES = ("auto", "float32", "float64")

#: Share of a worker's memory limit that cached tiles may fill, less what the worker already
#: uses: distributed starts spilling to disk at 60 % and pauses at 80 %.
WORKER_CACHE_SHARE = 0.5


def evaluate_tile(
    kernel: Kernel, Xi: np.ndarray, Xj: np.ndarray, dtype: np.dtype
) -> tuple[np.ndarray, float]:
    """Return ``K(Xi, Xj) - c`` and ``c`` (see :meth:`Kernel.pairwise_offset`).

    With ``dtype`` float32 and a translation-invariant kernel, a float32 GEMM is safe: both
    blocks are moved by ``Xi``'s mean first, so the distance expansion sees small norms
    whatever the data's offset. Other kernels are evaluated in the data's precision.

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(5, 3)) + 1e4  # a large offset
    >>> K32, c = evaluate_tile(RBF(gamma=0.5), X, X, np.dtype(np.float32))
    >>> K32.dtype, bool(np.allclose(K32 + c, RBF(gamma=0.5).pairwise(X), atol=1e-6))
    (dtype('float32'), True)
    """
    # Sparse blocks stay sparse (moving them would densify them); sparse data sit near 0.
    if (np.dtype(dtype) == np.float32 and kernel.translation_invariant
            and not scipy.sparse.issparse(Xi)):
        center = Xi.mean(axis=0, dtype=np.float64)
        Xi = (Xi - center).astype(np.float32)
        Xj = (Xj - center).astype(np.float32)
    return kernel.pairwise_offset(Xi, Xj)


@dataclass
class StoredTile:
    """One cached tile: ``K_ij - shift`` in the storage dtype, with float64 statistics.

    Attributes
    ----------
    values : ndarray
        The tile less ``shift``, float32 or float64.
    shift : float
        The tile's mean, removed before rounding.
    row_sums, col_sums : ndarray
        Row and column sums of the tile itself (float64, before rounding).
    trace : float
        Its trace when it lies on the diagonal, else 0.
    """

    values: np.ndarray
    shift: float
    row_sums: np.ndarray
    col_sums: np.ndarray
    trace: float

    @classmethod
    def evaluate(
        cls,
        kernel: Kernel,
        Xi: np.ndarray,
        Xj: np.ndarray,
        dtype: np.dtype,
        diagonal: bool,
        statistics: bool = True,
    ) -> StoredTile:
        """Evaluate ``K(Xi, Xj)`` and store it shifted, in ``dtype``.

        ``statistics=False`` (a tile used once, in a streamed product) skips the row and column
        sums and the trace (left at zero) and takes the shift from a subsample of rows: any
        constant keeps the product exact, a typical one keeps it accurate.

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca.kernels import RBF
        >>> X = np.zeros((3, 2))
        >>> tile = StoredTile.evaluate(RBF(gamma=1.0), X, X, np.dtype(np.float32), True)
        >>> tile.shift, tile.trace, tile.values.dtype, float(abs(tile.values).max())
        (1.0, 3.0, dtype('float32'), 0.0)
        """
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: solvers report it
            K, base = evaluate_tile(kernel, Xi, Xj, dtype)
            if diagonal:  # exact: a distance expansion's cancellation is worst for x against x
                np.fill_diagonal(K, kernel.diag(Xi) - base)
            if not statistics:
                step = max(1, K.shape[0] // _SHIFT_SAMPLE_ROWS)
                mean = float(K.dtype.type(K[::step].mean(dtype=np.float64)))
                K -= K.dtype.type(mean)
                empty = np.zeros(0)
                return cls(K.astype(dtype, copy=False), base + mean, empty, empty, 0.0)
            # Sums as GEMVs in the tile's precision (blocked accumulation: about 1e-7 relative
            # in float32), three times faster than a float64 reduction over the tile.
            row_sums = (K @ np.ones(K.shape[1], K.dtype)).astype(np.float64)
            col_sums = (np.ones(K.shape[0], K.dtype) @ K).astype(np.float64)
            # Rounded to the tile's precision first: the shift recorded is exactly the one
            # subtracted (else every entry of a tile would carry the same rounding error).
            mean = float(K.dtype.type(row_sums.sum() / max(1, K.size)))
            trace = float(np.trace(K, dtype=np.float64)) + base * K.shape[0] if diagonal else 0.0
            K -= K.dtype.type(mean)
        return cls(K.astype(dtype, copy=False), base + mean, row_sums + base * K.shape[1],
                   col_sums + base * K.shape[0], trace)

    def products(self, Vi: np.ndarray, Vj: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(K_ij Vj, K_ijᵀ Vi)`` in float64; a diagonal tile (``Vj`` None) gives one.

        The GEMMs run in the storage dtype; the shift's rank-one term is added in float64.
        """
        if Vj is None:
            return (self._product(self.values, Vi),)
        return self._product(self.values, Vj), self._product(self.values.T, Vi)

    def _product(self, values: np.ndarray, V: np.ndarray) -> np.ndarray:
        V_cast = np.asarray(V, dtype=values.dtype, order="C")
        out = (values @ V_cast).astype(np.float64, copy=False)
        out += self.shift * V.sum(axis=0, dtype=np.float64)
        return out

    @property
    def nbytes(self) -> int:
        """Memory of the stored values."""
        return self.values.nbytes


def _summary(tile: StoredTile) -> tuple[np.ndarray, np.ndarray, float, int]:
    return tile.row_sums, tile.col_sums, tile.trace, tile.nbytes


def _cached_pair(tile: StoredTile, Vi: np.ndarray, Vj: np.ndarray | None) -> tuple:
    return tile.products(Vi, Vj)


def _streamed_pair(
    kernel: Kernel,
    Xi: np.ndarray,
    Xj: np.ndarray,
    Vi: np.ndarray,
    Vj: np.ndarray | None,
    dtype: np.dtype,
) -> tuple:
    tile = StoredTile.evaluate(kernel, Xi, Xj, dtype, Vj is None, statistics=False)
    return tile.products(Vi, Vj)


def _tasks(function: Callable) -> dict[bool, Callable]:
    """Delayed ``function`` returning two partial products, or one (key ``True``: diagonal).

    Not pure: a pass's tasks get fresh keys without hashing their (large) arguments.
    """
    return {False: dask.delayed(function, pure=False, nout=2),
            True: dask.delayed(function, pure=False, nout=1)}


def _symmetric_product(
    pair_task: Callable[[int, int, object, object | None], object],
    n_blocks: int,
    bounds: list[tuple[int, int]],
    V: np.ndarray,
) -> np.ndarray:
    """``K V`` from one task per upper tile, partial products summed per row block in a tree.

    ``pair_task(i, j, Vi, Vj)`` returns a delayed tuple of partial products (one for a diagonal
    tile, where ``Vj`` is None).
    """
    V = np.asarray(V, dtype=np.float64)
    # One key per row block of V: the scheduler ships it once to the workers that need it.
    # C order whatever the caller's layout: a GEMM's rounding depends on its operands' layout,
    # and a distributed scheduler hands tasks C-ordered copies.
    parts = [dask.delayed(np.ascontiguousarray(V[start:stop]), pure=True)
             for start, stop in bounds]
    contributions: list[list] = [[] for _ in range(n_blocks)]
    for i, j in upper_pairs(n_blocks):
        if i == j:
            (to_i,) = pair_task(i, j, parts[i], None)
            contributions[i].append(to_i)
        else:
            to_i, to_j = pair_task(i, j, parts[i], parts[j])
            contributions[i].append(to_i)
            contributions[j].append(to_j)
    sums = [tree_sum(pieces) for pieces in contributions]
    return np.concatenate(compute(*sums), axis=0)


#: Tiles per scheduler thread that the cache and the streamed product aim for (smaller tiles
#: than ``block_bytes`` allows when ``n`` is small), so that every thread stays busy.
TILES_PER_THREAD = 3

#: Smallest tile side chosen for balance: below it, per-task overheads start to show.
MIN_BALANCED_ROWS = 1024


def balanced_tile_rows(n: int, itemsize: int, block_bytes: int) -> int:
    """Tile side for ``n`` rows: at most ``block_bytes`` a tile, enough tiles for every thread.

    Examples
    --------
    >>> balanced_tile_rows(100_000, 4, 128 * 2**20)  # 18 equal tiles of at most 5792 rows
    5556
    >>> balanced_tile_rows(10_000, 4, 128 * 2**20) < 5792  # more, smaller tiles
    True
    """
    t = min(n, tile_rows(itemsize, block_bytes))
    wanted = TILES_PER_THREAD * scheduler_threads()
    r = -(-n // t)
    while r * (r + 1) // 2 < wanted and -(-n // (r + 1)) >= MIN_BALANCED_ROWS:
        r += 1
    return -(-n // r)


def _storage_dtype(X: da.Array, dtype: np.dtype | str | None) -> np.dtype:
    return np.dtype(np.result_type(X.dtype, np.float32) if dtype is None else dtype)


class KernelTiles:
    """The upper tiles of a symmetric kernel matrix, persisted where they were computed.

    Build it with :func:`cache_kernel_tiles`. Under a ``distributed.Client`` the tiles live on
    the workers and :meth:`matmul` runs next to them; under the threaded scheduler they are
    held in this process. Either way the caller holds only ``n``-sized results.

    Attributes
    ----------
    bounds : list of (start, stop)
        Row range of every tile row.
    dtype : numpy.dtype
        Storage dtype of the tiles.
    nbytes : int
        Memory of the stored tiles (about half of ``n² × itemsize``).
    row_sums : ndarray (n,)
        ``K @ 1``, accumulated in float64 before rounding.
    trace : float
        Sum of ``K``'s diagonal.
    """

    def __init__(
        self,
        tiles: list,
        bounds: list[tuple[int, int]],
        dtype: np.dtype,
        row_sums: np.ndarray,
        trace: float,
        nbytes: int,
    ):
        self.tiles, self.bounds, self.dtype = tiles, bounds, dtype
        self.row_sums, self.trace, self.nbytes = row_sums, trace, nbytes
        self.n = bounds[-1][1]

    def matmul(self, V: np.ndarray) -> np.ndarray:
        """Return ``K @ V`` (float64), computed as tasks next to the tiles.

        Examples
        --------
        >>> import numpy as np, dask.array as da
        >>> from dkpca.kernels import Linear
        >>> X = np.arange(6.0).reshape(3, 2)
        >>> tiles = cache_kernel_tiles(Linear(), da.from_array(X), block_bytes=2 * 2 * 8)
        >>> tiles.matmul(np.ones((3, 1))).ravel()
        array([ 9., 39., 69.])
        """
        index = {pair: tile for pair, tile in zip(upper_pairs(len(self.bounds)), self.tiles,
                                                  strict=True)}
        tasks = _tasks(_cached_pair)

        def pair_task(i: int, j: int, Vi, Vj):
            return tasks[Vj is None](index[i, j], Vi, Vj)

        return _symmetric_product(pair_task, len(self.bounds), self.bounds, V)


def cache_kernel_tiles(
    kernel: Kernel,
    X: da.Array,
    *,
    block_bytes: int,
    dtype: np.dtype | str | None = None,
) -> KernelTiles:
    """Evaluate the upper tiles of ``K(X, X)`` and persist them where they were computed.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
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
    >>> len(tiles.tiles), tiles.bounds, tiles.dtype
    (6, [(0, 14), (14, 28), (28, 40)], dtype('float32'))
    """
    dtype = _storage_dtype(X, dtype)
    blocks, bounds = tile_blocks(X, balanced_tile_rows(X.shape[0], dtype.itemsize, block_bytes))
    evaluate = dask.delayed(StoredTile.evaluate, pure=True)
    pairs = upper_pairs(len(blocks))
    tiles = persist(*(evaluate(kernel, blocks[i], blocks[j], dtype, i == j) for i, j in pairs))
    summaries = compute(*(dask.delayed(_summary, pure=True)(tile) for tile in tiles))
    n = bounds[-1][1]
    row_sums, trace, nbytes = np.zeros(n), 0.0, 0
    for (i, j), (rows, cols, tile_trace, size) in zip(pairs, summaries, strict=True):
        row_sums[slice(*bounds[i])] += rows
        if i != j:
            row_sums[slice(*bounds[j])] += cols
        trace += tile_trace
        nbytes += size
    logger.info("cached %d kernel tiles (%s, %d MiB)", len(tiles), dtype, nbytes // 2**20)
    return KernelTiles(list(tiles), bounds, dtype, row_sums, trace, nbytes)


def symmetric_kernel_product(
    kernel: Kernel,
    X: da.Array,
    V: np.ndarray,
    *,
    block_bytes: int,
    dtype: np.dtype | str | None = None,
) -> np.ndarray:
    """Compute ``K(X, X) @ V`` (float64) from the upper tiles, evaluating each on the fly.

    Every task evaluates one tile (see :func:`evaluate_tile`: a float32 GEMM when ``dtype`` is
    float32 and the kernel is translation invariant), multiplies it by the matching blocks of
    ``V`` and drops it; partial products are summed per row block in a tree. Memory stays at
    a tile per thread plus ``V``'s size.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
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
    dtype = _storage_dtype(X, dtype)
    blocks, bounds = tile_blocks(X, balanced_tile_rows(X.shape[0], dtype.itemsize, block_bytes))
    tasks = _tasks(_streamed_pair)

    def pair_task(i: int, j: int, Vi, Vj):
        return tasks[Vj is None](kernel, blocks[i], blocks[j], Vi, Vj, dtype)

    return _symmetric_product(pair_task, len(blocks), bounds, V)


def cached_kernel_bytes(n: int, itemsize: int, block_bytes: int) -> int:
    """Memory of the upper tiles of an ``n × n`` kernel (diagonal tiles whole).

    Examples
    --------
    >>> round(cached_kernel_bytes(10_000, 8, 128 * 2**20) / 2**20)  # 763 MiB for all of K
    509
    """
    t = balanced_tile_rows(n, itemsize, block_bytes)
    sizes = [t] * (n // t) + ([n % t] if n % t else [])
    return (n * n + sum(s * s for s in sizes)) // 2 * itemsize  # sum over i <= j of s_i s_j


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
    client = _running_client()
    if client is not None:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        limits = [w.get("memory_limit") for w in workers]
        if workers and all(limits):
            return int(sum(
                max(0.0, WORKER_CACHE_SHARE * w["memory_limit"] - w["metrics"]["memory"])
                for w in workers
            ))
    return int(psutil.virtual_memory().available // 2)


def _running_client():
    distributed = sys.modules.get("distributed")  # no client can exist if never imported
    if distributed is None:
        return None
    try:
        client = distributed.default_client()
    except ValueError:
        return None
    return client if client.status == "running" else None
