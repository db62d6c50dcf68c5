"""The LOO paper's data: a four-signal model in noise and unbalanced semicircles.

Abrahamsen & Hansen, sections 2 and 4.1.
"""

from __future__ import annotations

import numpy as np

from dkpca._typing import RandomStateLike
from dkpca._validation import check_random_state

from ._noise import check_integer, check_real, check_snr

__all__ = ["UNBALANCED_CLUSTER_NOISE", "make_signal_in_noise", "make_unbalanced_semicircles"]

UNBALANCED_CLUSTER_NOISE = 0.1
"""In-plane noise standard deviation of cluster ``t = 1`` in :func:`make_unbalanced_semicircles`."""


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
        1-D sequence of finite non-negative numbers (strings are refused, even numeric ones),
        or ``noise`` is negative or not finite (or a string).

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
    n_samples = check_integer(n_samples, "n_samples", 1)
    message = f"strengths must be a sequence of numbers, got {strengths!r}"
    try:
        raw = np.asarray(strengths)
        s = raw.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(message) from None
    # numeric strings ("1.0") parse as float64: refuse them, as check_real does
    if raw.dtype.kind in "SU" or any(isinstance(v, str | bytes) for v in raw.flat):
        raise ValueError(message + "; pass numbers, not strings")
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(
            f"strengths must be a non-empty 1-D sequence of finite numbers >= 0, got {strengths!r}"
        )
    n_features = check_integer(n_features, "n_features", s.size)
    noise = check_real(noise, "noise", low=0.0, high=np.inf, closed=True)
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
    n_samples = check_integer(n_samples, "n_samples", 2)
    n_features = check_integer(n_features, "n_features", 2)
    snr = check_snr(snr)
    p0 = check_real(p0, "p0", low=0.0, high=1.0, closed=False)
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
