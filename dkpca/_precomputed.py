"""``kernel="precomputed"``: the training kernel matrix given in place of the data.

Every solver works on kernel *tiles* ``k(X[rows_i], X[rows_j])``. A precomputed kernel fits
that mould when each training sample carries its own row index: sample ``i`` is the row
``[i, K[i, 0], ..., K[i, n-1]]``, and the tile of rows ``I`` against rows ``J`` is
``K[I][:, J]``, read from the first block's columns at the second block's indices. New data
are rows of ``K(new, train)`` (``n`` columns, no index), read the same way. So exact,
randomized, sketch, Nyström (uniform, diagonal, column-norm sampling) and ICF fits, and
``transform``, run unchanged, out of core for a dask kernel matrix; only what needs an input
space (k-means landmarks, fixed-size entropy, pre-images) is refused.

A tile task reads whole rows of ``K`` (``t × n`` values for a ``t × t`` tile), so for large
``n`` keep ``block_size`` small.
"""

from __future__ import annotations

import numbers

import dask.array as da
import numpy as np

from .io import is_lazy, is_sparse
from .kernels import Kernel, register_kernel

__all__ = ["PrecomputedKernel", "indexed_kernel_rows"]


@register_kernel
class PrecomputedKernel(Kernel):
    """The kernel of a model fitted on a precomputed ``n_train × n_train`` kernel matrix.

    Its "samples" are indexed kernel rows (see the module docstring): ``pairwise(A, B)``
    takes ``B``'s training indices as columns of ``A``'s kernel values.

    Parameters
    ----------
    n_train : int
        Training samples (the kernel matrix's order).

    Examples
    --------
    >>> import numpy as np
    >>> K = np.array([[2.0, 1.0], [1.0, 3.0]])
    >>> rows = indexed_kernel_rows(K, "Demo")
    >>> kernel = PrecomputedKernel(2)
    >>> kernel.pairwise(rows[1:], rows).tolist(), kernel.diag(rows).tolist()
    ([[1.0, 3.0]], [2.0, 3.0])
    """

    name = "precomputed"
    _params = ("n_train",)

    def __init__(self, n_train: int) -> None:
        if isinstance(n_train, bool) or not isinstance(n_train, numbers.Integral) or n_train < 1:
            raise ValueError(f"PrecomputedKernel: n_train must be a positive int, got {n_train!r}")
        self.n_train = int(n_train)

    def _values(self, A: np.ndarray) -> np.ndarray:
        if A.shape[1] == self.n_train + 1:  # training rows: index, then kernel values
            return A[:, 1:]
        if A.shape[1] == self.n_train:  # new rows of K(new, train)
            return A
        raise ValueError(
            f"a precomputed kernel block needs {self.n_train} columns (kernel values against "
            f"the training samples), got {A.shape[1]}"
        )

    def _indices(self, B: np.ndarray) -> np.ndarray:
        if B.shape[1] != self.n_train + 1:
            raise ValueError("the second block of a precomputed kernel must be training rows")
        return np.rint(B[:, 0]).astype(np.intp)

    def pairwise(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:
        X = np.asarray(X)
        Y = X if Y is None else np.asarray(Y)
        values = self._values(X)[:, self._indices(Y)]
        return values.astype(np.result_type(values.dtype, np.float32), copy=False)

    def diag(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X)
        return X[np.arange(X.shape[0]), 1 + self._indices(X)]


def indexed_kernel_rows(K: np.ndarray | da.Array, owner: str) -> np.ndarray | da.Array:
    """Validate a training kernel matrix and prefix every row with its index.

    In-memory matrices are checked for symmetry (the solvers read only tiles on and above the
    diagonal); a dask matrix is trusted, as checking it would cost a pass.

    Examples
    --------
    >>> indexed_kernel_rows(np.eye(2), "Demo").tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
    """
    if is_sparse(K):
        raise ValueError(f"{owner}: a precomputed kernel must be dense, not a sparse matrix.")
    n, m = K.shape
    if n != m:
        raise ValueError(
            f"{owner}: kernel='precomputed' needs the square training kernel matrix "
            f"(n_samples x n_samples) at fit, got shape {K.shape}."
        )
    if not is_lazy(K):
        scale = float(np.abs(K).max()) if K.size else 0.0
        if not np.allclose(K, K.T, rtol=1e-7, atol=1e-10 * scale):
            raise ValueError(
                f"{owner}: the precomputed kernel matrix is not symmetric; pass (K + K.T) / 2. "
                f"Only the tiles on and above the diagonal are read."
            )
        return np.hstack([np.arange(n, dtype=K.dtype)[:, None], K])
    index = da.arange(n, dtype=K.dtype, chunks=(K.chunks[0],))[:, None]
    return da.concatenate([index, K.rechunk({1: -1})], axis=1)
