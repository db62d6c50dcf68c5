"""Approximate linear PCA (PCA(solver="sketch"), tutorial Alg. 4) against exact PCA."""

import dask.array as da
import numpy as np
import pytest

from dkpca import PCA


@pytest.fixture(scope="module")
def low_rank() -> np.ndarray:
    """Five strong directions in 600 dimensions, plus isotropic noise (2000 samples)."""
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(600, 5)))[0]
    signal = (rng.normal(size=(2000, 5)) * [10, 8, 6, 4, 3]) @ basis.T
    return signal + 0.3 * rng.normal(size=(2000, 600)) + 5.0


@pytest.fixture(scope="module")
def exact(low_rank):
    return PCA(5).fit(low_rank)


def _similarity(a, b):
    return np.abs(np.sum(a.components_ * b.components_, axis=1))


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
def test_error_falls_as_q_grows(sketch, low_rank, exact):
    def error(q):
        return np.mean([
            np.abs(PCA(5, solver="sketch", sketch=sketch, sketch_dim=q, random_state=s)
                   .fit(low_rank).explained_variance_ / exact.explained_variance_ - 1).mean()
            for s in range(8)
        ])

    assert error(25) > 2 * error(400)  # the error goes as 1/sqrt(q): 4x
    approx = PCA(5, solver="sketch", sketch=sketch, sketch_dim=400, random_state=0).fit(low_rank)
    assert np.all(_similarity(approx, exact) > 0.95)
    np.testing.assert_allclose(approx.mean_, exact.mean_, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(approx.components_, axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
def test_refinement_is_exact_on_the_found_subspace(sketch, low_rank, exact):
    refined = PCA(5, solver="sketch", sketch=sketch, sketch_dim=100, refine=True,
                  random_state=0).fit(low_rank)
    assert np.all(_similarity(refined, exact) > 0.999)
    np.testing.assert_allclose(refined.explained_variance_, exact.explained_variance_,
                               rtol=2e-3)
    assert np.all(refined.explained_variance_ <= exact.explained_variance_ * (1 + 1e-10))
    np.testing.assert_allclose(refined.components_ @ refined.components_.T, np.eye(5),
                               atol=1e-10)
    np.testing.assert_allclose(refined.explained_variance_ratio_.sum(),
                               exact.explained_variance_ratio_.sum(), rtol=2e-3)


def test_same_result_whatever_the_chunking(low_rank):
    a = PCA(3, solver="sketch", sketch_dim=50, random_state=4).fit(low_rank)
    b = PCA(3, solver="sketch", sketch_dim=50, random_state=4).fit(
        da.from_array(low_rank, chunks=(300, -1))
    )
    np.testing.assert_allclose(b.explained_variance_, a.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(b.components_, a.components_, atol=1e-10)
    assert isinstance(b.transform(da.from_array(low_rank[:10])), da.Array)


def test_bad_settings(low_rank):
    with pytest.raises(ValueError, match="n_components=30 exceeds sketch_dim=20"):
        PCA(30, solver="sketch", sketch_dim=20).fit(low_rank)
    with pytest.raises(ValueError, match="NaN or infinity"):
        bad = low_rank.copy()
        bad[3, 3] = np.nan
        PCA(3, solver="sketch", sketch_dim=20).fit(da.from_array(bad, chunks=500))


@pytest.mark.parametrize("refine", [False, True])
@pytest.mark.parametrize(
    "offset, rank, shape", [(0.0, 0, (20, 5)), (1e3, 1, (50, 8)), (1e6, 2, (100, 30))]
)
def test_components_are_orthonormal_on_low_rank_data(offset, rank, shape, refine):
    """Rounding-noise eigenvalues of the sketch used to add near copies of the leading
    direction (max|W Wᵀ - I| up to 1); the rows must be orthonormal, as scikit-learn's are,
    and the directions past the rank carry no variance."""
    rng = np.random.default_rng(0)
    X = offset + 3.0 + rng.normal(size=(shape[0], rank)) @ rng.normal(size=(rank, shape[1]))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank 0: "the data do not vary", as documented
        model = PCA(3, solver="sketch", refine=refine, random_state=0).fit(X)
    W = model.components_
    np.testing.assert_allclose(W @ W.T, np.eye(3), atol=1e-8)
    np.testing.assert_allclose(model.explained_variance_[rank:], 0.0,
                               atol=1e-8 * np.var(X, axis=0, ddof=1).sum() + 1e-300)


@pytest.mark.parametrize("offset", [0.0, 1e7, 1e8])
def test_data_far_from_the_origin(offset):
    """Moments are taken around a training row: a shift of the data changes nothing, where
    raw sums minus n μ² once lost the whole variance (a "do not vary" warning, ratios 0)."""
    import warnings

    from sklearn.decomposition import PCA as SkPCA

    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 50)) * np.linspace(5, 0.5, 50)
    params = {"sketch_dim": 50, "refine": True, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = PCA(3, solver="sketch", **params).fit(X + offset)
    reference = PCA(3, solver="sketch", **params).fit(X)  # the same sketch, at the origin
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_,
                               rtol=1e-6)
    total = np.var(X, axis=0, ddof=1).sum()
    np.testing.assert_allclose(model.explained_variance_ratio_,
                               model.explained_variance_ / total, rtol=1e-6)
    np.testing.assert_allclose(model.mean_, X.mean(axis=0) + offset, rtol=1e-12, atol=1e-6)
    # refined Rayleigh–Ritz values cannot exceed the exact ones
    exact = SkPCA(3, svd_solver="full").fit(X).explained_variance_
    assert np.all(model.explained_variance_ <= exact * (1 + 1e-9))


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
@pytest.mark.parametrize("shape", [(50, 1), (5, 2), (200, 3), (300, 40)])
def test_unrefined_eigenvalues_never_exceed_the_exact_ones_in_partial_sums(sketch, shape):
    """The sketch's own eigenvalues overshoot (ratios summing to 2.08 at d = 1); the
    reported ones are Rayleigh quotients at orthonormal sample directions, bounded by Ky Fan."""
    X = np.random.default_rng(1).normal(size=shape) * np.linspace(3, 0.5, shape[1])
    exact = np.linalg.eigvalsh(np.cov(X, rowvar=False).reshape(shape[1], shape[1]))[::-1]
    width = min(shape[1], 5)
    for seed in range(6):
        model = PCA(width, solver="sketch", sketch=sketch, sketch_dim=20,
                    random_state=seed).fit(X)
        found = np.cumsum(model.explained_variance_)
        assert np.all(found <= np.cumsum(exact[:width]) * (1 + 1e-10))
        assert model.explained_variance_ratio_.sum() <= 1 + 1e-10
        assert np.all(np.diff(model.explained_variance_) <= 0)


def test_fraction_beyond_the_sketch_keeps_only_found_directions_and_warns():
    """A flat spectrum needs more directions than sketch_dim for 0.8 of the variance: the
    found ones are kept, with a warning naming sketch_dim, not padded with zero-variance
    directions up to min(n, d) (which gave 400 components, 200 of them without variance)."""
    X = np.random.default_rng(0).normal(size=(120, 300))
    with pytest.warns(UserWarning, match=r"sketch_dim=20 is too small") as caught:
        model = PCA(0.8, solver="sketch", sketch_dim=20, random_state=0).fit(X)
    reached = float(model.explained_variance_ratio_.sum())
    assert f"explain {reached:.3g}" in str(caught[0].message)
    assert reached <= 0.8
    assert 1 <= model.n_components_ <= 20
    assert np.all(model.explained_variance_ > 0)
    np.testing.assert_allclose(model.components_ @ model.components_.T,
                               np.eye(model.n_components_), atol=1e-10)
    assert model.transform(X).shape == (120, model.n_components_)


def test_fraction_within_the_sketch_keeps_the_fewest_found_components(low_rank):
    """When the sketch's directions reach the fraction, the fewest of them that exceed it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = PCA(0.5, solver="sketch", sketch_dim=100, random_state=0).fit(low_rank)
    ratios = np.cumsum(model.explained_variance_ratio_)
    assert ratios[-1] > 0.5
    assert model.n_components_ == 1 or ratios[-2] <= 0.5
