"""Kernels of L1 and chi² distances, evaluated on bounded row chunks."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import cdist

from ._base import (
    Block,
    ExponentialKernel,
    Kernel,
    _as_blocks,
    _check_non_negative,
    _check_positive,
    _resolve_gamma,
    _result_dtype,
    _row_chunks,
    _rows_within,
    _with_gamma,
    register_kernel,
)


def _l1_distances(X: Block, Y: Block) -> np.ndarray:
    """Return the L1 (cityblock) distances between the rows of two validated blocks.

    Dense blocks go to ``cdist`` whole: it needs no temporary beyond the output (and float64
    copies of float32 operands). A sparse block is densified in row chunks under the budget.
    """
    dtype = _result_dtype(X, Y)
    if not (sp.issparse(X) or sp.issparse(Y)):
        return cdist(X, Y, "cityblock").astype(dtype, copy=False)
    K = np.empty((X.shape[0], Y.shape[0]), dtype=dtype)
    rows = _rows_within(8 * X.shape[1])  # cdist works on float64 copies of the chunks
    for j, Yc in _row_chunks(Y, rows):
        for i, Xc in _row_chunks(X, rows):
            K[i : i + Xc.shape[0], j : j + Yc.shape[0]] = cdist(Xc, Yc, "cityblock")
    return K


def _chi2_distances(X: Block, Y: Block) -> np.ndarray:
    """Return ``D[i, j] = Σ_k (x_ik - y_jk)² / (x_ik + y_jk)`` for non-negative blocks.

    Row chunks of ``X`` and ``Y`` are broadcast into ``(a, b, d)`` temporaries of at most
    ``_TEMP_BYTES`` together; sparse chunks are densified inside the loop.

    Maintenance note: a term with ``x_k + y_k == 0`` is 0 (scikit-learn's convention). With
    non-negative data that means ``x_k = y_k = 0``, so the squared difference is already 0
    and the masked division simply leaves it there. NaN input gives a NaN sum (``NaN != 0``),
    which the solvers' finite check reports.
    """
    n, d = X.shape
    m = Y.shape[0]
    dtype = _result_dtype(X, Y)
    K = np.empty((n, m), dtype=dtype)
    per_pair = d * (2 * np.dtype(dtype).itemsize + 1)  # sum, squared difference, mask
    y_rows = min(max(m, 1), _rows_within(per_pair))
    x_rows = _rows_within(per_pair * y_rows)
    for j, Yc in _row_chunks(Y, y_rows):
        for i, Xc in _row_chunks(X, x_rows):
            total = Xc[:, None, :] + Yc[None, :, :]
            terms = Xc[:, None, :] - Yc[None, :, :]
            np.square(terms, out=terms)
            np.divide(terms, total, out=terms, where=total != 0)
            K[i : i + Xc.shape[0], j : j + Yc.shape[0]] = terms.sum(axis=2)
    return K


def _checked_chi2_blocks(X: Block, Y: Block | None, owner: str, kernel: str) -> tuple[Block, Block]:
    """:func:`_as_blocks`, then the non-negativity check of the chi² kernels."""
    same = Y is None
    X, Y = _as_blocks(X, Y)
    _check_non_negative(X, owner, kernel, "X")
    if not same:
        _check_non_negative(Y, owner, kernel, "Y")
    return X, Y


@register_kernel
class Laplacian(ExponentialKernel):
    """Laplacian kernel ``exp(-gamma ||x - y||_1)``, with the L1 (cityblock) distance.

    Parameters
    ----------
    gamma : float, optional
        Inverse length scale. ``None`` resolves to ``1 / n_features`` at fit time.

    Notes
    -----
    There is no GEMM form of the L1 distance: a block costs ``O(n m d)`` scalar operations,
    several times an :class:`RBF` block of the same size. Dense blocks use
    ``scipy.spatial.distance.cdist(metric="cityblock")`` in float64 (float32 results are
    rounded back), with no temporary beyond the output. Sparse blocks are densified in row
    chunks of at most ~32 MiB.

    Examples
    --------
    >>> import numpy as np
    >>> Laplacian(gamma=0.5).pairwise(np.zeros((1, 2)), np.ones((1, 2))).round(4)
    array([[0.3679]])
    >>> Laplacian().with_defaults(4)
    Laplacian(gamma=0.25)
    """

    name = "laplacian"
    _params = ("gamma",)

    positive_semidefinite = True
    translation_invariant = True

    def __init__(self, gamma: float | None = None) -> None:
        _check_positive("gamma", gamma, "Laplacian")
        self.gamma = None if gamma is None else float(gamma)

    def with_defaults(self, n_features: int) -> Laplacian:
        return _with_gamma(self, n_features)

    def _exponent(self, X: Block, Y: Block | None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        K = _l1_distances(X, Y)
        K *= -_resolve_gamma(self.gamma, X.shape[1])
        return K


@register_kernel
class Chi2(ExponentialKernel):
    """Exponentiated chi-squared kernel ``exp(-gamma Σ_k (x_k - y_k)² / (x_k + y_k))``.

    For histograms and other non-negative features (bag of words, colour histograms); terms
    with ``x_k + y_k = 0`` count as 0.

    Parameters
    ----------
    gamma : float, default=1.0
        Scale of the exponent. ``None`` also means 1.0 (scikit-learn's default; unlike the
        other kernels, *not* ``1 / n_features``).

    Raises
    ------
    ValueError
        From :meth:`pairwise` and :meth:`diag` when a block has negative values.

    Notes
    -----
    A block costs ``O(n m d)`` operations (no GEMM form) on row chunks broadcast into
    temporaries of at most ~32 MiB; sparse chunks are densified inside the loop.

    Examples
    --------
    >>> import numpy as np
    >>> Chi2(gamma=0.5).pairwise(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])).round(4)
    array([[0.3679]])
    """

    name = "chi2"
    _params = ("gamma",)

    positive_semidefinite = True

    def __init__(self, gamma: float | None = 1.0) -> None:
        _check_positive("gamma", gamma, "Chi2")
        self.gamma = 1.0 if gamma is None else float(gamma)

    def _exponent(self, X: Block, Y: Block | None) -> np.ndarray:
        X, Y = _checked_chi2_blocks(X, Y, "Chi2", "chi2")
        K = _chi2_distances(X, Y)
        K *= -self.gamma
        return K

    def _diag_blocks(self, X: Block) -> Block:
        return _checked_chi2_blocks(X, None, "Chi2", "chi2")[0]


@register_kernel
class AdditiveChi2(Kernel):
    """Additive chi-squared kernel ``-Σ_k (x_k - y_k)² / (x_k + y_k)`` on non-negative data.

    Only *conditionally* positive semi-definite (``positive_semidefinite`` is False): the
    centred kernel matrix is PSD, the raw one is not, and its diagonal is 0. Terms with
    ``x_k + y_k = 0`` count as 0. :class:`Chi2` is ``exp(gamma * AdditiveChi2)``.

    Raises
    ------
    ValueError
        From :meth:`pairwise` and :meth:`diag` when a block has negative values.

    Notes
    -----
    Same cost and memory as :class:`Chi2`.

    Examples
    --------
    >>> import numpy as np
    >>> AdditiveChi2().pairwise(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]))
    array([[-2.]])
    """

    name = "additive_chi2"

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        X, Y = _checked_chi2_blocks(X, Y, "AdditiveChi2", "additive chi2")
        K = _chi2_distances(X, Y)
        return np.negative(K, out=K)

    def diag(self, X: Block) -> np.ndarray:
        X, _ = _checked_chi2_blocks(X, None, "AdditiveChi2", "additive chi2")
        return np.zeros(X.shape[0], dtype=X.dtype)
