"""Rules of thumb for the RBF width, used to centre the search grids.

- :func:`rule_of_thumb_sigma2`: the MDD paper's eq. (20), ``σ̂² = 0.1 · d · mean_j Var[x_j]``
  (LS-SVMlab's tutorial rule; the 0.1 was chosen experimentally).
- :func:`distance_percentile_sigma2`: the LOO paper's scale, the 5th percentile of the mutual
  distances. Its values (``c ≈ 120`` on 256-pixel USPS digits in ``[-1, 1]``, for the kernel
  ``exp(-||x - y||² / c)``) are those of *squared* distances, so ``c`` is read as a percentile of
  the squared distances and returned as ``σ² = c / 2``.
"""

from __future__ import annotations

import numpy as np

from dkpca._typing import ArrayLike, RandomStateLike
from dkpca._validation import check_random_state
from dkpca.blocked import compute
from dkpca.io import as_dask

from ._spectra import squared_distances

__all__ = ["default_sigma2_grid", "distance_percentile_sigma2", "rule_of_thumb_sigma2"]

#: The default grid spans this factor below and above the rule of thumb.
GRID_DECADES = 1.0

#: Points of the default grid.
GRID_POINTS = 20


def rule_of_thumb_sigma2(X: ArrayLike) -> float:
    """Eq. (20) of the MDD paper: ``0.1 · d · mean_j Var[x_j]`` (variances with ``ddof=1``).

    One pass over lazy data.

    Examples
    --------
    >>> X = np.random.default_rng(0).normal(scale=2.0, size=(5000, 3))
    >>> round(rule_of_thumb_sigma2(X), 1)
    1.2
    """
    Xd = as_dask(X)
    (variances,) = compute(Xd.astype(np.float64).var(axis=0, ddof=1))
    return 0.1 * float(np.sum(variances))


def default_sigma2_grid(
    rule_of_thumb: float, n_points: int = GRID_POINTS, decades: float = GRID_DECADES
) -> np.ndarray:
    """Log-spaced ``σ²`` from ``decades`` below to ``decades`` above the rule of thumb.

    The MDD paper calls its rule an upper bound, yet its own selections land between 0.7 and
    2 times it, and on low-dimensional data nothing rises above the noise at or below it; so
    the grid reaches as far above as below.

    Examples
    --------
    >>> default_sigma2_grid(1.0, 3)
    array([ 0.1,  1. , 10. ])
    """
    return rule_of_thumb * np.logspace(-decades, decades, n_points)


def distance_percentile_sigma2(
    X: ArrayLike, percentile: float = 5.0, *, max_samples: int = 2000,
    random_state: RandomStateLike = None,
) -> float:
    """Return the LOO paper's scale: ``c`` = a percentile of squared distances, ``σ² = c/2``.

    Parameters
    ----------
    X : array-like, dask array, DataArray or Zarr path
    percentile : float, default=5.0
    max_samples : int, default=2000
        Larger data are subsampled (uniformly, without replacement) to this many rows, which
        keeps the pairwise distances in memory.
    random_state : int, Generator or None
        For the subsample.

    Examples
    --------
    >>> X = np.random.default_rng(0).normal(size=(300, 4))
    >>> c = 2 * distance_percentile_sigma2(X)
    >>> bool(1.2 < c < 1.6)  # squared distances of N(0, I_4) points are 2·χ²_4: 5 % at 1.42
    True
    """
    if not 0 < percentile < 100:
        raise ValueError(f"percentile must be in (0, 100), got {percentile}")
    Xd = as_dask(X)
    n = Xd.shape[0]
    if n < 2:
        raise ValueError("distance_percentile_sigma2 needs at least 2 samples")
    if n > max_samples:
        rng = np.random.default_rng(check_random_state(random_state))
        rows = np.sort(rng.choice(n, max_samples, replace=False))
        Xd = Xd[rows]
    (sample,) = compute(Xd)
    D2 = squared_distances(sample)
    return float(np.percentile(D2[np.triu_indices(len(D2), 1)], percentile)) / 2.0
