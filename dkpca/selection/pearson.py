"""Pearson's system of distributions, fitted from four moments and sampled as MATLAB's ``pearsrnd``.

Given a mean, standard deviation, skewness ``γ`` and non-excess kurtosis ``β2``, the system picks
the one of eight families (types 0 to VII) with exactly these moments. Each is built standardised
(mean 0, sd 1) for ``γ >= 0``, as a frozen :mod:`scipy.stats` distribution or, for type IV, a
tabulated class; ``γ < 0`` mirrors it (``z -> -z``) and ``x = mean + std * z``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.stats
from scipy.interpolate import CubicHermiteSpline

__all__ = ["PearsonDistribution", "fit_pearson", "pearson_sample", "pearson_type"]

# pearsrnd tests these boundaries with ==; moments computed by formulas carry rounding errors,
# so values this close to a boundary count as on it.
_SKEW_TOL = 1e-12  # |γ| <= _SKEW_TOL: symmetric
_KURT_TOL = 1e-12  # |β2 - 3| <= _KURT_TOL * max(1, β2): normal
_C2_TOL = 1e-10  # |c2| <= _C2_TOL * max(1, c0): type III
# |κ - 1| <= _KAPPA_TOL: type V. Type IV's scale ``a`` shrinks as sqrt(1 - κ) and its θ table
# stops resolving the density: its CDF is off by about 1.5e-8 / (1 - κ) (1e-2 at 1e-6, with
# draws of sd 1.07 for sd 1), 2e-4 at this tolerance. Type V there has the requested mean, sd
# and skewness exactly and a kurtosis within 1e-4 (relative) of the requested one.
_KAPPA_TOL = 1e-4
_TABLE_POINTS = 2**14  # type IV CDF table, in θ = arctan((z - λ) / a)
_GUIDE_BUCKETS = 2**16  # type IV inverse: equal-probability buckets, each naming its table cell
_INVERSE_BELOW = 0.01  # truncated sampling: inverse CDF below this accepted mass, else rejection


def _check_shape(skewness: float, kurtosis: float) -> None:
    """Raise for a skewness and kurtosis that no distribution has."""
    if not (math.isfinite(skewness) and math.isfinite(kurtosis)):
        raise ValueError(f"skewness and kurtosis must be finite, got {skewness} and {kurtosis}")
    beta1 = skewness * skewness
    if kurtosis <= beta1 + 1:
        raise ValueError(
            f"no distribution has skewness {skewness} and kurtosis {kurtosis}: the kurtosis "
            f"(non-excess, normal = 3) must exceed skewness**2 + 1 = {beta1 + 1}"
        )


def _coefficients(skewness: float, kurtosis: float) -> tuple[float, float, float]:
    """Pearson's c0, c1, c2, all times A = 10 β2 - 12 β1 - 18 (a common factor)."""
    beta1 = skewness * skewness
    return 4 * kurtosis - 3 * beta1, skewness * (kurtosis + 3), 2 * kurtosis - 3 * beta1 - 6


def pearson_type(skewness: float, kurtosis: float) -> int:
    """Pearson type (0 to 7) of the distribution with this skewness and kurtosis, as ``pearsrnd``.

    Parameters
    ----------
    skewness, kurtosis : float
        Skewness ``γ`` and non-excess kurtosis ``β2`` (3 for the normal); ``β2 > γ² + 1``.

    Returns
    -------
    int
        0 normal, 1 beta, 2 symmetric beta, 3 gamma, 4 type IV, 5 inverse gamma,
        6 beta prime, 7 Student's t.

    Raises
    ------
    ValueError
        For non-finite values or ``kurtosis <= skewness**2 + 1``.

    Examples
    --------
    >>> pearson_type(0.0, 3.0), pearson_type(0.5, 2.8), pearson_type(0.5, 4.0)
    (0, 1, 4)
    """
    skewness, kurtosis = float(skewness), float(kurtosis)
    _check_shape(skewness, kurtosis)
    if abs(skewness) <= _SKEW_TOL:
        if abs(kurtosis - 3) <= _KURT_TOL * max(1.0, kurtosis):
            return 0
        return 2 if kurtosis < 3 else 7
    c0, c1, c2 = _coefficients(skewness, kurtosis)
    if abs(c2) <= _C2_TOL * max(1.0, c0):
        return 3
    kappa = c1 * c1 / (4 * c0 * c2)
    if kappa < 0:
        return 1
    if abs(kappa - 1) <= _KAPPA_TOL:
        return 5
    return 4 if kappa < 1 else 6


class _PearsonIV:
    """Standardised Pearson type IV, tabulated in ``θ = arctan((z - λ) / a)``.

    ``p(z) ∝ (1 + u²)^-m exp(-ν arctan u)`` with ``u = (z - λ) / a``. In θ the density,
    ``∝ cos(θ)^(2m-2) exp(-ν θ)``, is smooth, bounded and strongly log-concave (curvature at
    least ``2m - 2``), so one fixed grid integrates it to near machine precision: z's heavy tails
    all land at the ends of ``(-π/2, π/2)``. Has the frozen-scipy methods that sampling uses.
    """

    def __init__(self, m: float, nu: float, lam: float, a: float) -> None:
        self.m, self.nu, self.lam, self.a = m, nu, lam, a
        peak = math.atan(-nu / (2 * m - 2))
        # Strong log-concavity: beyond 12 / sqrt(2m - 2) of the peak lies < exp(-72) of the mass.
        half = 12 / math.sqrt(2 * m - 2)
        ends = max(-math.pi / 2, peak - half), min(math.pi / 2, peak + half)
        theta = np.linspace(*ends, _TABLE_POINTS + 1)
        self._log_peak = self._log_g(np.float64(peak))
        g = np.exp(self._log_g(theta) - self._log_peak)
        dg = g * (-(2 * m - 2) * np.tan(theta) - nu)
        # The Hermite interpolant's integral is the end-corrected trapezoid rule, O(h⁴).
        self._cum = CubicHermiteSpline(theta, g, dg).antiderivative()
        self._total = float(self._cum(theta[-1]))
        self._theta = theta
        # Monotone for np.interp: the cubic may dip by ~1e-30 where g underflows.
        self._table = np.maximum.accumulate(self._cum(theta) / self._total)
        # np.interp's binary search costs ~80 ns a draw; a bucket of probabilities that holds at
        # most one table point names the cell directly, and only the rare others search.
        cell = np.searchsorted(self._table, np.linspace(0, 1, _GUIDE_BUCKETS + 1), "right") - 1
        self._guide = np.minimum(cell[:-1], _TABLE_POINTS - 1)
        self._wide = np.diff(cell) > 1

    def support(self) -> tuple[float, float]:
        return -math.inf, math.inf

    def _log_g(self, theta: np.ndarray) -> np.ndarray:
        return (2 * self.m - 2) * np.log(np.cos(theta)) - self.nu * theta

    def pdf(self, z: Any) -> np.ndarray:
        u = (np.asarray(z, dtype=np.float64) - self.lam) / self.a
        log_p = -self.m * np.log1p(u * u) - self.nu * np.arctan(u) - self._log_peak
        return np.exp(log_p) / (self.a * self._total)

    def cdf(self, z: Any) -> np.ndarray:
        theta = np.arctan((np.asarray(z, dtype=np.float64) - self.lam) / self.a)
        theta = np.clip(theta, self._theta[0], self._theta[-1])
        return np.clip(self._cum(theta) / self._total, 0.0, 1.0)

    def sf(self, z: Any) -> np.ndarray:
        return 1.0 - self.cdf(z)

    def ppf(self, q: Any) -> np.ndarray:
        shape, table = np.shape(q), self._table
        q = np.asarray(q, dtype=np.float64).ravel()
        bucket = np.minimum((q * _GUIDE_BUCKETS).astype(np.intp), _GUIDE_BUCKETS - 1)
        j = self._guide[bucket]
        j = np.minimum(j + (q >= table[j + 1]), _TABLE_POINTS - 1)
        with np.errstate(all="ignore"):  # the wide buckets (flat cells) are redone below
            frac = (q - table[j]) / (table[j + 1] - table[j])
        theta = self._theta[j] + frac * (self._theta[j + 1] - self._theta[j])
        wide = self._wide[bucket]
        theta[wide] = np.interp(q[wide], table, self._theta)
        return (self.lam + self.a * np.tan(theta)).reshape(shape)

    def isf(self, q: Any) -> np.ndarray:
        return self.ppf(1.0 - np.asarray(q, dtype=np.float64))

    def rvs(self, size: int, random_state: np.random.Generator) -> np.ndarray:
        return self.ppf(random_state.random(size))


def _standard(kind: int, g: float, kurtosis: float) -> Any:
    """Build the standardised distribution of type ``kind`` with skewness ``g >= 0``."""
    beta1 = g * g
    if kind == 0:
        return scipy.stats.norm()
    if kind in (1, 2):  # four-parameter beta by the method of moments
        nu = 6 * (kurtosis - beta1 - 1) / (6 + 3 * beta1 - 2 * kurtosis)
        d = 1 / math.sqrt(1 + 16 * (nu + 1) / ((nu + 2) ** 2 * beta1)) if g else 0.0
        alpha, beta = nu / 2 * (1 - d), nu / 2 * (1 + d)  # alpha <= beta: skewed right
        width = math.sqrt((nu + 2) ** 2 * beta1 + 16 * (nu + 1)) / 2
        return scipy.stats.beta(alpha, beta, loc=-alpha / nu * width, scale=width)
    if kind == 3:
        shape, scale = 4 / beta1, g / 2
        return scipy.stats.gamma(shape, loc=-shape * scale, scale=scale)
    if kind == 5:  # the one shape with skewness g; the kurtosis follows
        alpha = (3 * beta1 + 8 + 4 * math.sqrt(beta1 + 4)) / beta1
        scale = (alpha - 1) * math.sqrt(alpha - 2)
        return scipy.stats.invgamma(alpha, loc=-scale / (alpha - 1), scale=scale)
    if kind == 7:
        nu = 4 + 6 / (kurtosis - 3)
        return scipy.stats.t(nu, scale=math.sqrt((nu - 2) / nu))
    # d log p / dz = -(z + b1) / (b0 + b1 z + b2 z²); A > 0 for types IV and VI.
    b0, b1, b2 = (c / (10 * kurtosis - 12 * beta1 - 18) for c in _coefficients(g, kurtosis))
    if kind == 6:  # b2 z² + b1 z + b0 has roots a1 < a2 < 0; p ∝ (z - a1)^C1 (z - a2)^C2, z > a2
        disc = math.sqrt(b1 * b1 - 4 * b0 * b2)
        a1, a2 = (-b1 - disc) / (2 * b2), (-b1 + disc) / (2 * b2)
        c1 = -(a1 + b1) / (b2 * (a1 - a2))
        c2 = -(a2 + b1) / (b2 * (a2 - a1))
        return scipy.stats.betaprime(c2 + 1, -c1 - c2 - 1, loc=a2, scale=a2 - a1)
    lam = -b1 / (2 * b2)  # kind 4: b2 ((z - λ)² + a²) with a² > 0
    a = math.sqrt(b0 / b2 - lam * lam)
    return _PearsonIV(1 / (2 * b2), (lam + b1) / (b2 * a), lam, a)


@dataclass(frozen=True)
class PearsonDistribution:
    """The Pearson distribution with four moments, as :func:`fit_pearson`; ``type`` as ``pearsrnd``.

    Examples
    --------
    >>> law = PearsonDistribution(2.5, 0.7, -0.5, 2.8)
    >>> law.type, [round(v, 4) for v in law.support]
    (1, [-0.6699, 3.9047])
    >>> round(float(law.cdf(2.5)), 4)
    0.4603
    """

    mean: float
    std: float
    skewness: float
    kurtosis: float
    type: int = field(init=False)
    _z: Any = field(init=False, repr=False, compare=False)
    _sign: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = [float(v) for v in (self.mean, self.std, self.skewness, self.kurtosis)]
        if not (math.isfinite(values[0]) and math.isfinite(values[1]) and values[1] > 0):
            raise ValueError(f"need a finite mean and a finite std > 0, got {values[:2]}")
        kind = pearson_type(values[2], values[3])
        # Fix the fields as floats; build for |γ| and mirror (within tolerance 0 is symmetric).
        for name, value in zip(("mean", "std", "skewness", "kurtosis"), values, strict=True):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "type", kind)
        g = 0.0 if kind in (0, 2, 7) else abs(values[2])
        object.__setattr__(self, "_z", _standard(kind, g, values[3]))
        object.__setattr__(self, "_sign", -1.0 if values[2] < 0 and g else 1.0)

    @property
    def support(self) -> tuple[float, float]:
        """``(lower, upper)`` ends of the support, infinite where unbounded."""
        ends = [self.mean + self._sign * self.std * float(e) for e in self._z.support()]
        return min(ends), max(ends)

    def _to_z(self, x: Any) -> np.ndarray:
        return self._sign * (np.asarray(x, dtype=np.float64) - self.mean) / self.std

    def pdf(self, x: Any) -> np.ndarray:
        """Probability density at ``x``."""
        return np.asarray(self._z.pdf(self._to_z(x)), dtype=np.float64) / self.std

    def cdf(self, x: Any) -> np.ndarray:
        """Cumulative distribution function at ``x``."""
        z = self._to_z(x)
        return np.asarray(self._z.cdf(z) if self._sign > 0 else self._z.sf(z), dtype=np.float64)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.type == 5:  # scipy's invgamma.rvs inverts the CDF per draw; 1/Gamma is ~10x faster
            (alpha,), kw = self._z.args, self._z.kwds
            return kw["loc"] + kw["scale"] / rng.standard_gamma(alpha, n)
        return np.asarray(self._z.rvs(size=n, random_state=rng), dtype=np.float64)

    def sample(self, size: int | tuple[int, ...], rng: np.random.Generator, *,
               low: float | None = None, high: float | None = None) -> np.ndarray:
        """Draw ``size`` values, truncated to ``[low, high]`` when either bound is given.

        An accepted mass of at least 1% is sampled by rejection in vectorised rounds (draws kept
        in order), a smaller one by inverting the CDF on uniforms between ``F(low)`` and
        ``F(high)`` (survival functions in the upper tail, for precision).

        Parameters
        ----------
        size : int or tuple of int
            Shape of the result.
        rng : numpy.random.Generator
            Source of randomness; the same state gives the same draws.
        low, high : float, optional
            Truncation bounds; ``None`` leaves that side open.

        Returns
        -------
        numpy.ndarray
            float64 draws of shape ``size``.

        Raises
        ------
        ValueError
            For ``low >= high`` or an interval with no probability mass.
        TypeError
            When ``rng`` is not a Generator.

        Examples
        --------
        >>> law = fit_pearson(2.5, 0.7, 0.5, 4.0)
        >>> x = law.sample(1000, np.random.default_rng(0), low=2.0, high=3.0)
        >>> x.shape, bool(x.min() >= 2.0), bool(x.max() <= 3.0)
        ((1000,), True, True)
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        shape = (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)
        n = math.prod(shape)
        if low is None and high is None:
            return (self.mean + self._sign * self.std * self._draw(n, rng)).reshape(shape)
        lo = -math.inf if low is None else float(low)
        hi = math.inf if high is None else float(high)
        return self._truncated(n, rng, lo, hi).reshape(shape)

    def _truncated(self, n: int, rng: np.random.Generator, lo: float, hi: float) -> np.ndarray:
        if math.isnan(lo) or math.isnan(hi) or lo >= hi:
            raise ValueError(f"need low < high, got low={lo}, high={hi}")
        start, end = self.support
        if hi <= start or lo >= end:
            raise ValueError(f"[{lo}, {hi}] misses the support [{start}, {end}]")
        zlo, zhi = sorted(float(z) for z in self._to_z([lo, hi]))
        upper = float(self._z.cdf(zlo)) > 0.5
        if upper:
            qlo, qhi = float(self._z.sf(zhi)), float(self._z.sf(zlo))
        else:
            qlo, qhi = float(self._z.cdf(zlo)), float(self._z.cdf(zhi))
        mass = qhi - qlo
        if not mass > 0:
            raise ValueError(f"[{lo}, {hi}] has no probability mass under {self!r}")
        if mass < _INVERSE_BELOW:
            q = qlo + rng.random(n) * mass
            z = self._z.isf(q) if upper else self._z.ppf(q)
            return np.clip(self.mean + self._sign * self.std * z, lo, hi)
        parts, need = [], n
        while need > 0:
            x = self.mean + self._sign * self.std * self._draw(int(need / mass * 1.1) + 16, rng)
            x = x[(x >= lo) & (x <= hi)][:need]
            parts.append(x)
            need -= x.size
        return np.concatenate(parts, dtype=np.float64)


def fit_pearson(mean: float, std: float, skewness: float, kurtosis: float) -> PearsonDistribution:
    """Fit the Pearson distribution with these four moments.

    Parameters
    ----------
    mean, std, skewness, kurtosis : float
        Mean, standard deviation (> 0), skewness ``γ`` and non-excess kurtosis ``β2`` (3 for the
        normal), which must exceed ``γ² + 1``.

    Returns
    -------
    PearsonDistribution

    Raises
    ------
    ValueError
        For non-finite values, ``std <= 0`` or ``kurtosis <= skewness**2 + 1``.

    Examples
    --------
    >>> law = fit_pearson(2.5, 0.7, 0.5, 4.0)
    >>> law.type, round(float(law.pdf(2.5)), 4), round(float(law.cdf(2.5)), 4)
    (4, 0.6017, 0.529)
    """
    return PearsonDistribution(mean, std, skewness, kurtosis)


def pearson_sample(mean: float, std: float, skewness: float, kurtosis: float,
                   size: int | tuple[int, ...], *,
                   random_state: int | np.random.Generator | None = None,
                   low: float | None = None, high: float | None = None) -> tuple[np.ndarray, int]:
    """Draw from the Pearson distribution with four moments, as MATLAB's ``[r, type] = pearsrnd``.

    Parameters
    ----------
    mean, std, skewness, kurtosis : float
        The moments, as :func:`fit_pearson`.
    size, low, high
        As :meth:`PearsonDistribution.sample`.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    draws : numpy.ndarray
        float64 draws of shape ``size``.
    type : int
        Pearson type, as :func:`pearson_type`.

    Examples
    --------
    >>> r, kind = pearson_sample(0.0, 1.0, 0.5, 2.8, (2, 500), random_state=0)
    >>> r.shape, kind, bool(abs(r.mean()) < 0.1)
    ((2, 500), 1, True)
    """
    law = fit_pearson(mean, std, skewness, kurtosis)
    rng = np.random.default_rng(random_state)
    return law.sample(size, rng, low=low, high=high), law.type
