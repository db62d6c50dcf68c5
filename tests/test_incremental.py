"""``partial_fit``: any number of batches gives the fit on all their rows (issue 33).

Linear PCA's covariance solver and the Nyström and fixed-size kernel solvers keep the count,
mean and scatter of the rows (of ``k(x, L)`` for the kernel solvers), which merge exactly; the
references are ``fit`` on all the rows, with the same landmarks.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse
import zarr
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import dkpca
from dkpca import PCA, KernelPCA
from dkpca.moments import RowStatistics
from dkpca.options import SOLVERS, FixedSize, Nystrom
from dkpca.persistence import FORMAT_VERSION

RTOL = 1e-10


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=3.0, size=(4, 5))
    X = centres[rng.integers(4, size=600)] + rng.normal(size=(600, 5))
    return X + 100.0  # far from the origin: the statistics must not cancel


def _batches(X, count, lazy):
    parts = np.array_split(X, count)
    return [da.from_array(p, chunks=37) if lazy else p for p in parts]


def _assert_same_pca(incremental, whole):
    scale = whole.explained_variance_[0]
    np.testing.assert_allclose(incremental.explained_variance_, whole.explained_variance_,
                               rtol=0, atol=RTOL * scale)
    np.testing.assert_allclose(incremental.mean_, whole.mean_, rtol=RTOL)
    np.testing.assert_allclose(incremental.components_, whole.components_, atol=1e-8)
    assert incremental.n_samples_seen_ == whole.n_samples_seen_


def _assert_same_kernel_pca(incremental, whole, X):
    scale = whole.eigenvalues_[0]
    np.testing.assert_allclose(incremental.eigenvalues_, whole.eigenvalues_, rtol=0,
                               atol=RTOL * scale)
    np.testing.assert_allclose(incremental.explained_variance_ratio_,
                               whole.explained_variance_ratio_, atol=RTOL)
    ours, theirs = incremental.transform(X[:50]), whole.transform(X[:50])
    np.testing.assert_allclose(np.abs(ours), np.abs(theirs), atol=1e-8 * np.abs(theirs).max())
    assert incremental.n_samples_seen_ == whole.n_samples_seen_ == len(X)


@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("count", [1, 2, 10])
def test_pca_batches_equal_the_fit_on_all_rows(data, count, lazy):
    pca = PCA(3)
    for batch in _batches(data, count, lazy):
        assert pca.partial_fit(batch) is pca
    _assert_same_pca(pca, PCA(3).fit(data))
    assert pca.solver_ == "covariance" and pca.n_iter_ == 1


def test_pca_of_sparse_batches_equals_the_dense_fit():
    X = scipy.sparse.random(400, 12, density=0.2, format="csr", random_state=0)
    pca = PCA(4)
    for start in range(0, 400, 40):
        pca.partial_fit(X[start:start + 40])
    _assert_same_pca(pca, PCA(4).fit(X.toarray()))


def test_pca_keeps_the_first_batch_dtype_and_transforms_between_calls(data):
    X = data.astype(np.float32)
    pca = PCA(2).partial_fit(X[:100])
    first = pca.transform(X[:5])
    pca.partial_fit(X[100:].astype(np.float64))
    assert pca.components_.dtype == np.float32 and first.dtype == np.float32
    assert not np.allclose(pca.transform(X[:5]), first)  # the model moved with the rows
    np.testing.assert_allclose(pca.explained_variance_, PCA(2).fit(X).explained_variance_,
                               rtol=1e-6)


def test_pca_none_components_grow_with_the_rows_seen():
    X = np.random.default_rng(1).normal(size=(20, 8))
    pca = PCA().partial_fit(X[:5])
    assert pca.n_components_ == 5  # min(rows seen, features), as fit on those rows
    pca.partial_fit(X[5:])
    assert pca.n_components_ == 8
    _assert_same_pca(pca, PCA().fit(X))


@pytest.mark.parametrize("solver", ["nystrom", "fixed_size"])
@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("count", [1, 2, 10])
def test_kernel_pca_batches_equal_the_fit_with_the_same_landmarks(data, solver, count, lazy):
    kp = KernelPCA(4, solver=SOLVERS[solver](n_landmarks=60), gamma=0.05, random_state=0)
    for batch in _batches(data, count, lazy):
        assert kp.partial_fit(batch) is kp
    # fixed_size on given landmarks is the Nyström feature map on them
    whole = KernelPCA(4, solver=Nystrom(landmarks=kp.landmarks_), gamma=0.05).fit(data)
    _assert_same_kernel_pca(kp, whole, data)
    assert not hasattr(kp, "eigenvectors_")  # the rows are not kept


@pytest.mark.parametrize("sampling", ["uniform", "diagonal", "column_norm", "kmeans"])
def test_every_sampling_chooses_landmarks_in_the_first_batch(data, sampling):
    first, rest = data[:300], data[300:]
    kp = KernelPCA(3, solver=Nystrom(n_landmarks=40, sampling=sampling), kernel="poly",
                   degree=2, gamma=0.01, random_state=1)
    kp.partial_fit(first)
    # the first call is fit on the first batch, landmarks and all
    alone = KernelPCA(3, solver=Nystrom(n_landmarks=40, sampling=sampling), kernel="poly",
                      degree=2, gamma=0.01, random_state=1).fit(first)
    np.testing.assert_array_equal(kp.landmarks_, alone.landmarks_)
    _assert_same_kernel_pca(kp, alone, first)
    kp.partial_fit(rest)
    whole = KernelPCA(3, solver=Nystrom(landmarks=kp.landmarks_), kernel="poly", degree=2,
                      gamma=0.01).fit(data)
    _assert_same_kernel_pca(kp, whole, data)


def test_given_landmarks_are_used_as_they_are(data):
    landmarks = data[::20]
    kp = KernelPCA(2, solver=Nystrom(landmarks=landmarks)).partial_fit(data[:50])
    np.testing.assert_array_equal(kp.landmarks_, landmarks)
    with pytest.raises(ValueError, match=r"landmarks must be an \(m, 5\) array"):
        KernelPCA(2, solver=Nystrom(landmarks=landmarks[:, :3])).fit(data)
    # given landmarks are an option of the nystrom solver alone: no other solver takes them
    assert [name for name, options in SOLVERS.items()
            if "landmarks" in options().get_params()] == ["nystrom"]
    with pytest.raises(ValueError, match="n_components=4 exceeds the number of landmarks=3"):
        KernelPCA(4, solver=Nystrom(landmarks=landmarks[:3])).partial_fit(data)


def test_a_fitted_model_continues_and_a_refit_starts_again(data):
    kp = KernelPCA(3, solver=Nystrom(n_landmarks=50), random_state=0).fit(data[:400])
    assert kp.eigenvectors_.shape == (400, 3)
    kp.partial_fit(data[400:])
    assert not hasattr(kp, "eigenvectors_")  # an older fit's must not linger
    whole = KernelPCA(3, solver=Nystrom(landmarks=kp.landmarks_)).fit(data)
    _assert_same_kernel_pca(kp, whole, data)
    kp.fit(data[:100])
    assert kp.n_samples_seen_ == 100 and kp.eigenvectors_.shape == (100, 3)

    pca = PCA(2).fit(data[:300]).partial_fit(data[300:])
    _assert_same_pca(pca, PCA(2).fit(data))
    assert isinstance(pca.row_statistics_, RowStatistics)
    pca.set_params(solver="gram").fit(data[:4].T)
    assert pca.row_statistics_ is None  # gram keeps none: no stale statistics from before


@pytest.mark.parametrize("model, names", [
    (KernelPCA(2), "solver='auto' needs every row"),
    (KernelPCA(2, solver="exact"), "solver='exact'"),
    (KernelPCA(2, solver="randomized"), "solver='randomized'"),
    (KernelPCA(2, solver="sketch"), "solver='sketch'"),
    (KernelPCA(2, solver="icf"), "solver='icf'"),
    (KernelPCA(2, solver=Nystrom(method="extension")), r"Nystrom\(method='feature_map'\)"),
    (KernelPCA(2, solver="nystrom", kernel="precomputed"), "precomputed kernel"),
    (PCA(2, solver="gram"), "solver='gram'"),
    (PCA(2, solver="randomized"), "solver='randomized'"),
    (PCA(2, solver="sketch"), "solver='sketch'"),
])
def test_solvers_that_need_every_row_have_no_partial_fit(model, names):
    assert not hasattr(model, "partial_fit")  # what scikit-learn and dask-ml look at
    with pytest.raises(AttributeError, match=names) as err:
        model.partial_fit(np.ones((3, 2)))
    message = str(err.value)
    assert "\n" not in message
    assert ("solver='nystrom' or 'fixed_size'" in message or "covariance" in message
            or "feature_map" in message or "precomputed" in message)


def test_continuing_needs_the_statistics_and_the_same_features(data):
    gram = PCA(2).fit(data[:10].T)  # auto takes gram for wide data
    assert gram.solver_ == "gram"
    with pytest.raises(ValueError, match="fitted by solver='gram', which keeps no row"):
        gram.partial_fit(data[:10].T)
    pca = PCA(2).partial_fit(data)
    with pytest.raises(ValueError, match="X has 3 features, but PCA is expecting 5"):
        pca.partial_fit(data[:, :3])
    kp = KernelPCA(2, solver=Nystrom(n_landmarks=20)).partial_fit(data)
    with pytest.raises(ValueError, match="X has 4 features, but KernelPCA is expecting 5"):
        kp.partial_fit(data[:, :4])
    kp.row_statistics_ = None  # as a model saved in format 2 loads
    with pytest.raises(ValueError, match="keeps no row statistics"):
        kp.partial_fit(data)
    with pytest.raises(ValueError, match=r"keeps the 5 x 5 scatter .* above memory_budget=100"):
        PCA(2, memory_budget=100).partial_fit(data)
    with pytest.raises(ValueError, match="at least 2 samples"):
        PCA(2).partial_fit(data[:1])
    with pytest.raises(ValueError, match="NaN or infinity"):
        PCA(2).partial_fit(np.where(data > 104, np.nan, data))
    nan_batch = da.from_array(np.where(data > 104, np.nan, data), chunks=100)
    with pytest.raises(ValueError, match="NaN or infinity"):
        KernelPCA(2, solver=Nystrom(landmarks=data[:10])).partial_fit(nan_batch)


@pytest.mark.parametrize("make", [
    lambda: PCA(3),
    lambda: KernelPCA(3, solver=Nystrom(n_landmarks=50), random_state=0),
    lambda: KernelPCA(3, solver=FixedSize(n_landmarks=30), random_state=0),
], ids=["pca", "nystrom", "fixed_size"])
def test_a_saved_model_updated_with_new_rows_equals_the_fit_on_all(data, tmp_path, make):
    model = make().partial_fit(data[:350])
    dkpca.save(model, tmp_path / "m.zarr")
    meta = zarr.open_group(tmp_path / "m.zarr", mode="r").attrs["dkpca"]
    assert meta["format_version"] == FORMAT_VERSION and "row_statistics_" in meta["attributes"]
    loaded = dkpca.load(tmp_path / "m.zarr").partial_fit(data[350:])
    if isinstance(model, PCA):
        _assert_same_pca(loaded, PCA(3).fit(data))
    else:
        # fixed_size on given landmarks is the Nyström feature map on them
        whole = KernelPCA(3, solver=Nystrom(landmarks=model.landmarks_)).fit(data)
        _assert_same_kernel_pca(loaded, whole, data)


def test_a_format_2_model_loads_and_refuses_to_continue(data, tmp_path):
    model = PCA(2).fit(data)
    path = tmp_path / "old.zarr"
    dkpca.save(model, path)
    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs["dkpca"], format_version=2)
    del meta["attributes"]["row_statistics_"]
    del meta["checksums"]  # verified as far as it can be, as an older model is
    group.attrs["dkpca"] = meta
    old = dkpca.load(path)
    np.testing.assert_allclose(old.transform(data[:5]), model.transform(data[:5]))
    with pytest.raises(ValueError, match="saved in model format 2"):
        old.partial_fit(data)


def test_works_in_pipelines_and_in_dask_mls_incremental_wrapper(data):
    from dask_ml.wrappers import Incremental

    X = da.from_array(data, chunks=100)
    wrapped = Incremental(PCA(2)).fit(X)  # one partial_fit per block
    assert wrapped.estimator_.n_samples_seen_ == len(data)
    _assert_same_pca(wrapped.estimator_, PCA(2).fit(data))
    scores = wrapped.transform(X)
    np.testing.assert_allclose(np.asarray(scores), PCA(2).fit(data).transform(data),
                               atol=1e-8)

    landmarks = data[::15]
    # dask-ml asks for a score; KernelPCA has none (as scikit-learn's), so the user names one
    explained = lambda model, X, y=None: float(model.explained_variance_ratio_.sum())
    wrapped = Incremental(KernelPCA(3, solver=Nystrom(landmarks=landmarks)),
                          scoring=explained).fit(X)
    whole = KernelPCA(3, solver=Nystrom(landmarks=landmarks)).fit(data)
    _assert_same_kernel_pca(wrapped.estimator_, whole, data)

    pipeline = make_pipeline(StandardScaler(), PCA(2)).fit(data)
    assert pipeline.transform(data[:3]).shape == (3, 2)


def test_a_model_loaded_lazily_continues(data, tmp_path):
    # Arrays above `in_memory` load as dask arrays; the statistics are merged in memory.
    dkpca.save(PCA(3).fit(data[:300]), tmp_path / "p.zarr")
    loaded = dkpca.load(tmp_path / "p.zarr", in_memory=100)
    assert isinstance(loaded.row_statistics_.scatter, np.ndarray)
    _assert_same_pca(loaded.partial_fit(data[300:]), PCA(3).fit(data))


def test_every_batch_with_unknown_chunk_sizes_gets_fits_message():
    """Boolean indexing leaves the row chunks unknown: the first batch, and any later one
    (dask's raw "Arrays chunk sizes are unknown" before), say how to compute them."""
    X = np.random.default_rng(0).normal(size=(60, 10))
    Xd = da.from_array(X, chunks=(7, 10))
    unknown = Xd[Xd[:, 0] > -100]
    with pytest.raises(ValueError, match=r"PCA.*unknown chunk sizes.*compute_chunk_sizes"):
        PCA(3).fit(unknown)
    for model in (PCA(3), PCA(3).fit(X), PCA(3).partial_fit(X[:30])):
        seen = getattr(model, "n_samples_seen_", 0)
        with pytest.raises(ValueError, match=r"PCA.*unknown chunk sizes.*compute_chunk_sizes"):
            model.partial_fit(unknown)
        assert getattr(model, "n_samples_seen_", 0) == seen
    model = PCA(3).partial_fit(X[:30]).partial_fit(unknown.compute_chunk_sizes())
    assert model.n_samples_seen_ == 90


@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
def test_float32_batches_equal_the_fit_to_float32_precision(data, lazy):
    # The kernel strips are float32 products (summed in float64), rounded otherwise when the
    # rows are batched or chunked otherwise: the documented bound is a float32 fit's own error
    # against float64, about 1e-6 of the largest eigenvalue (measured at most 7.4e-7 over six
    # data sets and four batchings; scores 2.2e-5 of their largest). Tolerances: 10x that.
    X = data.astype(np.float32)
    kp = KernelPCA(4, solver=Nystrom(n_landmarks=60), gamma=0.05, random_state=0)
    for batch in _batches(X, 3, lazy):
        kp.partial_fit(batch)
    whole = KernelPCA(4, solver=Nystrom(landmarks=kp.landmarks_), gamma=0.05).fit(X)
    scale = whole.eigenvalues_[0]
    np.testing.assert_allclose(kp.eigenvalues_, whole.eigenvalues_, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(kp.explained_variance_ratio_, whole.explained_variance_ratio_,
                               rtol=0, atol=1e-6)
    ours, theirs = kp.transform(X[:50]), whole.transform(X[:50])
    np.testing.assert_allclose(np.abs(ours), np.abs(theirs), rtol=0,
                               atol=2e-4 * np.abs(theirs).max())
    # Not to float64 rounding: the float32 strips do round otherwise (the old claim, 1e-9).
    assert np.abs(kp.eigenvalues_ - whole.eigenvalues_).max() > 1e-9 * scale


@pytest.mark.parametrize("change, names", [
    (lambda X: {"gamma": 2.0}, r"kernel_=RBF\(gamma=0.3\).*now give RBF\(gamma=2.0\)"),
    (lambda X: {"kernel": "poly"}, r"kernel_=RBF\(gamma=0.3\).*now give Polynomial"),
    (lambda X: {"solver": Nystrom(landmarks=X[1::20])}, r"landmarks_ \(30, 5\).*other points"),
    (lambda X: {"solver": Nystrom(n_landmarks=20)}, "on 30 landmarks.*n_landmarks=20"),
    (lambda X: {"solver": FixedSize(n_landmarks=30)}, "solver_='nystrom'.*names 'fixed_size'"),
], ids=["gamma", "kernel", "landmarks", "n_landmarks", "solver"])
def test_parameters_that_define_the_statistics_cannot_change_after_the_first_call(
        data, change, names):
    # They were silently ignored: the statistics (sums of k(x, L)) went on with the old ones.
    kp = KernelPCA(3, gamma=0.3, solver=Nystrom(landmarks=data[::20])).partial_fit(data[:300])
    before = dict(vars(kp))
    kp.set_params(**change(data))
    with pytest.raises(ValueError, match=names) as err:
        kp.partial_fit(data[300:])
    assert "fit()" in str(err.value) and "new model" in str(err.value)
    fitted = {name for name in before if name.endswith("_")}
    assert all(vars(kp)[name] is before[name] for name in fitted)  # the model is as it was
    assert kp.n_samples_seen_ == 300
    kp.fit(data)  # fit starts again with the new parameters
    assert kp.n_samples_seen_ == len(data)


def test_a_fit_cannot_be_continued_under_another_solver(data):
    kp = KernelPCA(3, solver=Nystrom(n_landmarks=20), random_state=0).fit(data[:300])
    kp.set_params(solver=FixedSize(n_landmarks=20))
    with pytest.raises(ValueError, match="solver_='nystrom'.*'fixed_size'"):
        kp.partial_fit(data[300:])
    assert kp.solver_ == "nystrom" and kp.n_samples_seen_ == 300


def test_parameters_that_the_statistics_do_not_fix_apply_at_every_call(data):
    # The same landmarks given again (another array), and another n_components: the m x m
    # statistics give the components of the fit on all rows under the new parameters.
    landmarks = data[::20]
    kp = KernelPCA(3, gamma=0.3, solver=Nystrom(landmarks=landmarks)).partial_fit(data[:300])
    kp.set_params(n_components=2, solver=Nystrom(landmarks=landmarks.tolist()))
    kp.partial_fit(data[300:])
    whole = KernelPCA(2, gamma=0.3, solver=Nystrom(landmarks=landmarks)).fit(data)
    _assert_same_kernel_pca(kp, whole, data)


def test_given_landmarks_are_the_models_own_copy(data):
    # The model kept the caller's array: changing it changed transform and the continuation.
    landmarks = data[::20].copy()
    kp = KernelPCA(3, gamma=0.3, solver=Nystrom(landmarks=landmarks)).fit(data[:300])
    expected = KernelPCA(3, gamma=0.3, solver=Nystrom(landmarks=data[::20])).fit(data[:300])
    landmarks += 0.5
    np.testing.assert_array_equal(kp.landmarks_, data[::20])
    np.testing.assert_array_equal(kp.transform(data[:20]), expected.transform(data[:20]))
    # The parameter now holds other points than those fitted: refused, not merged.
    with pytest.raises(ValueError, match="other points"):
        kp.partial_fit(data[300:])
    kp.set_params(solver=Nystrom(landmarks=data[::20])).partial_fit(data[300:])
    _assert_same_kernel_pca(kp, KernelPCA(3, gamma=0.3, solver=Nystrom(
        landmarks=data[::20])).fit(data), data)
