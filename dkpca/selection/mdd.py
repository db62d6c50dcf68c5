"""MDD noise spectra: distance matrices drawn from the data's distance distribution (§IV).

One Monte Carlo draw (:func:`noise_spectra`) samples the ``n(n-1)/2`` off-diagonal distances of
an ``n × n`` noise distance matrix ``R̂`` from the Pearson distribution with the data's four
distance moments, truncated to ``[0, r_max]``, arranges them by the appendix's ordered fill
(:func:`ordered_fill`; :func:`make_metric` checks the triangle inequality in ``O(n²)`` and
repairs the rare violation) and returns the leading eigenvalues of the centred kernel matrix
``exp(-R̂² / (2σ²))`` for every ``σ²`` of the grid (eqs. 12–13), reusing ``R̂`` across the grid.
The noise spectrum ``τ`` is the per-index percentile of these eigenvalues over the draws.

The number of components (eq. 14) and the structural information (eq. 15) compare ``τ`` with
the data's spectrum ``λ``: see :func:`components_above_noise` and :func:`structural_information`.
"""

from __future__ import annotations

import logging

import numpy as np

from ._distances import DistanceMoments
from ._spectra import centred_rbf_eigenvalues
from .pearson import fit_pearson

__all__ = [
    "components_above_noise",
    "make_metric",
    "noise_distances",
    "noise_spectra",
    "ordered_fill",
    "structural_information",
    "triangle_deficit",
]

logger = logging.getLogger(__name__)


def ordered_fill(values: np.ndarray, n: int) -> np.ndarray:
    """Arrange ``n(n-1)/2`` distances in a symmetric ``n × n`` matrix by the appendix's rule.

    The values, sorted in descending order, fill the strictly lower triangle column by column
    (column 1 gets the ``n-1`` largest, top to bottom, then column 2, ...). Every column is then
    non-increasing downwards and holds values no larger than any earlier column's, so for
    rows ``i < j < k`` the entry ``R_ji`` is the largest of the triangle ``(i, j, k)``.

    Examples
    --------
    >>> ordered_fill(np.array([1.0, 3.0, 2.0]), 3)
    array([[0., 3., 2.],
           [3., 0., 1.],
           [2., 1., 0.]])
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size != n * (n - 1) // 2:
        raise ValueError(f"need n(n-1)/2 = {n * (n - 1) // 2} values, got {values.size}")
    R = np.zeros((n, n))
    upper = np.triu_indices(n, 1)  # row-major upper triangle = column-major lower triangle
    R[upper] = np.sort(values)[::-1]
    return R + R.T


def triangle_deficit(R: np.ndarray) -> float:
    """Return the largest triangle-inequality violation of an :func:`ordered_fill` matrix.

    For rows ``i < j < k`` only ``R_ji <= R_ki + R_kj`` can fail (``R_ji`` is the largest side),
    and both ``R_ki`` and ``R_kj`` shrink as ``k`` grows, so the last row ``k = n - 1`` is the
    tightest: the deficit is ``max(0, max_{i<j<n-1} R_ji - R_{n-1,i} - R_{n-1,j})``, and the
    matrix is a metric iff it is zero.

    Examples
    --------
    >>> triangle_deficit(ordered_fill(np.array([3.0, 2.0, 2.0]), 3))
    0.0
    >>> triangle_deficit(ordered_fill(np.array([10.0, 1.0, 1.0]), 3))
    8.0
    """
    n = R.shape[0]
    if n < 3:
        return 0.0
    last = R[n - 1, : n - 1]
    lower = np.tril_indices(n - 1, -1)
    excess = R[: n - 1, : n - 1][lower] - last[lower[0]] - last[lower[1]]
    return float(max(0.0, excess.max(initial=0.0)))


def make_metric(R: np.ndarray, maximum: float) -> tuple[np.ndarray, float]:
    """Repair an ordered fill's triangle inequality by a constant shift; return ``(R, shift)``.

    The gaps between the very smallest draws can exceed the draws themselves (few distances
    fall near zero), so the last columns of an ordered fill may break the triangle inequality
    by a little. Adding a constant ``c`` to every off-diagonal entry adds ``c`` to the slack of
    every triangle, so ``c`` = the deficit makes a metric; the matrix is then rescaled to keep
    its entries at most ``maximum`` (scaling keeps a metric a metric) and keeps its order. On
    the MDD paper's toy sets the shift is below 0.1 % of the mean distance.

    Examples
    --------
    >>> R, c = make_metric(ordered_fill(np.array([10.0, 1.0, 1.0]), 3), 10.0)
    >>> round(c, 6), triangle_deficit(R)
    (8.0, 0.0)
    """
    shift = triangle_deficit(R)
    if shift == 0.0:
        return R, 0.0
    shift *= 1 + 1e-9  # a hair more, so rounding cannot leave a violation behind
    R = R + shift
    np.fill_diagonal(R, 0.0)
    R *= maximum / (maximum + shift)
    return R, shift


def noise_distances(moments: DistanceMoments, n: int, rng: np.random.Generator) -> np.ndarray:
    """One noise distance matrix ``R̂`` (``n × n``), a metric with entries in ``[0, r_max]``.

    Examples
    --------
    >>> m = DistanceMoments(1.0, 0.3, 0.1, 2.9, 2.0, 1000)
    >>> R = noise_distances(m, 50, np.random.default_rng(0))
    >>> R.shape, bool(R.max() <= 2.0), triangle_deficit(R)
    ((50, 50), True, 0.0)
    """
    law = fit_pearson(moments.mean, moments.std, moments.skewness, moments.kurtosis)
    values = law.sample(n * (n - 1) // 2, rng, low=0.0, high=moments.maximum)
    R, shift = make_metric(ordered_fill(values, n), moments.maximum)
    if shift:
        logger.debug("noise draw: distances shifted by %.3g (%.2g of the mean) for the "
                     "triangle inequality", shift, shift / moments.mean)
    return R


def noise_spectra(
    seed: np.random.SeedSequence, moments: DistanceMoments, n: int, sigma2_grid: np.ndarray,
    n_eigenvalues: int, device: str = "cpu",
) -> np.ndarray:
    """One Monte Carlo draw: leading centred-kernel eigenvalues of a noise matrix, per ``σ²``.

    Returns a ``(len(sigma2_grid), n_eigenvalues)`` array (rows descending). The draw depends
    only on ``seed``, so a set of draws is the same on any scheduler. The distances are drawn
    on the host; the eigenproblems run on ``device`` (see :func:`centred_rbf_eigenvalues`).

    References
    ----------
    C. Varon, C. Alzate and J. A. K. Suykens, "Noise level estimation for model selection in
    kernel PCA denoising", IEEE Trans. Neural Networks and Learning Systems 26(11),
    2650–2663, 2015 (the "MDD paper").

    Examples
    --------
    >>> m = DistanceMoments(1.0, 0.3, 0.1, 2.9, 2.0, 1000)
    >>> noise_spectra(np.random.SeedSequence(0), m, 40, np.array([0.1, 1.0]), 3).shape
    (2, 3)
    """
    R = noise_distances(moments, n, np.random.default_rng(seed))
    R *= R
    return centred_rbf_eigenvalues(R, sigma2_grid, n_eigenvalues, device)


def components_above_noise(data: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Eq. (14): how many leading data eigenvalues exceed the noise's, per row.

    Read as the length of the leading run with ``λ_i > τ_i``: none when the first noise
    eigenvalue is at least the data's (the paper: components are kept only while the noise is
    not overestimated), and the spectra's tails, both near zero, cannot add components after
    the first crossing.

    Examples
    --------
    >>> data = np.array([[5.0, 3.0, 1.0, 0.5], [1.0, 0.9, 0.8, 0.7]])
    >>> noise = np.array([[2.0, 2.0, 2.0, 0.1], [2.0, 0.5, 0.5, 0.5]])
    >>> components_above_noise(data, noise)
    array([2, 0])
    """
    above = np.atleast_2d(data) > np.atleast_2d(noise)
    runs = np.where(above.all(axis=1), above.shape[1], np.argmin(above, axis=1))
    return runs.astype(int)


def structural_information(
    data: np.ndarray, noise: np.ndarray, n_components: np.ndarray | int
) -> np.ndarray:
    """Eq. (15): ``I_s = Σ_{i <= n_c} (λ_i - τ_i)`` per row (``n_c`` per row or fixed).

    References
    ----------
    C. Varon, C. Alzate and J. A. K. Suykens, "Noise level estimation for model selection in
    kernel PCA denoising", IEEE Trans. Neural Networks and Learning Systems 26(11),
    2650–2663, 2015 (the "MDD paper").

    Examples
    --------
    >>> data = np.array([[5.0, 3.0, 1.0], [1.0, 0.9, 0.8]])
    >>> noise = np.array([[2.0, 2.0, 2.0], [2.0, 0.5, 0.5]])
    >>> structural_information(data, noise, np.array([2, 0]))
    array([4., 0.])
    """
    gap = np.atleast_2d(data) - np.atleast_2d(noise)
    counts = np.broadcast_to(np.asarray(n_components), gap.shape[:1])
    keep = np.arange(gap.shape[1])[None, :] < counts[:, None]
    return np.where(keep, gap, 0.0).sum(axis=1)
