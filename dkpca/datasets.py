"""Synthetic data sets from the source papers."""

from __future__ import annotations

import numpy as np

from ._typing import RandomStateLike
from ._validation import check_random_state

__all__ = ["make_rings"]


def make_rings(
    n_samples: int = 600,
    *,
    n_rings: int = 3,
    noise: float = 0.1,
    n_noise_dims: int = 0,
    random_state: RandomStateLike = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Concentric rings in the plane, optionally embedded among noise dimensions.

    Ring ``r`` (``r = 1 .. n_rings``) has radius ``r``; points get isotropic Gaussian noise of
    standard deviation ``noise`` in every dimension. Linear PCA cannot separate the rings; the
    leading RBF kernel principal components do.

    Parameters
    ----------
    n_samples : int, default=600
        Split as evenly as possible between the rings.
    n_rings : int, default=3
    noise : float, default=0.1
    n_noise_dims : int, default=0
        Extra dimensions holding noise only.
    random_state : int, Generator, RandomState or None

    Returns
    -------
    X : (n_samples, 2 + n_noise_dims) array
    labels : (n_samples,) int array, the ring of each point (0 = innermost)

    Examples
    --------
    >>> X, labels = make_rings(90, n_rings=3, random_state=0)
    >>> X.shape, np.bincount(labels).tolist()
    ((90, 2), [30, 30, 30])
    """
    if n_samples < n_rings or n_rings < 1:
        raise ValueError(f"need n_samples >= n_rings >= 1, got {n_samples} and {n_rings}")
    if noise < 0 or n_noise_dims < 0:
        raise ValueError("noise and n_noise_dims must be non-negative")
    rng = np.random.default_rng(check_random_state(random_state))
    labels = np.arange(n_samples) % n_rings
    angles = rng.uniform(0, 2 * np.pi, n_samples)
    radius = labels + 1.0
    X = np.zeros((n_samples, 2 + n_noise_dims))
    X[:, 0], X[:, 1] = radius * np.cos(angles), radius * np.sin(angles)
    X += noise * rng.standard_normal(X.shape)
    return X, labels
