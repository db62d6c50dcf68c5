"""The MDD paper's toy data sets and the noise model in :mod:`dkpca.datasets`."""

import numpy as np
import pytest

from dkpca.datasets import (
    RING_RADIUS,
    SEMICIRCLE_RADIUS,
    SQUARE_SIDE,
    add_noise,
    make_semicircles,
    make_square,
    make_two_rings,
)

# (maker, default n_samples, n_features, n_labels, sigma^2 of eq. (20) reported in Table I)
MAKERS = [
    (make_semicircles, 500, 2, 2, 1.13),
    (make_square, 2000, 2, 4, 0.13),
    (make_two_rings, 3000, 3, 2, 1.25),
]
IDS = ["semicircles", "square", "two_rings"]
MIN_SAMPLES = {make_semicircles: 2, make_square: 4, make_two_rings: 2}


def measured_snr(X_noisy, X_clean):
    return X_clean.var(axis=0).sum() / (X_noisy - X_clean).var(axis=0).sum()


def eq20(X):
    """The MDD paper's rule of thumb (20): 0.1 * d * mean of the per-feature variances."""
    return 0.1 * X.shape[1] * X.var(axis=0).mean()


def distance_to_curve(maker, X, labels):
    """Distance of each point to the ideal clean curve of its label."""
    if maker is make_semicircles:
        r = SEMICIRCLE_RADIUS
        centres = np.array([[0.0, 0.0], [r, r / 2]])[labels]
        dist = np.abs(np.linalg.norm(X - centres, axis=1) - r)
        # the right half of each circle: upper half for 0, lower half for 1
        wrong_half = np.where(labels == 0, X[:, 1] < -1e-12, X[:, 1] > r / 2 + 1e-12)
        return np.where(wrong_half, np.inf, dist)
    if maker is make_square:
        half = SQUARE_SIDE / 2
        # side k: bottom, right, top, left; distance to the closed segment
        axis = np.array([1, 0, 1, 0])[labels]  # the fixed coordinate
        value = np.array([-half, half, half, -half])[labels]
        rows = np.arange(len(X))
        fixed = np.abs(X[rows, axis] - value)
        free = np.maximum(np.abs(X[rows, 1 - axis]) - half, 0)
        return np.hypot(fixed, free)
    R = RING_RADIUS
    centres = np.array([[0.0, 0.0, 0.0], [R, 0.0, 0.0]])[labels]
    normal_axis = np.where(labels == 0, 2, 1)  # ring 0: z = 0, ring 1: y = 0
    off_plane = np.abs(X[np.arange(len(X)), normal_axis])
    in_plane = np.abs(np.sqrt(np.sum((X - centres) ** 2, axis=1) - off_plane**2) - R)
    return np.hypot(off_plane, in_plane)


@pytest.mark.parametrize(("maker", "n", "d", "n_labels", "paper"), MAKERS, ids=IDS)
def test_shapes_dtypes_and_labels(maker, n, d, n_labels, paper):
    X, X_clean, labels = maker(random_state=0)
    assert X.shape == X_clean.shape == (n, d)
    assert labels.shape == (n,)
    assert X.dtype == X_clean.dtype == np.float64
    assert np.issubdtype(labels.dtype, np.integer)
    counts = np.bincount(labels, minlength=n_labels)
    assert len(counts) == n_labels and counts.max() - counts.min() == 0
    # an odd size is split as evenly as possible
    _, _, labels = maker(n + 3, random_state=0)
    counts = np.bincount(labels, minlength=n_labels)
    assert counts.sum() == n + 3 and counts.max() - counts.min() <= 1


@pytest.mark.parametrize(("maker", "n", "d", "n_labels", "paper"), MAKERS, ids=IDS)
def test_clean_points_lie_on_the_curve(maker, n, d, n_labels, paper):
    X, X_clean, labels = maker(random_state=1)
    assert distance_to_curve(maker, X_clean, labels).max() < 1e-12
    # the noisy points do not
    assert np.median(distance_to_curve(maker, X, labels)) > 1e-3


def test_points_cover_the_curves():
    # uniform along each curve: the angle / position spans the whole curve evenly
    _, X, labels = make_semicircles(20000, random_state=0)
    upper = X[labels == 0]
    angles = np.arctan2(upper[:, 1], upper[:, 0])
    assert np.histogram(angles, bins=4, range=(0, np.pi))[0].min() > 0.22 * len(upper)
    _, X, labels = make_square(20000, random_state=0)
    right = X[labels == 1]
    np.testing.assert_allclose(right[:, 0], SQUARE_SIDE / 2)
    assert np.histogram(right[:, 1], bins=4)[0].min() > 0.22 * len(right)
    _, X, labels = make_two_rings(20000, random_state=0)
    ring = X[labels == 1] - [RING_RADIUS, 0, 0]
    angles = np.arctan2(ring[:, 2], ring[:, 0])
    assert np.histogram(angles, bins=4, range=(-np.pi, np.pi))[0].min() > 0.22 * len(ring)


@pytest.mark.parametrize(("maker", "n", "d", "n_labels", "paper"), MAKERS, ids=IDS)
@pytest.mark.parametrize("snr", [10.0, 2.5])
def test_measured_snr(maker, n, d, n_labels, paper, snr):
    X, X_clean, _ = maker(40000, snr=snr, random_state=2)
    assert abs(measured_snr(X, X_clean) / snr - 1) < 0.03
    # isotropic noise: every feature gets the same variance
    per_feature = (X - X_clean).var(axis=0)
    np.testing.assert_allclose(per_feature, per_feature.mean(), rtol=0.05)
    assert abs((X - X_clean).mean(axis=0)).max() < 0.05 * np.sqrt(per_feature.mean())


@pytest.mark.parametrize(("maker", "n", "d", "n_labels", "paper"), MAKERS, ids=IDS)
def test_eq20_matches_the_paper(maker, n, d, n_labels, paper):
    # at the paper's N and SNR = 10, for several draws
    values = [eq20(maker(random_state=seed)[0]) for seed in range(5)]
    for value in values:
        assert abs(value / paper - 1) < 0.15, (values, paper)


@pytest.mark.parametrize(("maker", "n", "d", "n_labels", "paper"), MAKERS, ids=IDS)
def test_reproducible_with_a_seed(maker, n, d, n_labels, paper):
    first, second = maker(random_state=3), maker(random_state=3)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    other = maker(random_state=4)
    assert not np.allclose(first[0], other[0])
    assert not np.allclose(first[1], other[1])
    # a Generator is accepted and advanced
    rng = np.random.default_rng(5)
    assert not np.allclose(maker(random_state=rng)[0], maker(random_state=rng)[0])


@pytest.mark.parametrize(("maker", "n", "d", "n_labels", "paper"), MAKERS, ids=IDS)
@pytest.mark.parametrize("snr", [None, np.inf])
def test_no_noise(maker, n, d, n_labels, paper, snr):
    X, X_clean, _ = maker(snr=snr, random_state=6)
    np.testing.assert_array_equal(X, X_clean)
    assert X is not X_clean and not np.shares_memory(X, X_clean)
    # the clean pattern does not depend on the noise level
    np.testing.assert_array_equal(X_clean, maker(snr=10.0, random_state=6)[1])


@pytest.mark.parametrize(("maker", "n", "d", "n_labels", "paper"), MAKERS, ids=IDS)
def test_bad_arguments(maker, n, d, n_labels, paper):
    minimum = MIN_SAMPLES[maker]
    assert maker(minimum, random_state=0)[0].shape == (minimum, d)
    for bad in (minimum - 1, 0, -5, 2.5 * minimum, True, "100"):
        with pytest.raises(ValueError, match="n_samples"):
            maker(bad)
    for bad in (0, 0.0, -1.0, -np.inf, np.nan, "ten", False):
        with pytest.raises(ValueError, match="snr"):
            maker(snr=bad)


def test_add_noise_preserves_shape_and_input():
    X = np.random.default_rng(0).standard_normal((300, 4)) * [1.0, 2.0, 3.0, 0.0]
    original = X.copy()
    X_noisy = add_noise(X, snr=5.0, random_state=0)
    assert X_noisy.shape == X.shape and X_noisy.dtype == np.float64
    np.testing.assert_array_equal(X, original)
    assert not np.shares_memory(X, X_noisy)
    assert not np.allclose(X_noisy, X)
    # isotropic: the constant column gets noise too
    assert X_noisy[:, 3].std() > 0
    np.testing.assert_array_equal(X_noisy, add_noise(X, snr=5.0, random_state=0))
    # integer input and lists are accepted
    ints = np.arange(20).reshape(10, 2)
    assert add_noise(ints, random_state=0).dtype == np.float64
    np.testing.assert_array_equal(ints, np.arange(20).reshape(10, 2))
    assert add_noise(ints.tolist(), random_state=0).shape == (10, 2)


def test_add_noise_snr_definition():
    # per-feature noise variance = sum_j var_j / (d * snr), whatever the feature scales
    X = np.random.default_rng(1).standard_normal((50000, 3)) * [1.0, 3.0, 0.5]
    X_noisy = add_noise(X, snr=8.0, random_state=1)
    expected = X.var(axis=0).sum() / (3 * 8.0)
    np.testing.assert_allclose((X_noisy - X).var(axis=0), expected, rtol=0.03)
    assert abs(measured_snr(X_noisy, X) / 8.0 - 1) < 0.02


@pytest.mark.parametrize("snr", [None, np.inf])
def test_add_noise_without_noise(snr):
    X = np.arange(12.0).reshape(4, 3)
    X_noisy = add_noise(X, snr=snr)
    np.testing.assert_array_equal(X_noisy, X)
    assert not np.shares_memory(X, X_noisy)


def test_add_noise_bad_arguments():
    X = np.ones((5, 2))
    for bad in (0, -1.0, np.nan, "x"):
        with pytest.raises(ValueError, match="snr"):
            add_noise(X, snr=bad)
    for bad in (np.ones(5), np.ones((0, 2)), np.ones((2, 2, 2)), [[1.0, np.nan]]):
        with pytest.raises(ValueError, match="X_clean"):
            add_noise(bad)
