"""Tests for :func:`dkpca.generalization.independence.independence_test`."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from scipy import stats
from scipy.special import xlogy

from dkpca.generalization.independence import (
    IndependenceResult,
    default_bins,
    independence_test,
    mutual_information,
)


@pytest.fixture(scope="module")
def gaussian() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(300, 10))


@pytest.fixture(scope="module")
def gaussian_result(gaussian) -> IndependenceResult:
    return independence_test(gaussian, n_permutations=500, random_state=1)


def dependent(rng: np.random.Generator, n: int = 400) -> np.ndarray:
    x = rng.normal(size=n)
    return np.column_stack([x, x**2 + 0.1 * rng.normal(size=n), rng.normal(size=n)])


def test_independent_components(gaussian_result):
    r = gaussian_result
    assert r.mutual_information.shape == r.p_values.shape == r.rejected.shape == (10, 10)
    assert np.isnan(np.diag(r.p_values)).all() and np.isnan(np.diag(r.mutual_information)).all()
    assert not np.diag(r.rejected).any()
    np.testing.assert_array_equal(r.p_values, r.p_values.T)
    np.testing.assert_array_equal(r.rejected, r.rejected.T)
    assert r.fraction_rejected <= 0.2
    upper = r.p_values[np.triu_indices(10, 1)]
    assert r.fraction_rejected == np.mean(upper <= 0.05)
    assert stats.kstest(upper, "uniform").pvalue > 0.01
    assert (r.alpha, r.n_permutations, r.n_bins) == (0.05, 500, default_bins(300))


def test_dependent_pair_rejected(global_random_seed):
    X = dependent(np.random.default_rng(global_random_seed))
    assert abs(np.corrcoef(X[:, 0], X[:, 1])[0, 1]) < 0.2  # uncorrelated, yet dependent
    r = independence_test(X, n_permutations=1000, random_state=global_random_seed)
    assert r.rejected[0, 1] and r.rejected[1, 0]
    assert r.p_values[0, 1] <= 0.01
    assert r.p_values[0, 1] == pytest.approx(1 / 1001)
    assert r.mutual_information[0, 1] > r.mutual_information[0, 2]


def test_mutual_information_matches_histogram2d():
    X = dependent(np.random.default_rng(3), 500)
    b = 7
    counts, _, _ = np.histogram2d(X[:, 0], X[:, 1], bins=b)
    p = counts / counts.sum()
    outer = p.sum(axis=1)[:, None] * p.sum(axis=0)[None, :]
    expected = np.sum(xlogy(p, p)) - np.sum(xlogy(p, outer))
    assert mutual_information(X[:, 0], X[:, 1], n_bins=b) == pytest.approx(expected, rel=1e-12)
    r = independence_test(X, n_permutations=10, n_bins=b, random_state=0)
    assert r.mutual_information[0, 1] == pytest.approx(expected, rel=1e-12)
    assert r.n_bins == b


def test_schedulers_agree(gaussian, gaussian_result):
    X = gaussian[:, :6]
    threads = independence_test(X, n_permutations=200, random_state=7)
    with dask.config.set(scheduler="sync"):
        sync = independence_test(X, n_permutations=200, random_state=7)
    np.testing.assert_array_equal(threads.p_values, sync.p_values)
    np.testing.assert_array_equal(threads.mutual_information, sync.mutual_information)


def test_batching_does_not_matter(gaussian, monkeypatch):
    from dkpca.generalization import independence

    X = gaussian[:, :6]
    ref = independence_test(X, n_permutations=200, random_state=7)
    monkeypatch.setattr(independence, "MAX_TASKS", 2)
    monkeypatch.setattr(independence, "PERMUTATION_BLOCK", 1000)  # a few permutations a block
    other = independence_test(X, n_permutations=200, random_state=7)
    np.testing.assert_array_equal(ref.p_values, other.p_values)


@pytest.mark.distributed
def test_distributed_agrees(gaussian, client):
    X = gaussian[:, :6]
    with dask.config.set(scheduler="sync"):
        local = independence_test(X, n_permutations=200, random_state=7)
    remote = independence_test(X, n_permutations=200, random_state=7)
    np.testing.assert_array_equal(local.p_values, remote.p_values)
    np.testing.assert_array_equal(local.mutual_information, remote.mutual_information)


def test_seed_reproducible(gaussian):
    X = gaussian[:, :4]
    a = independence_test(X, n_permutations=100, random_state=3)
    b = independence_test(X, n_permutations=100, random_state=3)
    c = independence_test(X, n_permutations=100, random_state=4)
    np.testing.assert_array_equal(a.p_values, b.p_values)
    assert not np.array_equal(a.p_values, c.p_values)
    np.testing.assert_array_equal(a.mutual_information, c.mutual_information)


def test_constant_component():
    X = np.column_stack([np.random.default_rng(0).normal(size=50), np.ones(50)])
    r = independence_test(X, n_permutations=50, random_state=0)
    assert r.mutual_information[0, 1] == 0.0 and r.p_values[0, 1] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_permutations": 0}, "n_permutations"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"n_bins": 1}, "n_bins"),
    ],
)
def test_bad_parameters(gaussian, kwargs, match):
    with pytest.raises(ValueError, match=match):
        independence_test(gaussian, **kwargs)


def test_bad_scores(gaussian):
    with pytest.raises(ValueError, match="at least 2 components"):
        independence_test(gaussian[:, :1])
    with pytest.raises(ValueError, match="2-D"):
        independence_test(gaussian[:, 0])
    with pytest.raises(ValueError, match="at least 3 points"):
        independence_test(gaussian[:2])
    bad = gaussian.copy()
    bad[5, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        independence_test(bad)
    with pytest.raises(ValueError, match="differ in length"):
        mutual_information(np.ones(3), np.ones(4))


@pytest.mark.parametrize(
    ("x", "y", "kwargs", "match"),
    [
        ([1.0, np.nan, 3.0], [0.0, 1.0, 2.0], {}, "x holds NaN"),
        ([1.0, 2.0, 3.0], [0.0, np.inf, 2.0], {}, "y holds NaN or infinite"),
        ([], [], {}, "x is empty"),
        ([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], {"n_bins": 0}, "invalid n_bins=0"),
        ([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], {"n_bins": 1}, "invalid n_bins=1"),
        ([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], {"n_bins": 2.5}, "invalid n_bins=2.5"),
    ],
)
def test_mutual_information_bad_input(x, y, kwargs, match):
    # NaN was binned silently, n_bins=0 / empty input gave numpy errors, n_bins=1 returned 0
    with pytest.raises(ValueError, match=rf"mutual_information: {match}"):
        mutual_information(x, y, **kwargs)


def test_mutual_information_and_test_share_checks():
    # the same data are refused by both, for the same reason
    bad = np.random.default_rng(0).normal(size=(20, 2))
    bad[4, 1] = np.inf
    for call in (lambda: independence_test(bad), lambda: mutual_information(*bad.T)):
        with pytest.raises(ValueError, match="NaN or infinite"):
            call()
    for call in (lambda: independence_test(np.ones((5, 2)), n_bins=1),
                 lambda: mutual_information(np.ones(5), np.ones(5), n_bins=1)):
        with pytest.raises(ValueError, match="invalid n_bins=1"):
            call()


def test_complex_input_is_refused_not_cast():
    # casting to float64 kept only the real part (a ComplexWarning), and the dependence of
    # z = 1j * x + noise on x went unseen
    rng = np.random.default_rng(0)
    x = rng.normal(size=100)
    z = 1j * x + 0.1 * rng.normal(size=100)
    for call in (lambda: independence_test(np.c_[z, x], 19, random_state=0),
                 lambda: mutual_information(z, x), lambda: mutual_information(x, z)):
        with pytest.raises(ValueError, match="Complex data not supported"):
            call()


@pytest.mark.parametrize("argument", ["x", "y"])
def test_non_numeric_input_names_the_argument(argument):
    values = {"x": np.arange(2.0), "y": np.arange(2.0), argument: np.array(["a", "b"])}
    with pytest.raises(ValueError, match=f"mutual_information: {argument} must hold real"):
        mutual_information(**values)
    with pytest.raises(ValueError, match="independence_test: scores must hold real"):
        independence_test(np.array([["a", "b"]] * 4))
