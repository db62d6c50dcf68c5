"""Concentric rings (the demo's data), and the MDD paper's toy sets.

The toy sets are semicircles, a square and two rings: Varon, Alzate & Suykens, section VI-A.
"""

from __future__ import annotations

import numpy as np

from dkpca._typing import RandomStateLike
from dkpca._validation import check_random_state

from ._noise import check_integer, check_real, check_snr, with_noise

__all__ = ["RING_RADIUS", "SEMICIRCLE_RADIUS", "SQUARE_SIDE", "make_rings", "make_semicircles",
           "make_square", "make_two_rings"]

SEMICIRCLE_RADIUS = 3.2
"""Radius of each semicircle in :func:`make_semicircles`."""

SQUARE_SIDE = 1.9
"""Side length of the square in :func:`make_square`."""

RING_RADIUS = 3.0
"""Radius of each ring in :func:`make_two_rings`."""


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
        At least ``n_rings``; split as evenly as possible between the rings.
    n_rings : int, default=3
        At least 1.
    noise : float, default=0.1
        Finite and non-negative.
    n_noise_dims : int, default=0
        Extra dimensions holding noise only; non-negative.
    random_state : int, Generator, RandomState or None

    Returns
    -------
    X : (n_samples, 2 + n_noise_dims) array
    labels : (n_samples,) int array, the ring of each point (0 = innermost)

    Raises
    ------
    ValueError
        If ``n_samples``, ``n_rings`` or ``n_noise_dims`` is not an integer (bools excluded)
        in its range, or ``noise`` is not a finite non-negative number.

    Examples
    --------
    >>> X, labels = make_rings(90, n_rings=3, random_state=0)
    >>> X.shape, np.bincount(labels).tolist()
    ((90, 2), [30, 30, 30])
    """
    n_rings = check_integer(n_rings, "n_rings", 1)
    n_samples = check_integer(n_samples, "n_samples", 1)
    if n_samples < n_rings:
        raise ValueError(f"n_samples={n_samples} is fewer than n_rings={n_rings}; pass "
                         f"n_samples >= n_rings (at least one point per ring)")
    noise = check_real(noise, "noise", low=0.0, high=np.inf, closed=True)
    n_noise_dims = check_integer(n_noise_dims, "n_noise_dims", 0)
    rng = np.random.default_rng(check_random_state(random_state))
    labels = np.arange(n_samples) % n_rings
    angles = rng.uniform(0, 2 * np.pi, n_samples)
    radius = labels + 1.0
    X = np.zeros((n_samples, 2 + n_noise_dims))
    X[:, 0], X[:, 1] = radius * np.cos(angles), radius * np.sin(angles)
    X += noise * rng.standard_normal(X.shape)
    return X, labels


def make_semicircles(
    n_samples: int = 500,
    *,
    snr: float | None = 10.0,
    random_state: RandomStateLike = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two interleaving semicircles in 2-D, the MDD paper's first toy example (N = 500, d = 2).

    The shape of scikit-learn's ``make_moons``, scaled by the radius ``r = 3.2``
    (:data:`SEMICIRCLE_RADIUS`): semicircle 0 is the upper half of the circle of radius ``r``
    centred at ``(0, 0)``, semicircle 1 the lower half of the circle of radius ``r`` centred at
    ``(r, r / 2)``. The angles are uniform on ``[0, pi]``, so the points are uniform in arc
    length. Noise comes from :func:`add_noise` (same generator).

    The radius was chosen so that the paper's rule of thumb, its eq. (20),
    ``sigma2 = 0.1 * d * mean_j Var[X_noisy_j]``, matches the value the paper reports for this
    data set, 1.13: at SNR 10 it is about ``0.11 * 0.994 * r**2 = 1.12`` in expectation.

    Parameters
    ----------
    n_samples : int, default=500
        At least 2; split as evenly as possible between the semicircles.
    snr : float, np.inf or None, default=10.0
        Signal-to-noise ratio, see :func:`add_noise`; ``None`` or ``np.inf`` for no noise.
    random_state : int, Generator, RandomState or None

    Returns
    -------
    X_noisy : (n_samples, 2) float64 array
    X_clean : (n_samples, 2) float64 array, the points on the semicircles
    labels : (n_samples,) int array, the semicircle of each point (0 = upper, 1 = lower)

    Examples
    --------
    >>> X, X_clean, labels = make_semicircles(random_state=0)
    >>> X.shape, X_clean.shape, np.bincount(labels).tolist()
    ((500, 2), (500, 2), [250, 250])
    >>> centres = np.array([[0.0, 0.0], [3.2, 1.6]])[labels]
    >>> bool(np.allclose(np.linalg.norm(X_clean - centres, axis=1), 3.2))
    True
    """
    n_samples = check_integer(n_samples, "n_samples", 2)
    snr = check_snr(snr)
    rng = np.random.default_rng(check_random_state(random_state))
    r = SEMICIRCLE_RADIUS
    labels = np.arange(n_samples) % 2
    angles = rng.uniform(0, np.pi, n_samples)
    upper = labels == 0
    X_clean = np.empty((n_samples, 2))
    X_clean[:, 0] = np.where(upper, r * np.cos(angles), r - r * np.cos(angles))
    X_clean[:, 1] = np.where(upper, r * np.sin(angles), r / 2 - r * np.sin(angles))
    return with_noise(X_clean, snr, rng), X_clean, labels


def make_square(
    n_samples: int = 2000,
    *,
    snr: float | None = 10.0,
    random_state: RandomStateLike = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points on the outline of a square in 2-D, the MDD paper's second toy example (N = 2000).

    The square is centred at the origin with side ``s = 1.9`` (:data:`SQUARE_SIDE`). Its four
    sides get an equal share of the points (label ``k`` for side ``k``, counter-clockwise from
    the bottom: 0 = bottom, 1 = right, 2 = top, 3 = left), each placed uniformly along its side,
    so the points are uniform in arc length along the outline. Noise comes from
    :func:`add_noise` (same generator).

    The side was chosen so that the paper's rule of thumb, its eq. (20),
    ``sigma2 = 0.1 * d * mean_j Var[X_noisy_j]``, matches the value the paper reports for this
    data set, 0.13: at SNR 10 it is about ``0.11 * s**2 / 3 = 0.132`` in expectation.

    Parameters
    ----------
    n_samples : int, default=2000
        At least 4; split as evenly as possible between the sides.
    snr : float, np.inf or None, default=10.0
        Signal-to-noise ratio, see :func:`add_noise`; ``None`` or ``np.inf`` for no noise.
    random_state : int, Generator, RandomState or None

    Returns
    -------
    X_noisy : (n_samples, 2) float64 array
    X_clean : (n_samples, 2) float64 array, the points on the outline
    labels : (n_samples,) int array, the side of each point (0 .. 3)

    Examples
    --------
    >>> X, X_clean, labels = make_square(random_state=0)
    >>> X.shape, np.bincount(labels).tolist()
    ((2000, 2), [500, 500, 500, 500])
    >>> bool(np.allclose(np.abs(X_clean).max(axis=1), 0.95))
    True
    """
    n_samples = check_integer(n_samples, "n_samples", 4)
    snr = check_snr(snr)
    rng = np.random.default_rng(check_random_state(random_state))
    half = SQUARE_SIDE / 2
    labels = np.arange(n_samples) % 4
    along = rng.uniform(-half, half, n_samples)
    side_x = np.array([0.0, half, 0.0, -half])  # fixed x of sides 1, 3
    side_y = np.array([-half, 0.0, half, 0.0])  # fixed y of sides 0, 2
    horizontal = labels % 2 == 0
    X_clean = np.empty((n_samples, 2))
    X_clean[:, 0] = np.where(horizontal, along, side_x[labels])
    X_clean[:, 1] = np.where(horizontal, side_y[labels], along)
    return with_noise(X_clean, snr, rng), X_clean, labels


def make_two_rings(
    n_samples: int = 3000,
    *,
    snr: float | None = 10.0,
    random_state: RandomStateLike = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two interlocked rings in 3-D, the MDD paper's third toy example (N = 3000, d = 3).

    Like two links of a chain, both of radius ``R = 3`` (:data:`RING_RADIUS`): ring 0 lies in
    the xy-plane centred at the origin, ring 1 in the xz-plane centred at ``(R, 0, 0)``, so
    each ring passes through the centre of the other. The angles are uniform on
    ``[0, 2 pi)``, so the points are uniform in arc length. Noise comes from
    :func:`add_noise` (same generator).

    The radius was chosen so that the paper's rule of thumb, its eq. (20),
    ``sigma2 = 0.1 * d * mean_j Var[X_noisy_j]``, matches the value the paper reports for this
    data set, 1.25: at SNR 10 it is about ``0.11 * 1.25 * R**2 = 1.24`` in expectation.

    Parameters
    ----------
    n_samples : int, default=3000
        At least 2; split as evenly as possible between the rings.
    snr : float, np.inf or None, default=10.0
        Signal-to-noise ratio, see :func:`add_noise`; ``None`` or ``np.inf`` for no noise.
    random_state : int, Generator, RandomState or None

    Returns
    -------
    X_noisy : (n_samples, 3) float64 array
    X_clean : (n_samples, 3) float64 array, the points on the rings
    labels : (n_samples,) int array, the ring of each point (0 = xy-plane, 1 = xz-plane)

    Examples
    --------
    >>> X, X_clean, labels = make_two_rings(random_state=0)
    >>> X.shape, np.bincount(labels).tolist()
    ((3000, 3), [1500, 1500])
    >>> bool(np.all(X_clean[labels == 0, 2] == 0) and np.all(X_clean[labels == 1, 1] == 0))
    True
    """
    n_samples = check_integer(n_samples, "n_samples", 2)
    snr = check_snr(snr)
    rng = np.random.default_rng(check_random_state(random_state))
    R = RING_RADIUS
    labels = np.arange(n_samples) % 2
    angles = rng.uniform(0, 2 * np.pi, n_samples)
    first = labels == 0
    cos, sin = R * np.cos(angles), R * np.sin(angles)
    X_clean = np.zeros((n_samples, 3))
    X_clean[:, 0] = np.where(first, cos, R + cos)
    X_clean[:, 1] = np.where(first, sin, 0.0)
    X_clean[:, 2] = np.where(first, 0.0, sin)
    return with_noise(X_clean, snr, rng), X_clean, labels
