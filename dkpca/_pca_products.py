"""Products of one dense or sparse block, centred by the column means, with a block of vectors.

The work inside every task of the randomized linear PCA (:mod:`dkpca._pca_randomized`):
``(X_ij - 1 μ_jᵀ) V_j`` and its transpose. A dense block is centred one cache-sized slab of
rows at a time (so a product reads the block from memory once) and multiplied in float64, or
in float32 for float32 data at ``tol >= 1e-6`` (:func:`product_dtype`); a sparse block is
centred implicitly. Results are float64 either way.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse

from ._device import aligned_operand
from .linalg import FLOAT32_MIN_TOL, single_threaded_blas

__all__ = ["SLAB_BYTES", "centred_rtimes", "centred_slabs", "centred_times", "product_dtype",
           "slab_rows"]

#: Bytes of one slab of a dense block (a few fit the processor's cache at once).
SLAB_BYTES = 2**20


def slab_rows(width: int, itemsize: int = 8) -> int:
    """Rows of a slab of ``width`` columns that stays in the processor's cache."""
    return max(8, SLAB_BYTES // (itemsize * max(width, 1)))


def centred_slabs(block: np.ndarray, mean: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield ``(rows, X_rows - μ)`` in ``μ``'s dtype, slab by slab, in one reused buffer.

    Converting and centring a whole block costs two trips through memory for each product;
    a slab is converted, centred and multiplied while it is still in the cache.
    """
    step = slab_rows(block.shape[1], mean.dtype.itemsize)
    buffer = np.empty((min(step, len(block)), block.shape[1]), dtype=mean.dtype)
    for start in range(0, len(block), step):
        rows = slice(start, min(start + step, len(block)))
        slab = buffer[: rows.stop - start]
        np.subtract(block[rows], mean, out=slab)
        yield rows, slab


def product_dtype(X_dtype: np.dtype, tol: float) -> np.dtype:
    """Precision of the products with dense blocks: float32 for float32 data when ``tol`` allows.

    As for the kernel's float32 tiles (:mod:`dkpca._tile_values`): a float32 block, centred
    by the float32 mean, times a float32 block of vectors is a float32 GEMM, about half the
    time of float64 and without a conversion; the mean's rounding comes back as a float64
    rank-one term and the blocks' products are summed in float64, so the products are
    accurate to about 1e-7 of the first eigenvalue. Sparse blocks always multiply in float64.

    Examples
    --------
    >>> product_dtype(np.dtype("float32"), 1e-6), product_dtype(np.dtype("float32"), 1e-9)
    (dtype('float32'), dtype('float64'))
    """
    return np.dtype(np.float32 if X_dtype == np.float32 and tol >= FLOAT32_MIN_TOL else np.float64)


def centred_times(block: object, V: np.ndarray, mean: np.ndarray,
                  dtype: np.dtype | type = np.float64) -> np.ndarray:
    """``(X_ij - 1 μ_jᵀ) V_j`` in float64, from GEMMs in ``dtype`` (see :func:`product_dtype`)."""
    if scipy.sparse.issparse(block):
        V = V.astype(np.float64, copy=False)
        product = np.asarray(block @ V, dtype=np.float64)  # a new array: centred in place
        product -= mean @ V
        return product
    block, V, mean = np.asarray(block), aligned_operand(V, dtype), aligned_operand(mean)
    shift = mean.astype(dtype)
    out = np.empty((len(block), V.shape[1]))
    # float32: each slab's product is cast into ``out`` from a buffer reused for all slabs
    part = None if dtype == np.float64 else np.empty(
        (slab_rows(block.shape[1], 4), V.shape[1]), dtype=dtype)
    with single_threaded_blas():  # a task among others: the scheduler's threads are the cores
        for rows, slab in centred_slabs(block, shift):
            if part is None:
                np.matmul(slab, V, out=out[rows])
            else:
                out[rows] = np.matmul(slab, V, out=part[: len(slab)])
    if part is not None:  # the float32 mean's rounding, μ - μ₃₂, exactly: a rank-one term
        out -= (mean - shift) @ V
    return out


def centred_rtimes(block: object, U: np.ndarray, mean: np.ndarray,
                   dtype: np.dtype | type = np.float64) -> np.ndarray:
    """``(X_ij - 1 μ_jᵀ)ᵀ U_i`` in float64, from GEMMs in ``dtype`` (see :func:`product_dtype`)."""
    if scipy.sparse.issparse(block):
        U = U.astype(np.float64, copy=False)
        return np.asarray(block.T @ U, dtype=np.float64) - np.outer(mean, U.sum(axis=0))
    block, mean = np.asarray(block), aligned_operand(mean)
    shift = mean.astype(dtype)
    U_cast = aligned_operand(U, dtype)
    out = np.zeros((block.shape[1], U.shape[1]))
    # One product buffer for all slabs: a new one each time costs page faults where large
    # allocations are not reused (Dask's workers set MALLOC_TRIM_THRESHOLD_).
    part = np.empty(out.shape, dtype=dtype)
    with single_threaded_blas():
        for rows, slab in centred_slabs(block, shift):
            out += np.matmul(slab.T, U_cast[rows], out=part)
    if dtype != np.float64:  # the float32 mean's rounding, as in centred_times
        out -= np.outer(mean - shift, U.sum(axis=0, dtype=np.float64))
    return out
