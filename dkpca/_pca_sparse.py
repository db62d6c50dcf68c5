"""Sparse input for :class:`dkpca.PCA`: the covariance solver's one pass, and projections.

A sparse matrix is never centred (that would make it dense): the scatter matrix is
``Σ X_iᵀ X_i - n μ μᵀ`` from the blocks' sparse cross-products, and a projection is
``X W - 1 (μᵀ W)``. Both work on ``scipy.sparse`` matrices and arrays and on dask arrays of
sparse blocks, one task per row block.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import scipy.sparse

from .blocked import compute, tree_sum

__all__ = ["sparse_projection", "sparse_scatter"]


def _block_scatter(block: object) -> np.ndarray:
    """Column sums stacked on ``Bᵀ B`` of one sparse block, dense float64 (``(d + 1) × d``)."""
    B = scipy.sparse.csr_matrix(block, dtype=np.float64)
    out = np.empty((B.shape[1] + 1, B.shape[1]))
    out[0] = np.asarray(B.sum(axis=0)).ravel()
    out[1:] = (B.T @ B).toarray()
    return out


def sparse_scatter(X: object) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scatter matrix ``X_cᵀ X_c`` of sparse data, in one pass.

    Parameters
    ----------
    X : scipy.sparse matrix or array, or dask array of sparse blocks, (n, d)

    Returns
    -------
    mean : (d,) float64 array
    scatter : (d, d) float64 array

    Notes
    -----
    Memory ``O(d²)`` per task and on the client; work ``O(Σ_rows nnz(row)²)``. The
    subtraction of ``n μ μᵀ`` loses about ``log10(μ² / σ²)`` digits where a column's mean is
    large against its spread (scikit-learn's sparse ``covariance_eigh`` does the same).

    Examples
    --------
    >>> import numpy as np, scipy.sparse
    >>> X = scipy.sparse.random(50, 4, density=0.3, random_state=0, format="csr")
    >>> mean, scatter = sparse_scatter(X)
    >>> dense = X.toarray() - X.toarray().mean(axis=0)
    >>> bool(np.allclose(scatter, dense.T @ dense))
    True
    """
    n = X.shape[0]
    if isinstance(X, da.Array):
        parts = [dask.delayed(_block_scatter)(b) for b in X.rechunk({1: -1}).to_delayed().ravel()]
        (moments,) = compute(tree_sum(parts))
    else:
        moments = _block_scatter(X)
    mean = moments[0] / n
    scatter = moments[1:]
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: fit reports it
        scatter -= n * np.outer(mean, mean)
    return mean, scatter


def _project_block(block: object, components: np.ndarray, offset: np.ndarray) -> np.ndarray:
    return np.asarray(block @ components.T) - offset


def sparse_projection(X: object, components: np.ndarray, mean: np.ndarray) -> np.ndarray | da.Array:
    """``(X - 1 μᵀ) Wᵀ`` for sparse ``X``, without densifying it.

    Lazy (dask) for a dask array of sparse blocks, numpy otherwise; in the components' dtype.

    Examples
    --------
    >>> import numpy as np, scipy.sparse
    >>> X = scipy.sparse.random(5, 3, density=0.5, random_state=0, format="csr")
    >>> W, mu = np.eye(3)[:2], np.ones(3)
    >>> bool(np.allclose(sparse_projection(X, W, mu), (X.toarray() - mu) @ W.T))
    True
    """
    offset = mean @ components.T
    if isinstance(X, da.Array):
        X = X.rechunk({1: -1})
        return X.map_blocks(_project_block, components, offset,
                            chunks=(X.chunks[0], (len(components),)), dtype=components.dtype,
                            meta=np.empty((0, 0), dtype=components.dtype))
    return _project_block(X, components, offset).astype(components.dtype, copy=False)
