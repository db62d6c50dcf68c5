"""The MDD paper's toy data sets and the noise model in :mod:`dkpca.datasets`."""

import numpy as np
import pytest

from dkpca.datasets import (
    RING_RADIUS,
    SEMICIRCLE_RADIUS,
    SQUARE_SIDE,
    add_noise,
    make_rings,
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


# --- The LOO paper's simulations: make_signal_in_noise, make_unbalanced_semicircles ------------

from dkpca.datasets import (
    UNBALANCED_CLUSTER_NOISE,
    make_signal_in_noise,
    make_unbalanced_semicircles,
)


def test_signal_in_noise_shapes_and_directions():
    X, U = make_signal_in_noise(random_state=0)
    assert X.shape == (50, 2000) and U.shape == (4, 2000)
    assert X.dtype == U.dtype == np.float64
    np.testing.assert_allclose(U @ U.T, np.eye(4), atol=1e-12)
    # random directions, not coordinate axes
    assert np.abs(U).max() < 0.2
    X, U = make_signal_in_noise(7, 3, strengths=(1.0, 2.0, 0.5), random_state=0)
    assert X.shape == (7, 3) and U.shape == (3, 3)
    np.testing.assert_allclose(U @ U.T, np.eye(3), atol=1e-12)


def test_signal_in_noise_variances():
    strengths, noise = (1.4, 1.2, 1.0, 0.8), 0.2
    X, U = make_signal_in_noise(20000, 60, strengths=strengths, noise=noise, random_state=1)
    scores = X @ U.T
    # strengths are standard deviations: Var along u_k = s_k^2 + sigma^2
    np.testing.assert_allclose(scores.var(axis=0), np.square(strengths) + noise**2, rtol=0.04)
    assert np.abs(scores.mean(axis=0)).max() < 0.05
    # independent signals: uncorrelated scores
    corr = np.corrcoef(scores, rowvar=False)
    assert np.abs(corr - np.eye(4)).max() < 0.04
    # off the signal subspace only the noise is left, isotropic with variance sigma^2
    residual = X - scores @ U
    assert abs(residual.var(axis=0).sum() / (60 - 4) / noise**2 - 1) < 0.02
    # ... along every direction: fixed random directions orthogonal to the u_k
    G = np.random.default_rng(0).standard_normal((60, 10))
    W = np.linalg.qr(G - U.T @ (U @ G))[0]
    np.testing.assert_allclose(np.abs(U @ W).max(), 0, atol=1e-12)
    np.testing.assert_allclose((X @ W).var(axis=0), noise**2, rtol=0.06)


def test_signal_in_noise_without_noise():
    X, U = make_signal_in_noise(30, 100, noise=0.0, random_state=2)
    assert np.linalg.matrix_rank(X) == 4
    np.testing.assert_allclose(X @ U.T @ U, X, atol=1e-12)


def test_signal_in_noise_reproducible():
    first, second = make_signal_in_noise(random_state=3), make_signal_in_noise(random_state=3)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    other = make_signal_in_noise(random_state=4)
    assert not np.allclose(first[0], other[0]) and not np.allclose(first[1], other[1])
    rng = np.random.default_rng(5)
    assert not np.allclose(make_signal_in_noise(random_state=rng)[1],
                           make_signal_in_noise(random_state=rng)[1])


def test_signal_in_noise_bad_arguments():
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError, match="n_samples"):
            make_signal_in_noise(bad)
    for bad in (3, 0, 2.5, False):
        with pytest.raises(ValueError, match="n_features"):
            make_signal_in_noise(10, bad)
    assert make_signal_in_noise(10, 4)[0].shape == (10, 4)
    for bad in ((), (1.0, -0.5), (1.0, np.nan), [[1.0, 2.0]], ("a",), None):
        with pytest.raises(ValueError, match="strengths"):
            make_signal_in_noise(strengths=bad)
    for bad in (-0.1, np.inf, np.nan, "x", True):
        with pytest.raises(ValueError, match="noise"):
            make_signal_in_noise(noise=bad)


def signal_plane(X):
    """The noise-free data ``X`` (rank 2) in coordinates of its own 2-D row space."""
    V = np.linalg.svd(X, full_matrices=False)[2][:2]
    return X @ V.T


def circle_fit(P):
    """Least-squares circle through the 2-D points ``P``: centre, radius, max residual."""
    A = np.c_[2 * P, np.ones(len(P))]
    (a, b, c), *_ = np.linalg.lstsq(A, (P**2).sum(axis=1), rcond=None)
    radius = np.sqrt(c + a**2 + b**2)
    return np.array([a, b]), radius, np.abs(np.linalg.norm(P - [a, b], axis=1) - radius).max()


def test_unbalanced_semicircles_shapes_and_balance():
    X, t = make_unbalanced_semicircles(random_state=0)
    assert X.shape == (500, 1000) and t.shape == (500,)
    assert X.dtype == np.float64 and np.issubdtype(t.dtype, np.integer)
    assert set(np.unique(t)) == {0, 1}
    for p0 in (0.6, 0.3, 0.9):
        _, t = make_unbalanced_semicircles(5000, 2, p0=p0, random_state=1)
        assert abs(np.mean(t == 0) - p0) < 0.03
    # binomial counts: they vary between draws
    counts = {int(np.sum(make_unbalanced_semicircles(200, 2, random_state=s)[1])) for s in range(5)}
    assert len(counts) > 1


def test_unbalanced_semicircles_geometry():
    X, t = make_unbalanced_semicircles(2000, 50, snr=None, random_state=2)
    assert np.linalg.matrix_rank(X) == 2
    # the signal plane is in general position: no coordinate carries much of it
    assert X.var(axis=0).max() < 0.3 * X.var(axis=0).sum()
    P = signal_plane(X)
    # cluster 0 lies exactly on a unit circle, cluster 1 only approximately (its noise)
    centre0, radius0, residual0 = circle_fit(P[t == 0])
    centre1, radius1, residual1 = circle_fit(P[t == 1])
    assert abs(radius0 - 1) < 1e-9 and residual0 < 1e-9
    assert abs(radius1 - 1) < 0.05 and residual1 > UNBALANCED_CLUSTER_NOISE
    # the make_moons layout: centres (0, 0) and (1, 1/2), symmetric about the origin
    # (the noise-free centre exactly, the noisy one as far as a circle fit to a noisy arc allows)
    assert abs(np.linalg.norm(centre0) - np.hypot(0.5, 0.25)) < 1e-9
    assert np.linalg.norm(centre0 + centre1) < 0.15
    # the noise on cluster 1: radial residuals of about UNBALANCED_CLUSTER_NOISE
    radial = np.linalg.norm(P[t == 1] - centre1, axis=1) - radius1
    assert abs(radial.std() / UNBALANCED_CLUSTER_NOISE - 1) < 0.1


def test_unbalanced_semicircles_interleave():
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier

    X, t = make_unbalanced_semicircles(2000, 100, snr=np.inf, random_state=3)
    P = signal_plane(X)
    # no line separates the clusters ...
    assert LogisticRegression().fit(P, t).score(P, t) < 0.95
    # ... but a non-linear rule does, on held-out points
    knn = KNeighborsClassifier(5).fit(P[:1000], t[:1000])
    assert knn.score(P[1000:], t[1000:]) > 0.95


@pytest.mark.parametrize("snr", [10.0, 60.0])
def test_unbalanced_semicircles_snr(snr):
    X_clean, t = make_unbalanced_semicircles(500, 1000, snr=None, random_state=4)
    X, t_noisy = make_unbalanced_semicircles(500, 1000, snr=snr, random_state=4)
    np.testing.assert_array_equal(t, t_noisy)
    noise = X - X_clean
    # per-dimension SNR: (total 2-D signal variance / 2) / per-dimension noise variance
    signal_per_direction = X_clean.var(axis=0).sum() / 2
    per_feature = noise.var(axis=0)
    assert abs(signal_per_direction / per_feature.mean() / snr - 1) < 0.02
    np.testing.assert_allclose(per_feature, per_feature.mean(), rtol=0.3)
    assert abs(noise.mean()) < 0.01 * np.sqrt(per_feature.mean())


def test_unbalanced_semicircles_reproducible():
    first = make_unbalanced_semicircles(random_state=5)
    second = make_unbalanced_semicircles(random_state=5)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    other = make_unbalanced_semicircles(random_state=6)
    assert not np.allclose(first[0], other[0])
    rng = np.random.default_rng(7)
    assert not np.allclose(make_unbalanced_semicircles(random_state=rng)[0],
                           make_unbalanced_semicircles(random_state=rng)[0])


def test_unbalanced_semicircles_bad_arguments():
    assert make_unbalanced_semicircles(2, 2, random_state=0)[0].shape == (2, 2)
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="n_samples"):
            make_unbalanced_semicircles(bad)
    for bad in (1, 0, 3.0, False):
        with pytest.raises(ValueError, match="n_features"):
            make_unbalanced_semicircles(10, bad)
    for bad in (0, -1.0, -np.inf, np.nan, "ten", False):
        with pytest.raises(ValueError, match="snr"):
            make_unbalanced_semicircles(snr=bad)
    for bad in (0, 0.0, 1, 1.0, -0.2, 1.5, np.nan, "half", True):
        with pytest.raises(ValueError, match="p0"):
            make_unbalanced_semicircles(p0=bad)


# --- concentric rings (the demo's data) --------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_rings": 2.5}, "n_rings must be an integer >= 1, got 2.5"),
        ({"n_rings": True}, "n_rings must be an integer"),
        ({"n_rings": 0}, "n_rings must be an integer >= 1"),
        ({"n_samples": 90.0}, "n_samples must be an integer >= 1, got 90.0"),
        ({"n_samples": True}, "n_samples must be an integer"),
        ({"n_samples": 2}, "n_samples=2 is fewer than n_rings=3"),
        ({"noise": np.nan}, "noise must be a finite number"),
        ({"noise": np.inf}, "noise must be a finite number"),
        ({"noise": -0.1}, "noise must be a finite number in"),
        ({"noise": "0.1x"}, "noise must be a finite number"),
        ({"n_noise_dims": 1.0}, "n_noise_dims must be an integer >= 0"),
        ({"n_noise_dims": -1}, "n_noise_dims must be an integer >= 0"),
    ],
)
def test_make_rings_bad_arguments(kwargs, match):
    # these gave float labels and radii, NaN data or numpy's TypeError
    kwargs = {"n_samples": 30, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_rings(**kwargs)


def test_make_rings_accepts_numpy_scalars():
    X, labels = make_rings(np.int64(30), n_rings=np.int32(3), noise=np.float32(0.0),
                           n_noise_dims=np.int64(1), random_state=0)
    assert X.shape == (30, 3) and labels.dtype.kind == "i"
    np.testing.assert_array_equal(np.bincount(labels), [10, 10, 10])
    np.testing.assert_allclose(np.hypot(X[:, 0], X[:, 1]), labels + 1.0)


@pytest.mark.parametrize("call", [
    lambda: make_square(8, snr="10"),
    lambda: make_semicircles(8, snr=b"10"),
    lambda: make_rings(6, noise="0.5"),
    lambda: make_unbalanced_semicircles(10, 5, p0="0.5"),
    lambda: make_unbalanced_semicircles(10, 5, snr=np.str_("10")),
    lambda: make_signal_in_noise(5, 10, noise="0.2"),
    lambda: make_signal_in_noise(5, 10, strengths=("1.0", "2")),
    lambda: make_signal_in_noise(5, 10, strengths=[1.0, "2"]),
    lambda: add_noise(np.ones((3, 2)), snr="10"),
], ids=["square-snr", "semicircles-bytes", "rings-noise", "unbalanced-p0", "unbalanced-snr",
        "signal-noise", "signal-strengths", "signal-mixed-strengths", "add_noise-snr"])
def test_numeric_strings_are_refused(call):
    # float("10") parses them; a real-valued parameter takes numbers, as n_samples="100" is
    # refused
    with pytest.raises(ValueError, match="not a string|not strings"):
        call()


def test_add_noise_refuses_complex_data():
    # the float64 copy kept only the real part (a ComplexWarning)
    with pytest.raises(ValueError, match="Complex data not supported: X_clean"):
        add_noise(np.array([[1 + 5j, 2], [3, 4j]]), snr=None)
