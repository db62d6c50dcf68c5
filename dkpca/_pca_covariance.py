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
from .blocked import compute, tree_sum
from .io import is_sparse
from .linalg import top_eigh
from .moments import RowStatistics, moments_in_memory, shifted_moments

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
    per row chunk with the shift taken inside the graph (one compute); sparse data is centred
    implicitly (:func:`~dkpca._pca_sparse.sparse_scatter`). The dense moments are taken
    around the first row, which keeps them accurate for data far from the origin.

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
        shift = X[0].astype(np.float64)
        moments = moments_in_memory(X, shift)
    else:  # one task per row chunk; the shift comes from inside the graph: one compute
        shift = X[:1].astype(np.float64).to_delayed().ravel()[0]
        parts = [dask.delayed(_chunk_moments)(b, shift) for b in X.to_delayed().ravel()]
        moments, shift = compute(tree_sum(parts), shift)
        shift = shift[0]
    check_finite_statistics(moments)
    return RowStatistics.from_moments(moments, shift, n)


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


def _chunk_moments(block: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """:func:`~dkpca.moments.shifted_moments` of a task's chunk around the ``(1, d)`` shift."""
    return shifted_moments(block, shift[0])
