"""Pearson system (``dkpca.selection.pearson``): types, exact moments, sampling, truncation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
from scipy.integrate import quad

from dkpca.selection.pearson import (
    PearsonDistribution,
    fit_pearson,
    pearson_sample,
    pearson_type,
)

MU, SIGMA = 2.5, 0.7

# Type V lies on a curve: the skewness and kurtosis of an inverse gamma with shape 20.
_ALPHA = 20.0
_V = (
    4 * math.sqrt(_ALPHA - 2) / (_ALPHA - 3),
    3 + (30 * _ALPHA - 66) / ((_ALPHA - 3) * (_ALPHA - 4)),
)
# Tails light enough for the 8th moment (the sampling test's standard errors): type IV has
# p ~ |x|^-15.2, type V moments below order 20, type VI below 145, type VII (t, 16 df) below 16.
CASES = {  # name: (skewness, kurtosis, type)
    "0": (0.0, 3.0, 0),
    "I": (0.5, 2.8, 1),
    "I-neg": (-0.5, 2.8, 1),
    "II": (0.0, 2.5, 2),
    "III": (0.8, 1.5 * 0.8**2 + 3, 3),
    "III-neg": (-0.8, 1.5 * 0.8**2 + 3, 3),
    "IV": (0.5, 4.0, 4),
    "IV-neg": (-0.5, 4.0, 4),
    "V": (_V[0], _V[1], 5),
    "V-neg": (-_V[0], _V[1], 5),
    "VI": (0.5, 3.42, 6),
    "VI-neg": (-0.5, 3.42, 6),
    "VII": (0.0, 3.5, 7),
}
case = pytest.mark.parametrize("name", list(CASES))


def _law(name: str) -> PearsonDistribution:
    skewness, kurtosis, _ = CASES[name]
    return fit_pearson(MU, SIGMA, skewness, kurtosis)


def _integrate(f, law: PearsonDistribution) -> float:
    lo, hi = law.support
    # Split at the mean: quad handles one infinite end per piece best.
    return quad(f, lo, MU, limit=200)[0] + quad(f, MU, hi, limit=200)[0]


def _truncated_cdf(law: PearsonDistribution, low: float, high: float):
    f_low, f_high = law.cdf(low), law.cdf(high)
    return lambda x: (law.cdf(x) - f_low) / (f_high - f_low)


@case
def test_type(name):
    skewness, kurtosis, kind = CASES[name]
    assert pearson_type(skewness, kurtosis) == kind
    assert _law(name).type == kind


@case
def test_exact_moments(name):
    skewness, kurtosis, _ = CASES[name]
    law = _law(name)
    m = [_integrate(lambda x, k=k: (x - MU) ** k * law.pdf(x), law) for k in range(5)]
    np.testing.assert_allclose(m[0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(_integrate(lambda x: x * law.pdf(x), law), MU, rtol=1e-6)
    np.testing.assert_allclose(math.sqrt(m[2]), SIGMA, rtol=1e-6)
    np.testing.assert_allclose(m[3] / m[2] ** 1.5, skewness, atol=1e-6)
    np.testing.assert_allclose(m[4] / m[2] ** 2, kurtosis, rtol=1e-6)


@case
def test_cdf_matches_pdf(name):
    law = _law(name)
    lo, hi = law.support
    x = MU + SIGMA * np.linspace(-2.5, 2.5, 41)
    x = x[(x > lo + 1e-2) & (x < hi - 1e-2)]
    h = 1e-4 * SIGMA
    derivative = (law.cdf(x + h) - law.cdf(x - h)) / (2 * h)
    np.testing.assert_allclose(derivative, law.pdf(x), rtol=1e-6, atol=1e-9)
    assert np.all(np.diff(law.cdf(x)) > 0)
    np.testing.assert_allclose(law.cdf([lo, hi]), [0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(law.cdf([-np.inf, np.inf]), [0.0, 1.0], atol=1e-12)


def _moments(x: np.ndarray) -> np.ndarray:
    """Mean, sd, skewness and kurtosis of each row."""
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    m2, m3, m4 = ((d**k).mean(axis=-1) for k in (2, 3, 4))
    return np.stack([mean[..., 0], np.sqrt(m2), m3 / m2**1.5, m4 / m2**2], axis=-1)


@pytest.mark.parametrize("name", [*CASES, "I-U"])
def test_sample_moments(name):
    # "I-U": a U-shaped beta (both shapes < 1), only sampled.
    skewness, kurtosis, _ = CASES.get(name, (0.3, 1.6, 1))
    law = fit_pearson(MU, SIGMA, skewness, kurtosis)
    x = law.sample((100, 10_000), np.random.default_rng(12345))
    assert x.dtype == np.float64 and x.shape == (100, 10_000)
    overall = _moments(x.ravel())
    # Standard errors from the spread of the 100 batch estimates, so no formula is assumed.
    se = _moments(x).std(axis=0, ddof=1) / math.sqrt(100)
    np.testing.assert_array_less(np.abs(overall - [MU, SIGMA, skewness, kurtosis]), 5 * se)


@case
def test_truncated_sample(name):
    law = _law(name)
    low, high = MU - 0.5 * SIGMA, MU + 1.5 * SIGMA
    rng = np.random.default_rng(7)
    x = law.sample(20_000, rng, low=low, high=high)
    assert x.shape == (20_000,) and x.min() >= low and x.max() <= high
    assert scipy.stats.kstest(x, _truncated_cdf(law, low, high)).pvalue > 1e-3


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("I", None, MU),  # one-sided
        ("III-neg", MU - SIGMA, None),
        ("IV", MU + 3 * SIGMA, None),  # upper tail, < 1%: inverse CDF on survival probabilities
        ("IV-neg", -np.inf, MU - 3 * SIGMA),
        ("I-neg", MU - 4 * SIGMA, MU - 2.8 * SIGMA),
        ("0", MU + 5 * SIGMA, MU + 6 * SIGMA),  # mass 3e-7
        ("VI", MU + 4 * SIGMA, 100.0),
    ],
)
def test_truncated_tails(name, low, high):
    law = _law(name)
    x = law.sample(20_000, np.random.default_rng(3), low=low, high=high)
    lo = -np.inf if low is None else low
    hi = np.inf if high is None else high
    assert x.shape == (20_000,) and x.min() >= lo and x.max() <= hi
    assert scipy.stats.kstest(x, _truncated_cdf(law, lo, hi)).pvalue > 1e-3


def test_inverse_branch_is_exercised():
    law = _law("I-neg")
    assert law.cdf(MU - 2.8 * SIGMA) - law.cdf(MU - 4 * SIGMA) < 0.01
    assert 1 - law.cdf(MU + 3 * SIGMA) < 0.01 > law.cdf(MU - 3 * SIGMA)


def test_reproducible():
    law = _law("IV")
    for bounds in [{}, {"low": 2.0, "high": 3.0}, {"low": MU + 3 * SIGMA}]:
        a = law.sample(1000, np.random.default_rng(5), **bounds)
        b = law.sample(1000, np.random.default_rng(5), **bounds)
        np.testing.assert_array_equal(a, b)
    r, kind = pearson_sample(MU, SIGMA, 0.5, 4.0, 1000, random_state=5, low=2.0, high=3.0)
    np.testing.assert_array_equal(r, law.sample(1000, np.random.default_rng(5), low=2.0, high=3.0))
    assert kind == 4


@case
def test_pearson_sample_type(name):
    skewness, kurtosis, kind = CASES[name]
    r, got = pearson_sample(MU, SIGMA, skewness, kurtosis, (3, 4), random_state=0)
    assert got == kind == pearson_type(skewness, kurtosis) and r.shape == (3, 4)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.0, 1.0, 1.0, 2.0), "must exceed"),
        ((0.0, 1.0, 0.0, 0.5), "must exceed"),
        ((0.0, 0.0, 0.0, 3.0), "std > 0"),
        ((0.0, -1.0, 0.0, 3.0), "std > 0"),
        ((np.nan, 1.0, 0.0, 3.0), "finite"),
        ((0.0, 1.0, np.nan, 3.0), "finite"),
        ((0.0, 1.0, 0.0, np.inf), "finite"),
    ],
)
def test_invalid_moments(args, match):
    with pytest.raises(ValueError, match=match):
        fit_pearson(*args)


def test_impossible_pair_message():
    with pytest.raises(ValueError, match=r"skewness 1.0 and kurtosis 2.0.*skewness\*\*2 \+ 1"):
        pearson_type(1.0, 2.0)


@pytest.mark.parametrize(
    ("name", "low", "high", "match"),
    [
        ("0", 3.0, 3.0, "low < high"),
        ("0", 3.0, 2.0, "low < high"),
        ("0", np.nan, 2.0, "low < high"),
        ("I", 6.0, 7.0, "misses the support"),  # support ends at 5.67
        ("III", None, -0.5, "misses the support"),
        ("0", MU + 50 * SIGMA, MU + 60 * SIGMA, "no probability mass"),
    ],
)
def test_invalid_interval(name, low, high, match):
    with pytest.raises(ValueError, match=match):
        _law(name).sample(10, np.random.default_rng(0), low=low, high=high)


def test_rng_must_be_generator():
    with pytest.raises(TypeError, match="Generator"):
        _law("0").sample(10, 0)


# External references: scipy's families with the same four moments.


@pytest.mark.parametrize("skewness", [0.8, -0.8])
def test_type_iii_is_pearson3(skewness):
    law = fit_pearson(MU, SIGMA, skewness, 1.5 * skewness**2 + 3)
    ref = scipy.stats.pearson3(skewness, loc=MU, scale=SIGMA)
    x = MU + SIGMA * np.linspace(-1.8, 1.8, 19)
    np.testing.assert_allclose(law.pdf(x), ref.pdf(x), rtol=1e-9)
    np.testing.assert_allclose(law.cdf(x), ref.cdf(x), rtol=1e-9, atol=1e-14)


def test_type_vii_is_student_t():
    law = fit_pearson(MU, SIGMA, 0.0, 3.5)
    df = 4 + 6 / 0.5
    ref = scipy.stats.t(df, loc=MU, scale=SIGMA * math.sqrt((df - 2) / df))
    x = MU + SIGMA * np.linspace(-5, 5, 21)
    np.testing.assert_allclose(law.pdf(x), ref.pdf(x), rtol=1e-12)
    np.testing.assert_allclose(law.cdf(x), ref.cdf(x), rtol=1e-12)


@pytest.mark.parametrize(
    ("ref", "kind"),
    [
        (scipy.stats.beta(2.0, 5.0, loc=1.0, scale=3.0), 1),
        (scipy.stats.beta(5.0, 2.0, loc=1.0, scale=3.0), 1),
        (scipy.stats.beta(3.0, 3.0, loc=-1.0, scale=2.0), 2),
        (scipy.stats.invgamma(12.0, loc=0.5, scale=4.0), 5),
        (scipy.stats.betaprime(30.0, 40.0, loc=-1.0, scale=2.0), 6),
    ],
)
def test_matches_scipy_family(ref, kind):
    mean, var, skewness, excess = (float(v) for v in ref.stats(moments="mvsk"))
    law = fit_pearson(mean, math.sqrt(var), skewness, excess + 3)
    assert law.type == kind
    np.testing.assert_allclose(law.support, ref.support(), rtol=1e-9, atol=1e-12)
    x = ref.ppf(np.linspace(0.01, 0.99, 25))
    np.testing.assert_allclose(law.pdf(x), ref.pdf(x), rtol=1e-7)
    np.testing.assert_allclose(law.cdf(x), ref.cdf(x), rtol=1e-7)


@pytest.mark.parametrize(("skewness", "kurtosis"), [(0.5, 5.0), (-0.5, 5.0), (1.2, 7.0)])
def test_type_iv_closed_form(skewness, kurtosis):
    # Pearson IV normalised with |Γ(m + iν/2) / Γ(m)|² / (a B(m - 1/2, 1/2)), recomputed here.
    law = fit_pearson(MU, SIGMA, skewness, kurtosis)
    assert law.type == 4
    beta1 = skewness**2
    big_a = 10 * kurtosis - 12 * beta1 - 18
    b0, b1, b2 = (
        (4 * kurtosis - 3 * beta1) / big_a,
        skewness * (kurtosis + 3) / big_a,
        (2 * kurtosis - 3 * beta1 - 6) / big_a,
    )
    m, lam = 1 / (2 * b2), -b1 / (2 * b2)
    a = math.sqrt(b0 / b2 - lam**2)
    nu = (lam + b1) / (b2 * a)
    log_k = (
        2 * (scipy.special.loggamma(m + 0.5j * nu).real - scipy.special.gammaln(m))
        - math.log(a)
        - scipy.special.betaln(m - 0.5, 0.5)
    )
    z = np.linspace(-4, 4, 33)
    u = (z - lam) / a
    ref = np.exp(log_k - m * np.log1p(u**2) - nu * np.arctan(u)) / SIGMA
    np.testing.assert_allclose(law.pdf(MU + SIGMA * z), ref, rtol=1e-10)


def _kurtosis_at_kappa(skewness: float, kappa: float) -> float:
    """The kurtosis where Pearson's criterion ``κ = c1² / (4 c0 c2)`` takes ``kappa``.

    ``κ = 1`` is the type-V line; ``κ`` falls below 1 (type IV) as the kurtosis rises above it.
    """
    import scipy.optimize

    b1 = skewness * skewness

    def criterion(b2: float) -> float:
        c0, c1, c2 = 4 * b2 - 3 * b1, skewness * (b2 + 3), 2 * b2 - 3 * b1 - 6
        return c1 * c1 / (4 * c0 * c2) - kappa

    # κ runs from +inf just above the type-III line (c2 = 0) down below 1 for large kurtosis
    return scipy.optimize.brentq(criterion, 1.5 * b1 + 3 + 1e-9, 1e6, xtol=1e-15, rtol=1e-15)


@pytest.mark.parametrize("skewness", [1.0, -1.5])
@pytest.mark.parametrize("gap", [1e-7, 1e-6, 1e-5])
def test_draws_next_to_the_type_v_line_have_the_requested_moments(skewness, gap):
    """Type IV's table cannot resolve its density within ~1e-5 of κ = 1: type V stands in.

    Before, κ = 1 - 1e-6 drew an sd of 1.007 and κ = 1 - 1e-7 one of 1.07 (for 1).
    """
    kurtosis = _kurtosis_at_kappa(skewness, 1.0 - gap)
    law = fit_pearson(MU, SIGMA, skewness, kurtosis)
    x = law.sample((100, 10_000), np.random.default_rng(7))
    overall = _moments(x.ravel())
    # 10⁶ draws: standard errors from the spread of the 100 batch estimates (sd's ~1e-3 of it)
    se = _moments(x).std(axis=0, ddof=1) / math.sqrt(100)
    np.testing.assert_array_less(np.abs(overall - [MU, SIGMA, skewness, kurtosis]), 5 * se)


@pytest.mark.parametrize("skewness", [0.3, 1.0, -1.5, 3.0])
def test_type_iv_just_past_the_type_v_band_has_an_accurate_cdf(skewness):
    """Where type IV takes over from type V, its tabulated CDF matches the integrated pdf."""
    law = fit_pearson(0.0, 1.0, skewness, _kurtosis_at_kappa(skewness, 1.0 - 2e-4))
    assert law.type == 4
    for q in (0.01, 0.2, 0.5, 0.8, 0.99):
        x = float(law._z.ppf(q))  # standardised, skewed right: mirrored for negative skewness
        below = quad(law._z.pdf, -np.inf, x, epsabs=1e-13, limit=500)[0]
        assert below == pytest.approx(q, abs=1e-3)
