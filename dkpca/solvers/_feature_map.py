"""The Nyström feature map's ``K_LL^{-1/2}``: its cut-off, and the checks of indefinite kernels.

Split from :mod:`dkpca.solvers.nystrom` (which re-exports :func:`inverse_sqrt`,
:func:`feature_map_rcond` and :data:`RCOND`): the numerics of one ``m × m`` matrix, apart from
the passes over the data.
"""

from __future__ import annotations

import warnings

import numpy as np

from dkpca.kernels import Kernel
from dkpca.linalg import small_eigh_threads

from ._components import _outside_dkpca

__all__ = ["RCOND", "feature_map_rcond", "inverse_sqrt"]


#: Eigenvalues of K_LL below this fraction of the largest are treated as zero.
RCOND = 1e-10


def feature_map_rcond(dtype: np.dtype | type) -> float:
    """Return the :func:`inverse_sqrt` cut-off for strips ``k(x, L)`` in ``dtype``.

    ``R = K_LL^{-1/2}`` scales a direction of eigenvalue ``w`` by ``1 / sqrt(w)``, so the
    rounding of the strips' scatter (about the dtype's epsilon of its largest entries) comes
    back divided by ``w``. In float32, directions between 1e-10 and about 1e-7 of the largest
    eigenvalue turned that noise into spurious leading components (200 points in 3-D, every
    point a landmark: a first eigenvalue of 188 against 21.75). Ten times the dtype's epsilon
    keeps them out: 1.2e-6 for float32, :data:`RCOND` for float64.

    Examples
    --------
    >>> feature_map_rcond(np.float64) == RCOND, f"{feature_map_rcond(np.float32):.2g}"
    (True, '1.2e-06')
    """
    return max(RCOND, 10.0 * float(np.finfo(dtype).eps))


def inverse_sqrt(K: np.ndarray, rcond: float = RCOND) -> np.ndarray:
    """``K^{-1/2}`` of a symmetric PSD matrix on its numerical range, as ``(m, r)``.

    Directions with eigenvalues below ``rcond`` times the largest are dropped, so duplicate
    landmarks or a low-rank kernel give a thinner, well-conditioned feature map; so are, for
    an indefinite kernel, those below the magnitude of the most negative eigenvalue.
    That guard can drop real components too (a polynomial kernel with ``coef0 < 0``, whose
    few negative eigenvalues are large): :func:`nystrom_basis` warns when it leaves fewer
    directions than the components asked for.

    Examples
    --------
    >>> import numpy as np
    >>> R = inverse_sqrt(np.diag([4.0, 1.0, 0.0]))
    >>> R.shape, bool(np.allclose(R @ R.T, np.diag([0.25, 1.0, 0.0])))
    ((3, 2), True)
    """
    with small_eigh_threads(K.shape[0]):
        w, V = np.linalg.eigh(K)
    # An indefinite kernel (sigmoid) has negative eigenvalues; positive ones no larger than
    # the most negative are as much noise, and 1/sqrt(w) would blow them up into spurious
    # components.
    keep = w > max(w.max() * rcond, -w.min(), 0.0)
    return V[:, keep] / np.sqrt(w[keep])


def _warn_if_indefinite_cut(
    K_LL: np.ndarray, rank: int, count: int, rcond: float, kernel: Kernel, owner: str
) -> None:
    """Warn when :func:`inverse_sqrt` kept fewer directions than ``count`` for an indefinite kernel.

    Maintenance note: positive eigenvalues of ``K_LL`` below the magnitude of its most negative
    are dropped because, for sigmoid kernels and landmarks a subset of the data, their
    ``1 / sqrt(w)`` turns ``k(x, L)``'s unbounded components there into spurious leading
    components (the Schur-complement bound of a PSD kernel does not hold). With a large,
    low-rank negative part (polynomial kernels with ``coef0 < 0``) those eigenvalues are real
    components, and the fit has fewer than asked for: say so, rather than pad with zeros.
    """
    w = np.linalg.eigvalsh(K_LL)
    scale = float(np.abs(w).max()) if w.size else 0.0
    positive = int(np.count_nonzero(w > rcond * scale))
    if positive <= rank:  # only rounding or a rank-deficient K_LL made the cut
        return
    warnings.warn(
        f"{owner}: the landmarks' kernel matrix K(L, L) of {kernel!r} is not positive "
        f"semi-definite (most negative eigenvalue {w[0]:.3g}); its Nyström feature map keeps "
        f"the {rank} positive directions above that magnitude and drops {positive - rank} "
        f"smaller positive ones, fewer than n_components={count}. The missing components "
        f"are zero or dropped; use solver='exact', 'randomized' or Sketch(refine=True), "
        f"which handle indefinite kernels.",
        UserWarning,
        stacklevel=_outside_dkpca(),
    )


def _check_positive_part(K_LL: np.ndarray, kernel: Kernel, owner: str) -> None:
    """Raise ValueError when ``K_LL`` is empty for :func:`inverse_sqrt` by being indefinite.

    An empty feature map from a ``K_LL`` that is zero (all-zero data for the linear kernel)
    is the data's doing, and the estimator warns that they do not vary; one whose negative
    eigenvalues outweigh every positive one is the kernel's, which that warning would misname.
    """
    w = np.linalg.eigvalsh(K_LL)
    if w.size == 0 or w[0] >= -RCOND * max(abs(w[0]), abs(w[-1])):
        return
    raise ValueError(
        f"{owner}: the landmarks' kernel matrix K(L, L) of {kernel!r} has no positive part "
        f"(its largest eigenvalue, {w[-1]:.3g}, is not above the magnitude of its most "
        f"negative, {w[0]:.3g}): the kernel is not positive semi-definite on these landmarks, "
        f"and its Nyström feature map K(x, L) K(L, L)^(-1/2) is empty. Use solver='exact', "
        f"'randomized' or Sketch(refine=True), which handle indefinite kernels.")
