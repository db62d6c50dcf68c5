"""Tests for :class:`dkpca.generalization.renormalize.Renormalizer`."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from scipy import stats
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from dkpca.generalization.renormalize import Renormalizer, histogram_equalize


def bimodal(rng: np.random.Generator, n: int, q: int = 3) -> np.ndarray:
    """Skewed, two-cluster training projections (far from Gaussian)."""
    labels = rng.random((n, q)) < 0.3
    return np.where(labels, 3.0, -1.0) + rng.normal(scale=0.5, size=(n, q))


@pytest.fixture
def train() -> np.ndarray:
    return bimodal(np.random.default_rng(0), 400)


# --- histogram -------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [400, 150, 1000])
def test_histogram_preserves_ranks(train, m, global_random_seed):
    test = np.random.default_rng(global_random_seed).normal(scale=0.3, size=(m, 3))
    out = Renormalizer().fit(train).transform(test)
    assert out.shape == (m, 3)
    for d in range(3):
        np.testing.assert_array_equal(stats.rankdata(out[:, d]), stats.rankdata(test[:, d]))


def test_histogram_same_size_is_exact(train):
    test = np.random.default_rng(1).normal(scale=0.3, size=train.shape)
    out = Renormalizer("histogram").fit(train).transform(test)
    np.testing.assert_array_equal(np.sort(out, axis=0), np.sort(train, axis=0))


def test_histogram_fit_transform_returns_training(train):
    np.testing.assert_array_equal(Renormalizer().fit_transform(train), train)


@pytest.mark.parametrize("m", [120, 3000])
def test_histogram_other_sizes_match_distribution(train, m):
    test = np.random.default_rng(2).normal(scale=0.3, size=(m, 3))
    out = Renormalizer().fit(train).transform(test)
    levels = np.linspace(0.05, 0.95, 19)
    for d in range(3):
        assert stats.ks_2samp(out[:, d], train[:, d]).statistic < 0.05
        np.testing.assert_allclose(
            np.quantile(out[:, d], levels), np.quantile(train[:, d], levels), atol=0.15
        )
        # PCHIP stays within the training range and keeps the end points
        assert out[:, d].min() == pytest.approx(train[:, d].min(), abs=1e-12)
        assert out[:, d].max() == pytest.approx(train[:, d].max(), abs=1e-12)


def test_histogram_ties_stable():
    train = np.array([[0.0], [1.0], [2.0], [3.0]])
    out = histogram_equalize(train, np.array([[5.0], [5.0], [1.0], [5.0]]))
    np.testing.assert_array_equal(out.ravel(), [1.0, 2.0, 0.0, 3.0])


def test_histogram_ignores_loo(train):
    loo = 0.5 * train
    a = Renormalizer().fit(train, loo_scores=loo).transform(loo)
    np.testing.assert_array_equal(a, Renormalizer().fit(train).transform(loo))


# --- affine ----------------------------------------------------------------------------------


def test_affine_scale_is_std_ratio(train):
    loo = np.random.default_rng(3).normal(scale=0.7, size=(300, 3))
    r = Renormalizer("affine").fit(train, loo_scores=loo)
    np.testing.assert_allclose(r.scale_, train.std(axis=0, ddof=1) / loo.std(axis=0, ddof=1))
    test = np.random.default_rng(4).normal(size=(5, 3))
    np.testing.assert_allclose(r.transform(test), test * r.scale_)


# --- quantile --------------------------------------------------------------------------------


@pytest.fixture
def quantile(train) -> tuple[Renormalizer, np.ndarray]:
    loo = 0.6 * train + np.random.default_rng(5).normal(scale=0.2, size=train.shape)
    return Renormalizer("quantile").fit(train, loo_scores=loo), loo


def test_quantile_maps_loo_onto_training(train, quantile):
    r, loo = quantile
    np.testing.assert_allclose(np.sort(r.transform(loo), axis=0), np.sort(train, axis=0),
                               atol=1e-12)


def test_quantile_other_loo_size(train):
    loo = 0.5 * bimodal(np.random.default_rng(6), 250)
    out = Renormalizer("quantile").fit(train, loo_scores=loo).transform(loo)
    for d in range(3):
        assert stats.ks_2samp(out[:, d], train[:, d]).statistic < 0.05


def test_quantile_monotone_and_extrapolates(quantile):
    r, loo = quantile
    grid = np.linspace(loo.min() - 5.0, loo.max() + 5.0, 2001)
    out = r.transform(np.tile(grid[:, None], (1, 3)))
    assert np.all(np.diff(out, axis=0) >= 0)
    for d in range(3):
        x = r.knots_[d][0]
        outside = (grid < x[0]) | (grid > x[-1])
        assert np.all(np.diff(out[outside, d][grid[outside] < x[0]]) > 0)
        assert np.all(np.diff(out[outside, d][grid[outside] > x[-1]]) > 0)
        # linear with the affine slope beyond the LOO range
        far = grid > x[-1]
        np.testing.assert_allclose(np.diff(out[far, d]) / np.diff(grid[far]), r.scale_[d])


def test_quantile_one_point_at_a_time(quantile):
    r = quantile[0]
    test = np.random.default_rng(7).normal(scale=2.0, size=(50, 3))
    batch = r.transform(test)
    single = np.vstack([r.transform(row[None, :]) for row in test])
    np.testing.assert_array_equal(single, batch)


def test_quantile_ties_in_loo():
    train = np.array([[0.0], [1.0], [2.0], [3.0]])
    loo = np.array([[0.0], [1.0], [1.0], [2.0]])
    r = Renormalizer("quantile").fit(train, loo_scores=loo)
    out = r.transform(np.array([[0.0], [1.0], [2.0]]))
    np.testing.assert_allclose(out.ravel(), [0.0, 1.5, 3.0])
    assert np.all(np.diff(r.knots_[0][0]) > 0)


# --- validation and scikit-learn API ---------------------------------------------------------


@pytest.mark.parametrize("method", ["affine", "quantile"])
def test_needs_loo(train, method):
    with pytest.raises(ValueError, match="needs loo_scores"):
        Renormalizer(method).fit(train)


def test_shape_mismatch(train):
    with pytest.raises(ValueError, match=r"X has 2 features.*expecting 3.*loo_scores"):
        Renormalizer("affine").fit(train, loo_scores=np.ones((10, 2)))
    r = Renormalizer().fit(train)
    with pytest.raises(ValueError, match=r"X has 4 features.*expecting 3.*scores"):
        r.transform(np.ones((5, 4)))
    with pytest.raises(ValueError, match="2-D"):
        r.transform(np.ones(3))


def test_nan_and_degenerate(train):
    bad = train.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        Renormalizer().fit(bad)
    with pytest.raises(ValueError, match="NaN"):
        Renormalizer().fit(train).transform(bad)
    with pytest.raises(ValueError, match="NaN"):
        Renormalizer("quantile").fit(train, loo_scores=bad)
    with pytest.raises(ValueError, match="constant"):
        Renormalizer("affine").fit(train, loo_scores=np.ones((10, 3)))
    with pytest.raises(ValueError, match="at least 2"):
        Renormalizer().fit(train[:1])


def test_invalid_method(train):
    with pytest.raises(ValueError, match="invalid method"):
        Renormalizer("spline").fit(train)


def test_not_fitted():
    with pytest.raises(NotFittedError):
        Renormalizer().transform(np.ones((3, 2)))


def test_params_and_clone(train):
    r = Renormalizer("quantile")
    assert r.get_params() == {"method": "quantile"}
    c = clone(r.fit(train, loo_scores=0.5 * train))
    assert c.get_params() == {"method": "quantile"}
    assert not hasattr(c, "knots_")
    assert r.set_params(method="affine").method == "affine"


def test_dask_input(train):
    loo = 0.5 * train
    r = Renormalizer("quantile").fit(da.from_array(train, chunks=100), loo_scores=loo)
    out = r.transform(da.from_array(loo, chunks=50))
    np.testing.assert_allclose(np.sort(out, axis=0), np.sort(train, axis=0), atol=1e-12)


# --- small batches, dtypes, refits -----------------------------------------------------------


@pytest.mark.parametrize("value", [-5.0, 0.0, 5.0])
def test_histogram_refuses_single_point(train, value):
    # one point used to get the training minimum whatever its value
    r = Renormalizer().fit(train)
    with pytest.raises(ValueError, match=r"at least 2 points.*got 1.*method='quantile'"):
        r.transform(np.full((1, 3), value))
    with pytest.raises(ValueError, match="at least 2 points"):
        histogram_equalize(r.train_sorted_, np.zeros((1, 3)))


def test_histogram_two_points_get_training_extremes(train):
    # the smallest batch Algorithm 1 defines: its ranks 1 and 2 sit at linspace(1, n, 2)
    out = Renormalizer().fit(train).transform(np.array([[1.0, -1.0, 0.0], [0.0, 1.0, 2.0]]))
    lo, hi = train.min(axis=0), train.max(axis=0)
    np.testing.assert_allclose(out, [[hi[0], lo[1], lo[2]], [lo[0], hi[1], hi[2]]])


@pytest.mark.parametrize("method", ["histogram", "affine", "quantile"])
def test_dtype_follows_scores(train, method):
    loo = 0.6 * train + np.random.default_rng(8).normal(scale=0.2, size=train.shape)
    test = np.random.default_rng(9).normal(size=(50, 3))
    r64 = Renormalizer(method).fit(train, loo_scores=loo)
    r32 = Renormalizer(method).fit(train.astype(np.float32), loo_scores=loo.astype(np.float32))
    expected = r64.transform(test)
    assert expected.dtype == np.float64
    for r in (r64, r32):
        out = r.transform(test.astype(np.float32))
        assert out.dtype == np.float32
        # computed in float64: only the float32 input and output roundings differ
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * np.abs(train).max())


def test_refit_with_other_method_clears_state(train):
    loo = 0.5 * train
    r = Renormalizer("quantile").fit(train, loo_scores=loo)
    r.set_params(method="histogram").fit(train[:, :1])
    assert r.n_features_in_ == 1
    assert not hasattr(r, "scale_") and not hasattr(r, "knots_")
    assert vars(r).keys() == vars(Renormalizer().fit(train[:, :1])).keys()
    r.set_params(method="affine").fit(train[:, :2], loo_scores=loo[:, :2])
    assert r.scale_.shape == (2,) and not hasattr(r, "knots_")


# --- feature names ---------------------------------------------------------------------------


def test_feature_names_out_in_a_pipeline():
    """One output per input component: the names are those of the step before (sklearn's
    OneToOneFeatureMixin), so a pipeline ending in a Renormalizer names its outputs."""
    from sklearn.pipeline import make_pipeline

    import dkpca

    X = np.random.default_rng(0).normal(size=(30, 4))
    pipe = make_pipeline(dkpca.KernelPCA(2, random_state=0), Renormalizer()).fit(X)
    np.testing.assert_array_equal(pipe.get_feature_names_out(),
                                  pipe[0].get_feature_names_out())
    np.testing.assert_array_equal(Renormalizer().fit(X).get_feature_names_out(),
                                  [f"x{i}" for i in range(4)])


def test_dataframe_column_names_are_kept_and_checked():
    from sklearn.utils.estimator_checks import check_dataframe_column_names_consistency

    check_dataframe_column_names_consistency("Renormalizer", Renormalizer())


@pytest.mark.parametrize("method", ["histogram", "affine", "quantile"])
def test_pandas_output_matches_the_array_output(train, method):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(train[:, :2], columns=["pc0", "pc1"])
    loo = 0.5 * frame
    model = Renormalizer(method).set_output(transform="pandas").fit(frame, loo_scores=loo)
    assert model.feature_names_in_.tolist() == ["pc0", "pc1"]
    out = model.transform(loo.astype(np.float32))
    assert isinstance(out, pd.DataFrame) and out.columns.tolist() == ["pc0", "pc1"]
    assert (out.dtypes == np.float32).all()  # float32 stays float32
    expected = Renormalizer(method).fit(train[:, :2], loo_scores=0.5 * train[:, :2])
    np.testing.assert_array_equal(out.to_numpy(),
                                  expected.transform((0.5 * train[:, :2]).astype(np.float32)))
    with pytest.raises(ValueError, match="same order as they were in fit"):
        model.transform(loo[["pc1", "pc0"]])
