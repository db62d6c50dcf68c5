"""Synthetic data sets from the source papers."""

from __future__ import annotations

import numpy as np

from ._typing import RandomStateLike
from ._validation import check_random_state

__all__ = [
    "add_noise",
    "make_rings",
    "make_semicircles",
    "make_signal_in_noise",
    "make_square",
    "make_two_rings",
    "make_unbalanced_semicircles",
]


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


# --- The simulations of the LOO paper (Abrahamsen & Hansen, sections 2 and 4.1) ------------------

UNBALANCED_CLUSTER_NOISE = 0.1
"""In-plane noise standard deviation of cluster ``t = 1`` in :func:`make_unbalanced_semicircles`."""


def _check_integer(value: int, name: str, minimum: int) -> int:
    """Check that ``value`` is an integer (not a bool) of at least ``minimum``."""
    if (
        isinstance(value, bool | np.bool_)
        or not isinstance(value, int | np.integer)
        or value < minimum
    ):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_real(value: float, name: str, *, low: float, high: float, closed: bool) -> float:
    """Check that ``value`` is a finite real in ``[low, high]`` (``closed``) or ``(low, high)``."""
    inside = "[{}, {}]" if closed else "({}, {})"
    message = f"{name} must be a finite number in {inside.format(low, high)}, got {value!r}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(message) from None
    ok = low <= number <= high if closed else low < number < high
    if isinstance(value, bool | np.bool_) or not np.isfinite(number) or not ok:
        raise ValueError(message)
    return number


def _random_frame(n_features: int, n_directions: int, rng: np.random.Generator) -> np.ndarray:
    """``n_directions`` orthonormal, uniformly random directions, as the rows of an array.

    QR of a standard Gaussian ``(n_features, n_directions)`` matrix with the signs fixed so that
    ``R`` has a positive diagonal, which makes the frame uniform (Haar) on the Stiefel manifold.
    """
    Q, R = np.linalg.qr(rng.standard_normal((n_features, n_directions)))
    signs = np.sign(np.diag(R))
    signs[signs == 0] = 1.0
    return (Q * signs).T


def make_signal_in_noise(
    n_samples: int = 50,
    n_features: int = 2000,
    *,
    strengths: tuple[float, ...] = (1.4, 1.2, 1.0, 0.8),
    noise: float = 0.2,
    random_state: RandomStateLike = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Independent normal signals along random directions in i.i.d. normal noise.

    The simulation of the LOO paper's Figs. 3 and 4 (its Fig. 2 is the one-signal case
    ``strengths=(1.0,)``, ``n_features=1000``):

    .. math:: \mathbf{x} = \sum_{k=1}^{K} \eta_k \mathbf{u}_k + \boldsymbol{\epsilon},
              \qquad \eta_k \sim N(0, s_k^2), \qquad
              \boldsymbol{\epsilon} \sim N(0, \sigma^2 \mathbf{1}),

    with ``K = len(strengths)`` independent signals and ``sigma = noise``. The paper gives the
    "strengths" ``(1.4, 1.2, 1.0, 0.8)`` without saying whether they are standard deviations or
    variances; here they are standard deviations, ``s_k = strengths[k]``, like ``sigma`` (its
    Fig. 2 calls ``eta ~ N(0, 1)`` a signal "of unit strength"). So the variance of ``x`` along
    ``u_k`` is ``s_k**2 + sigma**2`` and along any direction orthogonal to all ``u_k`` it is
    ``sigma**2``. The directions ``u_k`` are orthonormal and uniformly random: the Q factor of
    the QR decomposition of a standard Gaussian ``(n_features, K)`` matrix (signs fixed so that
    ``R`` has a positive diagonal). The data are not centred; their population mean is zero.

    Parameters
    ----------
    n_samples : int, default=50
        At least 1 (the paper's ``N``).
    n_features : int, default=2000
        At least ``len(strengths)`` (the paper's ``D``).
    strengths : sequence of float, default=(1.4, 1.2, 1.0, 0.8)
        Non-empty; the standard deviations ``s_k >= 0`` of the signals.
    noise : float, default=0.2
        The noise standard deviation ``sigma >= 0``.
    random_state : int, Generator, RandomState or None
        One generator draws the directions, then the signals, then the noise.

    Returns
    -------
    X : (n_samples, n_features) float64 array
    directions : (len(strengths), n_features) float64 array
        The orthonormal signal directions ``u_k`` as rows, in the order of ``strengths``.

    Raises
    ------
    ValueError
        If ``n_samples < 1``, ``n_features < len(strengths)``, ``strengths`` is not a non-empty
        1-D sequence of finite non-negative numbers, or ``noise`` is negative or not finite.

    Examples
    --------
    >>> X, U = make_signal_in_noise(random_state=0)
    >>> X.shape, U.shape
    ((50, 2000), (4, 2000))
    >>> bool(np.allclose(U @ U.T, np.eye(4)))
    True
    >>> X, U = make_signal_in_noise(20000, 30, strengths=(2.0,), noise=0.5, random_state=0)
    >>> bool(abs((X @ U[0]).var() - (2.0**2 + 0.5**2)) < 0.1)
    True
    """
    n_samples = _check_integer(n_samples, "n_samples", 1)
    try:
        s = np.asarray(strengths, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"strengths must be a sequence of numbers, got {strengths!r}") from None
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(
            f"strengths must be a non-empty 1-D sequence of finite numbers >= 0, got {strengths!r}"
        )
    n_features = _check_integer(n_features, "n_features", s.size)
    noise = _check_real(noise, "noise", low=0.0, high=np.inf, closed=True)
    rng = np.random.default_rng(check_random_state(random_state))
    directions = _random_frame(n_features, s.size, rng)
    eta = s * rng.standard_normal((n_samples, s.size))
    X = eta @ directions
    X += noise * rng.standard_normal(X.shape)
    return X, directions


def make_unbalanced_semicircles(
    n_samples: int = 500,
    n_features: int = 1000,
    *,
    snr: float | None = 10.0,
    p0: float = 0.6,
    random_state: RandomStateLike = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Two unbalanced interleaving semicircles in a random plane of a noisy high-D space.

    The simulation of the LOO paper's section 4.1 (Figs. 6 to 8: ``N = 500``, ``D = 1000`` or
    2000, SNR 10 or 60, ``p(t = 0) = 0.6``). The paper describes it only in words; this is
    the reading used here, step by step.

    1. Labels: each point is drawn independently from the mixture, ``t = 0`` with probability
       ``p0`` and ``t = 1`` otherwise, so the class counts are binomial, not fixed
       (``p0`` is a probability in the paper, and training and test sets drawn by separate
       calls then come from the same distribution).
    2. Clusters in the plane: the shape of :func:`make_semicircles` (scikit-learn's
       ``make_moons``) with radius 1: cluster 0 is the upper half of the unit circle centred at
       ``(0, 0)``, cluster 1 the lower half of the unit circle centred at ``(1, 1/2)``, angles
       uniform on ``[0, pi]``. The pair is then shifted by ``-(1/2, 1/4)``, its centre of
       symmetry, so that it is point-symmetric about the origin. No line separates the two.
    3. Cluster noise: only cluster ``t = 1`` gets isotropic Gaussian noise in the plane, of
       standard deviation 0.1 per coordinate (:data:`UNBALANCED_CLUSTER_NOISE`); the paper says
       "Gaussian noise is added to one of the clusters" without saying which or how much.
    4. Embedding: the 2-D signal ``S`` is placed in a uniformly random plane of the
       ``n_features``-dimensional space, ``S @ F`` with ``F`` a random orthonormal
       ``(2, n_features)`` frame (QR of a Gaussian matrix), so no coordinate axis is special.
    5. Noise: i.i.d. Gaussian noise of variance ``sigma2`` in all ``n_features`` dimensions.

    The paper does not define its SNR. Here it is the per-dimension ratio

    .. math:: \mathrm{SNR} = \frac{\tfrac12 \sum_{j=1}^{2} \mathrm{Var}[S_j]}{\sigma^2},

    the signal variance per signal direction (half the total variance of the 2-D signal,
    population variances of the drawn sample including the cluster noise) over the noise
    variance per dimension. So ``sigma2`` does not grow with ``n_features``; the total noise
    variance, ``n_features * sigma2``, exceeds the total signal variance whenever
    ``snr < n_features / 2``, as in the paper's high-dimensional setting. (This differs from
    :func:`add_noise`, which divides total variances over the same dimensions.)

    Parameters
    ----------
    n_samples : int, default=500
        At least 2.
    n_features : int, default=1000
        At least 2.
    snr : float, np.inf or None, default=10.0
        Positive; ``None`` or ``np.inf`` for no noise, then ``X`` has rank 2.
    p0 : float, default=0.6
        The probability of class ``t = 0``, in ``(0, 1)``.
    random_state : int, Generator, RandomState or None
        One generator draws the labels, angles, cluster noise, frame and then the noise, so
        with the same seed the noise-free part does not depend on ``snr``.

    Returns
    -------
    X : (n_samples, n_features) float64 array
    t : (n_samples,) int array, the class of each point (0 = upper, noise-free semicircle)

    Raises
    ------
    ValueError
        If ``n_samples < 2``, ``n_features < 2``, ``snr <= 0`` or ``p0`` is not in ``(0, 1)``.

    Examples
    --------
    >>> X, t = make_unbalanced_semicircles(random_state=0)
    >>> X.shape, t.shape
    ((500, 1000), (500,))
    >>> bool(abs(np.mean(t == 0) - 0.6) < 0.1)
    True
    >>> X, t = make_unbalanced_semicircles(50, 40, snr=None, random_state=0)
    >>> int(np.linalg.matrix_rank(X))
    2
    """
    n_samples = _check_integer(n_samples, "n_samples", 2)
    n_features = _check_integer(n_features, "n_features", 2)
    snr = _check_snr(snr)
    p0 = _check_real(p0, "p0", low=0.0, high=1.0, closed=False)
    rng = np.random.default_rng(check_random_state(random_state))
    t = (rng.random(n_samples) >= p0).astype(np.int64)
    angles = rng.uniform(0, np.pi, n_samples)
    upper = t == 0
    S = np.empty((n_samples, 2))
    S[:, 0] = np.where(upper, np.cos(angles), 1.0 - np.cos(angles)) - 0.5
    S[:, 1] = np.where(upper, np.sin(angles), 0.5 - np.sin(angles)) - 0.25
    cluster_noise = UNBALANCED_CLUSTER_NOISE * rng.standard_normal((n_samples, 2))
    S += np.where(upper[:, None], 0.0, cluster_noise)
    X = S @ _random_frame(n_features, 2, rng)
    if snr is not None:
        sigma2 = S.var(axis=0).sum() / (2 * snr)
        X += np.sqrt(sigma2) * rng.standard_normal(X.shape)
    return X, t
