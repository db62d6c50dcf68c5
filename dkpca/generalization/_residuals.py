"""Each point's part orthogonal to the affine hull of the others: approximate leave-one-out.

:func:`orthogonal_residuals` gives, for all ``N`` points at once from one eigendecomposition of
the centred Gram matrix, what a refit without the point cannot see of it
(:mod:`dkpca.generalization.loo`, ``method="approximate"``).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg

from dkpca.solvers._components import _outside_dkpca

__all__ = ["orthogonal_residuals"]


#: Eigenvalues of the centred Gram matrix under this fraction of its trace are rounding: they
#: are raised to it before inverting (:func:`orthogonal_residuals`).
GRAM_FLOOR_RATIO = 1e-12

#: A row whose squared distance to the others' affine hull is at most this fraction of the
#: Gram trace lies in that hull, within rounding: its distance is zero. A row in the hull gets
#: about ``GRAM_FLOOR_RATIO · trace / p`` from the floor, ``p`` its weight in the null space
#: (1/2 for a duplicate pair, at least ``1/N`` when ``N > D + 1``).
IN_HULL_RATIO = 1e-8


def orthogonal_residuals(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's component orthogonal to the affine hull of the other rows, and its square.

    Returns ``(R, d2)`` with ``R[n] = x_n⊥``, the part of ``x_n`` that no affine combination
    of the other rows reaches, and ``d2[n] = ||x_n⊥||²``, the squared distance of ``x_n`` to
    their affine hull. All ``N`` come from one eigendecomposition of the centred Gram matrix
    ``G = X_c X_cᵀ``: ``d2[n] = 1 / (G⁺)_nn`` and ``R[n] = (G⁺ X_c)_n / (G⁺)_nn``.

    A row in the affine hull of the others (a duplicate, or any row when ``N > D + 1``) gets
    ``d2 = 0`` and ``R = 0``, with a ``UserWarning`` naming it; every other row keeps its
    distance. All rows equal: all zero.

    Notes
    -----
    The LOO paper splits a left-out point relative to "the subspace spanned by the training
    data", a linear span, on data centred at the origin. Both of its uses are about centred
    models: PCA's refit eigenvectors span the others' *centred* points, and an RBF kernel sees
    only differences ``x_m - x_n``, so the part of ``x_n`` that a refit cannot see is its
    distance to the others' affine hull. That distance is used here, a deviation from the
    paper's wording: unlike the distance to the linear span it does not change when the data
    are translated, and it is computed from centred data, so it stays accurate far from the
    origin, where the uncentred Gram matrix ``X Xᵀ`` is too ill-conditioned to invert. For
    data centred at the origin the two differ little (by a few per cent for ``N ≪ D``).

    Maintenance note: with ``v = e_n - w`` (``w`` on the other rows, summing to one),
    ``d2[n] = min vᵀ G v`` over ``v_n = 1``, ``1ᵀv = 0``; on ``1⊥`` that is ``1 / (G⁺)_nn``
    when ``e_n`` is orthogonal to ``G``'s null space within ``1⊥``, zero otherwise. ``G⁺`` is
    formed from ``eigh(G + (tr G / N) 11ᵀ)``, which moves the exact null vector ``1`` out of
    the way, with eigenvalues raised to :data:`GRAM_FLOOR_RATIO` ``· tr G`` (rounding), so a
    row in the others' hull gets a distance of order that floor, and
    :data:`IN_HULL_RATIO` tells it apart. Cost: ``O(N² D + N³)``, memory ``O(N² + N D)``.

    Examples
    --------
    >>> X = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 1.0]])  # row 2: the others span a line
    >>> R, d2 = orthogonal_residuals(X)
    >>> R.round(6).tolist(), d2.round(6).tolist()
    ([[-1.0, -1.0], [1.0, -1.0], [0.0, 1.0]], [2.0, 2.0, 1.0])
    >>> orthogonal_residuals(X + 1e6)[1].round(6).tolist()  # translation changes nothing
    [2.0, 2.0, 1.0]
    """
    X = np.asarray(X, dtype=np.float64)
    N = len(X)
    centred = X - X.mean(axis=0)
    gram = centred @ centred.T
    scale = float(np.trace(gram))
    if N < 2 or not scale > 0:
        if N >= 2:
            _warn_in_hull(np.arange(N), N, "all rows are equal", "the data have no spread")
        return np.zeros_like(X), np.zeros(N)
    values, vectors = scipy.linalg.eigh(gram + scale / N)
    floor = max(GRAM_FLOOR_RATIO, N * np.finfo(np.float64).eps) * scale
    pinv = (vectors / np.maximum(values, floor)) @ vectors.T
    pinv -= 1.0 / (scale * N)  # the constant direction's share: G⁺ lives on 1⊥
    diagonal = np.diag(pinv).copy()
    d2 = 1.0 / diagonal
    residuals = (pinv @ centred) / diagonal[:, None]
    in_hull = np.flatnonzero(~(d2 > IN_HULL_RATIO * scale))
    if in_hull.size:
        d2[in_hull] = 0.0
        residuals[in_hull] = 0.0
        if in_hull.size == N and N > X.shape[1] + 1:
            _warn_in_hull(in_hull, N, f"N = {N} rows > D + 1 = {X.shape[1] + 1}",
                          "with more rows than features + 1 the approximation has nothing "
                          "to correct; use method='exact'")
        else:
            _warn_in_hull(in_hull, N, "duplicate or affinely dependent rows",
                          "drop duplicate rows, or use method='exact'")
    return residuals, d2


def _warn_in_hull(rows: np.ndarray, N: int, why: str, fix: str) -> None:
    """Warn that ``rows`` lie in the affine hull of the others: no orthogonal part."""
    listed = ", ".join(map(str, rows[:10].tolist())) + (", ..." if rows.size > 10 else "")
    warnings.warn(
        f"leave-one-out: {rows.size} of the {N} rows ([{listed}]) lie in the affine hull of "
        f"the other rows ({why}), so they have no orthogonal part and the approximate "
        f"leave-one-out projection leaves them at their full-sample projection; {fix}",
        UserWarning, stacklevel=_outside_dkpca(),
    )
