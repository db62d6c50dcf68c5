"""Noise at a signal-to-noise ratio, and the argument checks the data sets share."""

from __future__ import annotations

import numpy as np

from dkpca._typing import RandomStateLike
from dkpca._validation import check_random_state

__all__ = ["add_noise"]


def check_snr(snr: float | None) -> float | None:
    """Return ``snr`` as a float, or ``None`` for "no noise" (``None`` or ``inf``).

    Strings are refused, even numeric ones such as ``"10"``, as ``n_samples="100"`` is.
    """
    if snr is None:
        return None
    message = f"snr must be a positive number, np.inf or None, got {snr!r}"
    if isinstance(snr, str | bytes):  # float("10") would parse it: a number is meant
        raise ValueError(message + "; pass a number, not a string")  # noqa: TRY004 (as check_integer)
    try:
        value = float(snr)
    except (TypeError, ValueError):
        raise ValueError(message) from None
    if isinstance(snr, bool | np.bool_) or np.isnan(value) or value <= 0:
        raise ValueError(message)
    return None if np.isinf(value) else value


def check_integer(value: int, name: str, minimum: int) -> int:
    """Check that ``value`` is an integer (not a bool) of at least ``minimum``."""
    if (
        isinstance(value, bool | np.bool_)
        or not isinstance(value, int | np.integer)
        or value < minimum
    ):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_real(value: float, name: str, *, low: float, high: float, closed: bool) -> float:
    """Check that ``value`` is a finite real in ``[low, high]`` (``closed``) or ``(low, high)``.

    Strings are refused, even numeric ones such as ``"0.5"``.
    """
    inside = "[{}, {}]" if closed else "({}, {})"
    message = f"{name} must be a finite number in {inside.format(low, high)}, got {value!r}"
    if isinstance(value, str | bytes):  # float("0.5") would parse it: a number is meant
        raise ValueError(message + "; pass a number, not a string")  # noqa: TRY004 (as check_integer)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(message) from None
    ok = low <= number <= high if closed else low < number < high
    if isinstance(value, bool | np.bool_) or not np.isfinite(number) or not ok:
        raise ValueError(message)
    return number


def with_noise(X_clean: np.ndarray, snr: float | None, rng: np.random.Generator) -> np.ndarray:
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
        If ``X_clean`` is not a non-empty 2-D array of finite real numbers (complex data is
        refused, not cast), or ``snr`` is not a positive number (strings are refused).

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
    snr = check_snr(snr)
    X = np.asarray(X_clean)
    if np.iscomplexobj(X):  # the float64 copy would drop the imaginary part
        raise ValueError(f"Complex data not supported: X_clean has complex dtype {X.dtype}; "
                         "pass real data (e.g. np.abs(X_clean) or X_clean.real)")
    if X.ndim != 2 or X.size == 0:
        raise ValueError(f"X_clean must be a non-empty 2-D array, got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number) or not np.all(np.isfinite(X)):
        raise ValueError("X_clean must hold finite numbers only")
    return with_noise(X, snr, np.random.default_rng(check_random_state(random_state)))
