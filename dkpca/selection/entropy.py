"""Shannon entropy of a kernel matrix's values (Widjaja et al. 2012), as a criterion for ``σ²``.

The off-diagonal entries ``exp(-r² / (2σ²))`` of the training kernel matrix lie in ``(0, 1]``;
their histogram over equal bins of ``[0, 1]`` has Shannon entropy ``H(σ²) = -Σ p_b log p_b``,
low when ``σ²`` is so small that every entry is near 0 or so large that every entry is near 1,
highest in between. The criterion picks the ``σ²`` of the grid with the highest ``H``; MDD then
picks the number of components at that ``σ²``, as in the MDD paper's comparison.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_BINS", "kernel_entropy"]

#: Bins of ``[0, 1]`` for the histogram of kernel values.
DEFAULT_BINS = 100


def kernel_entropy(
    sq_distances: np.ndarray, sigma2_grid: np.ndarray, n_bins: int = DEFAULT_BINS
) -> np.ndarray:
    """Shannon entropy (nats) of the off-diagonal kernel values, for every ``σ²`` of the grid.

    The kernel is monotone in the distance, so one sort of the distances serves the whole
    grid: the bin edges ``b / n_bins`` of the kernel values are squared distances
    ``-2σ² log(b / n_bins)``, counted by binary search.

    References
    ----------
    D. Widjaja, C. Varon, A. C. Dorado, J. A. K. Suykens and S. Van Huffel, "Application of
    kernel principal component analysis for single-lead-ECG-derived respiration", IEEE Trans.
    Biomedical Engineering 59(4), 1169–1176, 2012.

    Examples
    --------
    >>> from dkpca.selection._spectra import squared_distances
    >>> D = squared_distances(np.random.default_rng(0).normal(size=(200, 2)))
    >>> H = kernel_entropy(D, np.array([1e-3, 1.0, 1e3]))
    >>> int(np.argmax(H))
    1
    """
    n = sq_distances.shape[0]
    values = np.sort(sq_distances[np.triu_indices(n, 1)])
    # Kernel value >= edge  <=>  squared distance <= -2σ² log(edge); edges from 1 down to 0.
    edges = np.linspace(1.0, 0.0, n_bins + 1)[1:-1]
    entropy = np.empty(len(sigma2_grid))
    for row, sigma2 in enumerate(sigma2_grid):
        limits = -2.0 * float(sigma2) * np.log(edges)
        at_least = np.searchsorted(values, limits, side="right")
        counts = np.diff(np.concatenate([[0], at_least, [values.size]]))
        p = counts[counts > 0] / values.size
        entropy[row] = float(-(p * np.log(p)).sum())
    return entropy
