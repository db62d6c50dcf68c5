"""The covariance solver of :class:`dkpca.PCA`: one pass of row statistics, then their spectrum.

:func:`row_statistics` reads the rows once (in place by one thread per core, one task per row
chunk for dask data, implicitly centred for sparse data) into a count, a mean and a scatter
matrix; :func:`covariance_spectrum` takes the leading eigenpairs of the scatter. The
statistics are kept, so :meth:`PCA.partial_fit` adds batches to them.
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np

from ._pca_sparse import sparse_scatter
from .blocked import compute, tree_reduce
from .io import is_sparse
from .linalg import top_eigh
from .moments import RowStatistics, centred_statistics

__all__ = [
    "NonFiniteStatisticsError",
    "check_finite_statistics",
    "covariance_spectrum",
    "row_statistics",
]


class NonFiniteStatisticsError(ValueError):
    """NaN or infinity reached a PCA solver's accumulated statistics.

    :class:`dkpca.PCA` skips the per-block check of its input (the statistics show it at no
    cost) and, on this error, reads the data once more to name the first row at fault.
    """


def row_statistics(X: Any) -> RowStatistics:
    """Return the count, mean and scatter of ``X``'s rows, in one pass (covariance solver).

    A numpy array is read in place by one thread per core, a dask array (or Zarr) by one task
    per row chunk, the chunks' statistics merged in a tree (one compute); sparse data is
    centred implicitly (:func:`~dkpca._pca_sparse.sparse_scatter`). Dense rows are centred
    strip by strip on their own rows and the strips merged exactly
    (:func:`~dkpca.moments.centred_statistics`), which keeps the statistics accurate for data
    far from the origin, whatever the order of the rows.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(40, 3)) + 1e6
    >>> statistics = row_statistics(X)
    >>> bool(np.allclose(statistics.scatter / 39, np.cov(X.T)))
    True
    """
    n = X.shape[0]
    if is_sparse(X):
        mean, scatter = sparse_scatter(X)
        check_finite_statistics(mean, scatter)
        return RowStatistics(n, mean, scatter)
    if isinstance(X, np.ndarray):  # in memory: one thread per core, no task graph
        statistics = centred_statistics(X)
    else:  # one task per row chunk, merged in a tree: one compute
        X = X.rechunk({1: -1})  # whole rows
        parts = [dask.delayed(_chunk_statistics)(b) for b in X.to_delayed().ravel()]
        (statistics,) = compute(tree_reduce(parts, _merge_statistics))
    check_finite_statistics(statistics.mean, statistics.scatter)
    return statistics


def covariance_spectrum(
    statistics: RowStatistics, k: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Return the mean, the leading eigenpairs of the scatter matrix, and the total variance.

    The statistics' scatter is copied (the eigensolver overwrites its input), so they can
    be kept for :meth:`PCA.partial_fit`.
    """
    scatter = statistics.scatter
    total = float(np.trace(scatter)) / (statistics.count - 1)
    eigenvalues, vectors = top_eigh(scatter.copy(), k, overwrite=True)
    return statistics.mean, eigenvalues, vectors, total


def check_finite_statistics(*statistics: np.ndarray) -> None:
    """Raise :class:`NonFiniteStatisticsError` if non-finite values reached the statistics."""
    if not all(np.isfinite(s).all() for s in statistics):
        raise NonFiniteStatisticsError(
            "PCA: X contains NaN or infinity; remove or impute those values.")


def _chunk_statistics(block: np.ndarray) -> RowStatistics:
    """:func:`~dkpca.moments.centred_statistics` of a task's chunk (one thread: the task's)."""
    return centred_statistics(np.asarray(block), threads=1)


def _merge_statistics(*parts: RowStatistics) -> RowStatistics:
    """Merge chunks' statistics exactly (:meth:`RowStatistics.merge`); empty chunks add nothing."""
    kept = [part for part in parts if part.count] or [parts[0]]
    merged = kept[0]
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: the fit reports it
        for part in kept[1:]:
            merged = merged.merge(part)
    return merged
