"""Synthetic data sets from the source papers."""

from __future__ import annotations

import numpy as np

from ._typing import RandomStateLike
from ._validation import check_random_state

__all__ = ["add_noise", "make_rings", "make_semicircles", "make_square", "make_two_rings"]


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


# --- The toy examples of the MDD paper (Varon, Alzate & Suykens, section VI-A) -------------------

SEMICIRCLE_RADIUS = 3.2
"""Radius of each semicircle in :func:`make_semicircles`."""

SQUARE_SIDE = 1.9
"""Side length of the square in :func:`make_square`."""

RING_RADIUS = 3.0
"""Radius of each ring in :func:`make_two_rings`."""


def _check_snr(snr: float | None) -> float | None:
    """Return ``snr`` as a float, or ``None`` for "no noise" (``None`` or ``inf``)."""
    if snr is None:
        return None
    message = f"snr must be a positive number, np.inf or None, got {snr!r}"
    try:
        value = float(snr)
    except (TypeError, ValueError):
        raise ValueError(message) from None
    if isinstance(snr, bool | np.bool_) or np.isnan(value) or value <= 0:
        raise ValueError(message)
    return None if np.isinf(value) else value


def _check_n_samples(n_samples: int, minimum: int) -> int:
    """Check that ``n_samples`` is an integer of at least ``minimum``."""
    if (
        isinstance(n_samples, bool | np.bool_)
        or not isinstance(n_samples, int | np.integer)
        or n_samples < minimum
    ):
        raise ValueError(f"n_samples must be an integer >= {minimum}, got {n_samples!r}")
    return int(n_samples)


def _add_noise(X_clean: np.ndarray, snr: float | None, rng: np.random.Generator) -> np.ndarray:
    """Add isotropic Gaussian noise at ``snr`` (already checked) with the generator ``rng``."""
    X = np.array(X_clean, dtype=np.float64, copy=True)
    if snr is None:
        return X
    noise_var = X.var(axis=0).sum() / (X.shape[1] * snr)
    X += np.sqrt(noise_var) * rng.standard_normal(X.shape)
    return X


def add_noise(
    X_clean: np.ndarray,
    snr: float | None = 10.0,
    *,
    random_state: RandomStateLike = None,
) -> np.ndarray:
    r"""Add isotropic Gaussian noise at a given signal-to-noise ratio.

    The MDD paper adds noise "with SNR = 10" without defining the ratio; here it is the ratio
    of total variances,

    .. math:: \mathrm{SNR} = \frac{\sum_j \mathrm{Var}[X_{\mathrm{clean}, j}]}
                                  {\sum_j \mathrm{Var}[\varepsilon_j]},

    with the (population, ``ddof=0``) variances of the clean data taken per feature. The noise
    is isotropic, ``eps ~ N(0, s2 I)``, so each feature gets variance
    ``s2 = sum_j Var[X_clean_j] / (d * snr)``. The noise added to a finite sample has this
    variance only in expectation.

    Parameters
    ----------
    X_clean : (n_samples, n_features) array-like
        Not modified.
    snr : float, np.inf or None, default=10.0
        Positive. ``None`` or ``np.inf`` add no noise (a float copy of ``X_clean`` is returned).
    random_state : int, Generator, RandomState or None

    Returns
    -------
    X_noisy : (n_samples, n_features) float64 array

    Raises
    ------
    ValueError
        If ``X_clean`` is not a non-empty 2-D array of finite numbers, or ``snr <= 0``.

    Examples
    --------
    >>> X = np.random.default_rng(0).standard_normal((20000, 3))
    >>> X_noisy = add_noise(X, snr=4.0, random_state=0)
    >>> X_noisy.shape
    (20000, 3)
    >>> ratio = X.var(axis=0).sum() / (X_noisy - X).var(axis=0).sum()
    >>> bool(abs(ratio - 4.0) < 0.2)
    True
    >>> bool(np.array_equal(add_noise(X, snr=None), X))
    True
    """
    snr = _check_snr(snr)
    X = np.asarray(X_clean)
    if X.ndim != 2 or X.size == 0:
        raise ValueError(f"X_clean must be a non-empty 2-D array, got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number) or not np.all(np.isfinite(X)):
        raise ValueError("X_clean must hold finite numbers only")
    return _add_noise(X, snr, np.random.default_rng(check_random_state(random_state)))


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
    n_samples = _check_n_samples(n_samples, 2)
    snr = _check_snr(snr)
    rng = np.random.default_rng(check_random_state(random_state))
    r = SEMICIRCLE_RADIUS
    labels = np.arange(n_samples) % 2
    angles = rng.uniform(0, np.pi, n_samples)
    upper = labels == 0
    X_clean = np.empty((n_samples, 2))
    X_clean[:, 0] = np.where(upper, r * np.cos(angles), r - r * np.cos(angles))
    X_clean[:, 1] = np.where(upper, r * np.sin(angles), r / 2 - r * np.sin(angles))
    return _add_noise(X_clean, snr, rng), X_clean, labels


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
    n_samples = _check_n_samples(n_samples, 4)
    snr = _check_snr(snr)
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
    return _add_noise(X_clean, snr, rng), X_clean, labels


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
    n_samples = _check_n_samples(n_samples, 2)
    snr = _check_snr(snr)
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
    return _add_noise(X_clean, snr, rng), X_clean, labels
