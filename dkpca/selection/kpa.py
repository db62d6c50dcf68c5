"""Kernel parallel analysis (Jørgensen & Hansen 2012): noise spectra from permuted data.

Each draw permutes every feature of the training set independently, which keeps the marginal
distributions and destroys the dependence between features, then takes the leading eigenvalues
of the centred RBF kernel matrix of the permuted points for every ``σ²`` of the grid. As in
MDD, the noise spectrum is the per-index percentile over the draws, and the components and
``σ²`` follow from eqs. (14)–(15) (their "energy"). In few dimensions a permutation keeps much
of the data's structure, so the noise is overestimated (the MDD paper's §III and Table I).
"""

from __future__ import annotations

import numpy as np

from ._spectra import centred_rbf_eigenvalues, squared_distances

__all__ = ["permutation_spectra", "permute_features"]


def permute_features(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Return a copy of ``X`` with every column shuffled by its own permutation.

    Examples
    --------
    >>> X = np.arange(8.0).reshape(4, 2)
    >>> P = permute_features(X, np.random.default_rng(0))
    >>> sorted(P[:, 0]) == sorted(X[:, 0]), sorted(P[:, 1]) == sorted(X[:, 1])
    (True, True)
    """
    return rng.permuted(X, axis=0)


def permutation_spectra(
    seed: np.random.SeedSequence, X: np.ndarray, sigma2_grid: np.ndarray,
    n_eigenvalues: int, device: str = "cpu",
) -> np.ndarray:
    """One draw of kernel parallel analysis: ``(len(sigma2_grid), n_eigenvalues)`` eigenvalues.

    The eigenproblems run on ``device`` (see :func:`centred_rbf_eigenvalues`).

    References
    ----------
    K. W. Jørgensen and L. K. Hansen, "Model selection for Gaussian kernel PCA denoising",
    IEEE Trans. Neural Networks and Learning Systems 23(1), 163–168, 2012.

    J. L. Horn, "A rationale and test for the number of factors in factor analysis",
    Psychometrika 30(2), 179–185, 1965.

    Examples
    --------
    >>> X = np.random.default_rng(0).normal(size=(30, 3))
    >>> permutation_spectra(np.random.SeedSequence(0), X, np.array([1.0, 2.0]), 4).shape
    (2, 4)
    """
    permuted = permute_features(X, np.random.default_rng(seed))
    return centred_rbf_eigenvalues(squared_distances(permuted), sigma2_grid, n_eigenvalues,
                                   device)
