"""Kernel operations over dask chunks, never holding an n×n matrix unless asked to.

The kernel matrix is cut into square *tiles* of ``t × t`` entries, with ``t`` chosen so that a
tile holds about ``block_bytes`` (default 128 MiB). Three kinds of operation are built on tiles:

* :func:`kernel_matrix` — the lazy matrix ``K(X, Y)`` as a dask array;
* :func:`kernel_product` — the lazy product ``K(X, Y) @ V`` (used by ``transform``), reduced
  over ``Y``'s tiles with dask's tree reduction;
* for the training data, :func:`gather_kernel` (the upper triangle in one array, for LAPACK),
  which evaluates only the tiles on and above the diagonal (``K`` is symmetric), halving the
  kernel work. The iterative solver's products with the same tiles, cached on the workers or
  streamed, are in :mod:`dkpca.tiles`.

Centring never materialises ``H K H``; :func:`center_columns` and :func:`center_kernel_inplace`
apply it as rank-one corrections.

BLAS runs single-threaded inside tile tasks, so dask's threads supply the parallelism without
oversubscribing the cores; dense work outside tiles keeps all BLAS threads.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse

from . import _progress
from ._cluster_workers import cluster_workers
from ._device import array_module, configured_device, first_call_alone, to_device, to_host
from ._scattered import MODEL_VIEW, computed_with_blocks_scattered
from .io._views import view_blocks
from .kernels import Kernel
from .linalg import single_threaded_blas

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "center_columns",
    "center_kernel_inplace",
    "compute",
    "gather_kernel",
    "kernel_device",
    "kernel_diagonal",
    "kernel_matrix",
    "kernel_product",
    "persist",
    "scheduler_threads",
    "tile_blocks",
    "tile_rows",
    "tree_reduce",
    "tree_sum",
    "upper_pairs",
    "worker_block_bytes",
    "worker_memory_per_thread",
]

logger = logging.getLogger(__name__)

#: Default memory for one kernel tile.
DEFAULT_BLOCK_BYTES = 128 * 2**20


#: Share of a worker's memory per thread that one kernel tile may take.
TILE_SHARE = 1 / 6

#: Smallest tile budget, however small the workers: below it scheduling costs dominate.
MIN_BLOCK_BYTES = 2**20
#: Most bytes of one strip of kernel values that is read again right after it is made (the
#: ``exp``, a product, a sum): a few such strips fit the shared cache at once, and products on
#: a thousand rows already run at the GEMM rate.
STRIP_BYTES = 8 * 2**20


def tile_rows(itemsize: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
    """Rows (and columns) of a square kernel tile holding about ``block_bytes``.

    Examples
    --------
    >>> tile_rows(8)
    4096
    >>> tile_rows(4)
    5792
    """
    return max(16, math.isqrt(worker_block_bytes(block_bytes) // itemsize))


def compute(*args, **kwargs):
    """``dask.compute`` with single-threaded BLAS in the tiles (see :func:`single_threaded_blas`).

    Under a client, in-memory blocks go to the cluster beside the graph (``dkpca._scattered``).

    Examples
    --------
    >>> import dask.array as da
    >>> compute(da.ones(3).sum())
    (np.float64(3.0),)
    """
    with single_threaded_blas():
        return computed_with_blocks_scattered(args, _progress.compute, **kwargs)


def persist(*args):
    """``dask.persist`` with single-threaded BLAS in the tasks (see :func:`compute`).

    Under a ``distributed.Client`` the results stay on the workers (futures, waited for); under
    the local schedulers they are computed and held in this process.

    Examples
    --------
    >>> import dask
    >>> (total,) = persist(dask.delayed(sum)([1, 2]))
    >>> total.compute()
    3
    """
    with single_threaded_blas():
        results = dask.persist(*args)
        distributed = sys.modules.get("distributed")
        futures = distributed.futures_of(results) if distributed is not None else []
        if futures:  # workers in this process must finish under the same BLAS limit
            distributed.wait(futures)
        return results


def _rows_by_tile(X: da.Array, block_bytes: int) -> da.Array:
    return _rechunk_rows(X, tile_rows(X.dtype.itemsize, block_bytes))


def _rechunk_rows(X: da.Array, t: int) -> da.Array:
    if X.chunks[0] == (t,) * (X.shape[0] // t) + ((X.shape[0] % t,) if X.shape[0] % t else ()):
        return X
    return X.rechunk((t, -1))


def kernel_matrix(
    kernel: Kernel, X: da.Array, Y: da.Array | None = None, *, block_bytes: int = DEFAULT_BLOCK_BYTES
) -> da.Array:
    """Return the lazy kernel matrix ``K(X, Y)``, one task per tile.

    Examples
    --------
    >>> import dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = da.ones((6, 2), chunks=3)
    >>> kernel_matrix(RBF(gamma=1.0), X).sum().compute()
    np.float64(36.0)
    """
    X = _rows_by_tile(X.rechunk({1: -1}), block_bytes)
    Y = X if Y is None else _rows_by_tile(Y.rechunk({1: -1}), block_bytes)
    dtype = np.result_type(X.dtype, Y.dtype, np.float32)
    return da.blockwise(kernel.pairwise, "ij", X, "ik", Y, "jl", dtype=dtype, concatenate=True)


def _strip_product(
    kernel: Kernel, Xi: np.ndarray, Yj: np.ndarray, Vj: np.ndarray, block_bytes: int
) -> np.ndarray:
    """Return ``K(Xi, Yj) @ Vj`` in strips (each under ``block_bytes``) on the blocks' device."""
    itemsize = getattr(Xi.dtype, "itemsize", 8)  # a standard dtype has none: float64's then
    strip = max(1, min(block_bytes, STRIP_BYTES) // max(1, Yj.shape[0] * itemsize))
    out = array_module(Xi, Yj, Vj).empty(
        (Xi.shape[0], Vj.shape[1]), dtype=array_module(Xi).result_type(Xi.dtype, Vj.dtype))
    for start in range(0, Xi.shape[0], strip):
        stop = min(start + strip, Xi.shape[0])
        out[start:stop, :] = kernel.pairwise(Xi[start:stop, :], Yj) @ Vj
    return out


def _product_tile(
    kernel: Kernel, device: str, block_bytes: int, Xi: np.ndarray, Yj: np.ndarray, Vj: np.ndarray
) -> np.ndarray:
    """One task of :func:`kernel_product`: ``K(Xi, Yj) @ Vj`` on ``device``, as a 3-d piece.

    At module level, so that the lazy products fitted models keep can be pickled.
    """
    Xi, Yj, Vj = (to_device(A, device) for A in (Xi, Yj, Vj))
    with first_call_alone(("kernel product", repr(kernel), Xi.dtype.str), device):
        return to_host(_strip_product(kernel, Xi, Yj, Vj, block_bytes))[:, None, :]


def kernel_device(kernel: Kernel, *arrays: Any) -> str:
    """Return where ``kernel`` is evaluated on blocks of ``arrays``: ``"cpu"`` or ``"cuda"``.

    The ``dkpca.device`` setting's device, except for sparse data (a dask array is judged by
    its blocks) and kernels without GPU code (their scipy calls), which stay on the CPU.

    Examples
    --------
    >>> import dask, numpy as np, scipy.sparse
    >>> from dkpca.kernels import RBF, Laplacian
    >>> with dask.config.set({"dkpca.device": "cuda"}):
    ...     (kernel_device(RBF(), np.ones((2, 2))), kernel_device(Laplacian(), np.ones((2, 2))),
    ...      kernel_device(RBF(), scipy.sparse.eye(2, format="csr")))
    ('cuda', 'cpu', 'cpu')
    """
    if not kernel.runs_on_gpu or any(scipy.sparse.issparse(getattr(A, "_meta", A))
                                     for A in arrays):
        return "cpu"
    return configured_device()


def kernel_product(
    kernel: Kernel,
    X: da.Array,
    Y: da.Array | np.ndarray,
    V: np.ndarray,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> da.Array:
    """Return the lazy product ``K(X, Y) @ V``, chunked like ``X``'s rows.

    Each task evaluates one tile of ``K(X, Y)`` (in strips, whatever ``X``'s chunking) and
    multiplies it by the matching rows of ``V``; partial products are summed with dask's tree
    reduction. Nothing larger than a tile and an ``X`` chunk times ``V``'s width is in memory.
    With ``dkpca.device = "cuda"`` (see :mod:`dkpca._device`) each task copies its blocks to the
    GPU, multiplies there and returns its piece to the host; sparse blocks and kernels without
    GPU code stay on the CPU.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
    Y : dask or numpy array, (m, d)
    V : numpy array, (m, k)

    Returns
    -------
    dask array, (n, k), with ``X``'s row chunks and one column chunk.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import Linear
    >>> X = da.from_array(np.eye(3), chunks=2)
    >>> kernel_product(Linear(), X, np.eye(3), np.ones((3, 1))).compute().ravel()
    array([1., 1., 1.])
    """
    block_bytes = worker_block_bytes(block_bytes)
    X = X.rechunk({1: -1})
    if not isinstance(Y, da.Array):
        # the caller's array itself as one block (from_array would copy it whole), kept on a
        # cluster between computations as a model's
        Y = view_blocks(Y if scipy.sparse.issparse(Y) else np.asarray(Y), (-1, -1), MODEL_VIEW)
    Y = _rows_by_tile(Y.rechunk({1: -1}), block_bytes)
    Vd = view_blocks(np.asarray(V), (Y.chunks[0], -1), MODEL_VIEW)
    dtype = np.result_type(X.dtype, Y.dtype, V.dtype, np.float32)
    device = kernel_device(kernel, X, Y)
    tile = functools.partial(_product_tile, kernel, device, block_bytes)  # pickles
    # Y's "jl", not "jk": a precomputed kernel's training rows carry one column more
    pieces = da.blockwise(tile, "ija", X, "ik", Y, "jl", Vd, "ja", dtype=dtype,
                          concatenate=True, adjust_chunks={"j": 1})
    return pieces.sum(axis=1, dtype=dtype)


def kernel_diagonal(kernel: Kernel, X: da.Array) -> da.Array:
    """Return the lazy diagonal ``k(x_i, x_i)``, one task per row chunk.

    Examples
    --------
    >>> import dask.array as da
    >>> from dkpca.kernels import Linear
    >>> kernel_diagonal(Linear(), da.ones((4, 3), chunks=2)).compute()
    array([3., 3., 3., 3.])
    """
    return X.rechunk({1: -1}).map_blocks(
        kernel.diag, drop_axis=1, dtype=np.result_type(X.dtype, np.float32)
    )


def _tile_bounds(n: int, t: int) -> list[tuple[int, int]]:
    return [(s, min(s + t, n)) for s in range(0, n, t)]


def tile_blocks(X: da.Array, rows: int) -> tuple[list, list[tuple[int, int]]]:
    """Delayed row tiles of ``X``, ``rows`` rows each (the last may be shorter), and their bounds.

    Examples
    --------
    >>> import dask.array as da
    >>> tile_blocks(da.zeros((40, 2)), 16)[1]
    [(0, 16), (16, 32), (32, 40)]
    """
    X = _rechunk_rows(X.rechunk({1: -1}), rows)
    return list(X.to_delayed().ravel()), _tile_bounds(X.shape[0], rows)


def tree_reduce(parts: Sequence, combine: Callable, split_every: int = 8):
    """Combine delayed objects in a tree, ``combine(*group)`` for groups of ``split_every``.

    Few partial results are alive at once, and no single task receives them all.

    Examples
    --------
    >>> import dask
    >>> tree_reduce([dask.delayed(i) for i in range(10)], max).compute()
    9
    """
    parts = list(parts)
    step = dask.delayed(combine, pure=True)
    while len(parts) > 1:
        parts = [step(*parts[i : i + split_every]) for i in range(0, len(parts), split_every)]
    return parts[0]


def _add(*terms):
    return sum(terms[1:], terms[0])


def tree_sum(parts: Sequence, split_every: int = 8):
    """Sum delayed objects pairwise in a tree (see :func:`tree_reduce`).

    Examples
    --------
    >>> import dask
    >>> tree_sum([dask.delayed(i) for i in range(10)]).compute()
    45
    """
    return tree_reduce(parts, _add, split_every)


def _batches(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def worker_block_bytes(block_bytes: int) -> int:
    """Cap a kernel tile's size to what the active cluster's workers can hold.

    On a ``distributed`` cluster whose workers have memory limits, a tile gets at most
    :data:`TILE_SHARE` of the smallest worker's memory per thread: the tile, its temporaries
    and the input chunk it reads must fit beside the worker's own footprint, under the 80 %
    at which distributed pauses a worker. Elsewhere ``block_bytes`` is returned unchanged.

    Examples
    --------
    >>> worker_block_bytes(2**27)  # no cluster: unchanged
    134217728
    """
    budget = worker_memory_per_thread()
    if budget is None:
        return block_bytes
    return int(min(block_bytes, max(MIN_BLOCK_BYTES, TILE_SHARE * budget)))


def worker_memory_per_thread() -> int | None:
    """Smallest memory limit per thread among the active cluster's workers, if they have one.

    ``None`` without a running ``distributed`` client or without memory limits.

    Examples
    --------
    >>> worker_memory_per_thread() is None  # no cluster
    True
    """
    distributed = sys.modules.get("distributed")  # no client can exist if it was never imported
    if distributed is None:
        return None
    try:
        client = distributed.default_client()
    except ValueError:
        return None
    if client.status != "running":  # a client that failed to connect or was closed
        return None
    workers = cluster_workers(client)
    budgets = [w["memory_limit"] / max(1, w["nthreads"]) for w in workers.values()
               if w.get("memory_limit")]
    return int(min(budgets)) if budgets else None


def scheduler_threads() -> int:
    """Threads of the active dask scheduler (a distributed client's, else the local pool).

    Examples
    --------
    >>> scheduler_threads() >= 1
    True
    """
    distributed = sys.modules.get("distributed")  # no client can exist if it was never imported
    if distributed is not None:
        try:
            return max(1, sum(distributed.default_client().nthreads().values()))
        except ValueError:
            pass
    return dask.config.get("num_workers", None) or os.cpu_count() or 1


def upper_pairs(n_tiles: int) -> list[tuple[int, int]]:
    """Tile indices ``(i, j)`` on and above the diagonal, row by row.

    Examples
    --------
    >>> upper_pairs(2)
    [(0, 0), (0, 1), (1, 1)]
    """
    return [(i, j) for i in range(n_tiles) for j in range(i, n_tiles)]


def gather_kernel(
    kernel: Kernel, X: da.Array, *, block_bytes: int = DEFAULT_BLOCK_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """Gather the upper triangle of the training kernel ``K(X, X)`` into one array.

    Tiles on and above the diagonal are evaluated in batches of one per thread and written into
    the preallocated matrix while the next batch computes, so peak memory is ``K`` plus two
    tiles per thread, on any scheduler. LAPACK reads one triangle only, so the strictly lower
    triangle outside the diagonal tiles is left at zero.

    Returns
    -------
    K : (n, n) array
        Upper triangle (with whole diagonal tiles) of the kernel matrix, C order.
    row_sums : (n,) float64 array
        ``K @ 1``, accumulated from the tiles.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import Linear
    >>> X = np.random.default_rng(0).normal(size=(40, 2))
    >>> K, sums = gather_kernel(Linear(), da.from_array(X), block_bytes=16 * 16 * 8)
    >>> dense = X @ X.T
    >>> bool(np.allclose(np.triu(K), np.triu(dense))), K[39, 0], bool(np.allclose(sums, dense.sum(1)))
    (True, np.float64(0.0), True)
    """
    blocks, bounds = tile_blocks(X, tile_rows(X.dtype.itemsize, block_bytes))
    n = X.shape[0]
    K = np.zeros((n, n), dtype=np.result_type(X.dtype, np.float32))
    row_sums = np.zeros(n)
    pairwise = dask.delayed(kernel.pairwise, pure=True)
    batches = list(_batches(upper_pairs(len(blocks)), scheduler_threads()))

    def run(batch: Sequence[tuple[int, int]]) -> tuple:
        return compute(*(pairwise(blocks[i], blocks[j]) for i, j in batch))

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(run, batches[0])
        for index, batch in enumerate(batches):
            tiles = pending.result()
            if index + 1 < len(batches):
                pending = pool.submit(run, batches[index + 1])
            for (i, j), tile in zip(batch, tiles, strict=True):
                rows, cols = slice(*bounds[i]), slice(*bounds[j])
                K[rows, cols] = tile
                row_sums[rows] += tile.sum(axis=1, dtype=np.float64)
                if i != j:
                    row_sums[cols] += tile.sum(axis=0, dtype=np.float64)
    logger.debug("gathered a %d x %d kernel from %d batches", n, n, len(batches))
    return K, row_sums


def center_kernel_inplace(K: np.ndarray, row_means: np.ndarray, total_mean: float) -> None:
    """Turn the upper triangle of ``K`` into that of ``H K H`` (``H = I - 11ᵀ/n``), in place.

    Works strip by strip on the part of each row strip from its first diagonal entry on, so a
    matrix holding only its upper triangle (see :func:`gather_kernel`) is centred correctly; a
    full matrix gets its upper triangle centred (what :func:`dkpca.linalg.top_eigh` reads).

    Examples
    --------
    >>> import numpy as np
    >>> K = np.array([[2.0, 1.0], [1.0, 4.0]])
    >>> center_kernel_inplace(K, K.mean(axis=0), K.mean())
    >>> np.triu(K)
    array([[ 1., -1.],
           [ 0.,  1.]])
    """
    strip = max(1, (8 * 2**20) // max(1, K.shape[1] * K.itemsize))
    row_means = row_means.astype(K.dtype, copy=False)
    for start in range(0, K.shape[0], strip):
        stop = min(start + strip, K.shape[0])
        block = K[start:stop, start:]
        block -= row_means[start:]
        block -= row_means[start:stop, None]
        block += K.dtype.type(total_mean)


def center_columns(W: np.ndarray) -> np.ndarray:
    """Subtract each column's mean in place and return the means.

    Maintenance note: for ``Q`` with columns orthogonal to the ones vector, the centred product
    ``H K H Q`` equals ``H (K Q)``: centring the columns of ``K Q`` is all the centring needed.
    The removed means are ``rᵀ Q`` (``r`` the kernel's row means).

    Examples
    --------
    >>> import numpy as np
    >>> W = np.array([[1.0], [3.0]])
    >>> center_columns(W), W.ravel()
    (array([2.]), array([-1.,  1.]))
    """
    means = array_module(W).mean(W, axis=0)
    W -= means
    return means
