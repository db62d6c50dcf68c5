"""What a scikit-learn KernelPCA user relies on: copies, every kernel, sparse input, widths."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse
from sklearn.base import clone
from sklearn.decomposition import KernelPCA as SkKernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import pairwise_kernels, rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

import dkpca
import dkpca._tile_values
from dkpca import PCA, KernelPCA
from dkpca.generalization import Renormalizer
from dkpca.options import ICF, Exact, FixedSize, Nystrom, Randomized, Sketch
from dkpca.tiles import evaluate_tile


def assert_same_up_to_sign(A: np.ndarray, B: np.ndarray, atol: float) -> None:
    signs = np.sign(np.sum(A * B, axis=0))
    np.testing.assert_allclose(A * signs, B, atol=atol)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.uniform(size=(120, 6)), rng.uniform(size=(15, 6))


# ------------------------------------------------------------------------- copy semantics

SOLVER_OPTIONS = {
    "exact": Exact(),
    "randomized": Randomized(tol=1e-10),
    "sketch": Sketch(dim=60),
    "nystrom": Nystrom(n_landmarks=40),
    "fixed_size": FixedSize(n_landmarks=40, max_iter=3),
    "icf": ICF(max_rank=40),
}


@pytest.mark.parametrize("solver", sorted(SOLVER_OPTIONS))
def test_fitted_model_ignores_later_changes_to_the_training_array(solver, data, tmp_path):
    X, new = data
    X = X.copy()
    model = KernelPCA(3, kernel="rbf", gamma=2.0, solver=clone(SOLVER_OPTIONS[solver]),
                      random_state=0).fit(X)
    before, denoised = model.transform(new), model.denoise(new[:4])
    dkpca.save(model, tmp_path / "model.zarr")
    X[:] = 0  # the caller reuses its buffer
    np.testing.assert_array_equal(model.transform(new), before)
    np.testing.assert_array_equal(model.denoise(new[:4]), denoised)
    dkpca.save(model, tmp_path / "after.zarr")
    for path in ("model.zarr", "after.zarr"):
        np.testing.assert_array_equal(dkpca.load(tmp_path / path).transform(new), before)


def test_copy_x_false_keeps_a_reference(data):
    X, new = data
    X = X.copy()
    model = KernelPCA(3, kernel="rbf", gamma=2.0, solver="exact", copy_X=False).fit(X)
    assert model.basis_.basis is X
    before = model.transform(new)
    X[:] = 0
    assert not np.allclose(model.transform(new), before)  # the documented hazard


def test_copy_of_an_in_memory_dataarray(data):
    xr = pytest.importorskip("xarray")
    X, new = data
    field = xr.DataArray(X.copy(), dims=("sample", "feature"))
    model = KernelPCA(3, kernel="rbf", gamma=2.0, solver="exact").fit(field)
    before = model.transform(new)
    field.values[:] = 0
    np.testing.assert_array_equal(model.transform(new), before)


def test_lazy_training_data_stays_lazy(data):
    X, _ = data
    Xd = da.from_array(X, chunks=40)
    model = KernelPCA(3, kernel="rbf", gamma=2.0, solver="exact").fit(Xd)
    assert isinstance(model.basis_.basis, da.Array)


# ---------------------------------------------------------------------- kernels vs sklearn

def _sklearn_fit(X, new, k, **params):
    sk = SkKernelPCA(k, eigen_solver="dense", **params).fit(X)
    return sk.eigenvalues_, sk.transform(new)


def _check_against_sklearn(ours, sk_eigenvalues, sk_scores, new_ours):
    np.testing.assert_allclose(ours.eigenvalues_, sk_eigenvalues, rtol=1e-8,
                               atol=1e-8 * sk_eigenvalues[0])
    assert_same_up_to_sign(ours.transform(new_ours), sk_scores, atol=1e-6)


@pytest.mark.parametrize("kernel, params", [
    ("laplacian", {"gamma": 0.5}),
    ("cosine", {}),
    ("chi2", {"gamma": 0.7}),
    ("additive_chi2", {}),
])
def test_new_kernels_match_sklearn(kernel, params, data):
    """scikit-learn's KernelPCA names only some of its pairwise kernels: it gets the others as
    precomputed matrices from sklearn.metrics.pairwise."""
    X, new = data
    values, scores = _sklearn_fit(
        pairwise_kernels(X, metric=kernel, **params), pairwise_kernels(new, X, metric=kernel,
                                                                       **params),
        4, kernel="precomputed",
    )
    ours = KernelPCA(4, kernel=kernel, solver="exact", **params).fit(X)
    _check_against_sklearn(ours, values, scores, new)


def block_histogram(X, Y, scale=1.0):
    """The histogram kernel on blocks."""
    return scale * np.minimum(X[:, None, :], Y[None, :, :]).sum(axis=2)


def pair_histogram(x, y, scale=1.0):
    """The histogram kernel on two rows (scikit-learn's callable convention)."""
    return scale * np.minimum(x, y).sum()


@pytest.mark.parametrize("function", [block_histogram, pair_histogram])
def test_callable_kernels_match_sklearn(function, data):
    X, new = data
    values, scores = _sklearn_fit(X, new, 4, kernel=pair_histogram, kernel_params={"scale": 2.0})
    ours = KernelPCA(4, kernel=function, kernel_params={"scale": 2.0}, solver="exact").fit(X)
    _check_against_sklearn(ours, values, scores, new)


def test_callable_kernel_model_cannot_be_saved(data, tmp_path):
    X, _ = data
    model = KernelPCA(2, kernel=block_histogram, solver="exact").fit(X)
    with pytest.raises(ValueError, match="callable"):
        dkpca.save(model, tmp_path / "model.zarr")
    assert not (tmp_path / "model.zarr").exists()


def test_kernel_params_only_for_callables(data):
    with pytest.raises(ValueError, match="kernel_params"):
        KernelPCA(2, kernel="rbf", kernel_params={"gamma": 1.0}).fit(data[0])


# ----------------------------------------------------------------------- precomputed kernel

@pytest.mark.parametrize("lazy", [False, True])
def test_precomputed_matches_sklearn(lazy, data):
    X, new = data
    K, K_new = rbf_kernel(X, gamma=2.0), rbf_kernel(new, X, gamma=2.0)
    values, scores = _sklearn_fit(K, K_new, 5, kernel="precomputed")
    train = da.from_array(K, chunks=50) if lazy else K
    ours = KernelPCA(5, kernel="precomputed", solver="exact").fit(train)
    assert ours.n_features_in_ == len(X)
    transformed = ours.transform(da.from_array(K_new) if lazy else K_new)
    np.testing.assert_allclose(ours.eigenvalues_, values, rtol=1e-8)
    assert_same_up_to_sign(np.asarray(transformed), scores, atol=1e-6)


@pytest.mark.parametrize("solver", ["randomized", "sketch", "nystrom", "icf"])
def test_precomputed_equals_the_named_kernel_for_every_solver(solver, data):
    """Same solver, same seed: the kernel given as a matrix or as a function agree."""
    X, new = data
    options = clone(SOLVER_OPTIONS[solver])
    if solver == "sketch":  # "auto" treats a precomputed kernel as possibly indefinite
        options.set_params(method="nystrom")
    named = KernelPCA(3, kernel="rbf", gamma=2.0, solver=options, random_state=0)
    given = KernelPCA(3, kernel="precomputed", solver=clone(options), random_state=0)
    named.fit(X)
    given.fit(rbf_kernel(X, gamma=2.0))
    np.testing.assert_allclose(given.eigenvalues_, named.eigenvalues_, rtol=1e-8)
    assert_same_up_to_sign(given.transform(rbf_kernel(new, X, gamma=2.0)), named.transform(new),
                           atol=1e-6)


def test_precomputed_refuses_what_needs_an_input_space(data):
    X, _ = data
    K = rbf_kernel(X, gamma=2.0)
    with pytest.raises(ValueError, match="Cannot fit_inverse_transform"):
        KernelPCA(2, kernel="precomputed", fit_inverse_transform=True).fit(K)
    with pytest.raises(ValueError, match="input space"):
        KernelPCA(2, kernel="precomputed", solver=FixedSize(n_landmarks=10)).fit(K)
    with pytest.raises(ValueError, match="sampling='kmeans'.*input space"):
        KernelPCA(2, kernel="precomputed",
                  solver=Nystrom(sampling="kmeans", n_landmarks=10)).fit(K)
    model = KernelPCA(2, kernel="precomputed").fit(K)
    with pytest.raises(ValueError, match="input space"):
        model.inverse_transform(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="square"):
        KernelPCA(2, kernel="precomputed").fit(K[:, :50])
    asymmetric = K.copy()
    asymmetric[0, 1] += 0.1
    with pytest.raises(ValueError, match="not symmetric"):
        KernelPCA(2, kernel="precomputed").fit(asymmetric)


def test_precomputed_model_round_trips(data, tmp_path):
    X, new = data
    model = KernelPCA(3, kernel="precomputed").fit(rbf_kernel(X, gamma=2.0))
    dkpca.save(model, tmp_path / "model.zarr")
    K_new = rbf_kernel(new, X, gamma=2.0)
    np.testing.assert_array_equal(dkpca.load(tmp_path / "model.zarr").transform(K_new),
                                  model.transform(K_new))


# ----------------------------------------------------------------------------- sparse input

def _sparse_data(n=150, d=40, seed=0):
    return scipy.sparse.random(n, d, density=0.1, format="csr", random_state=seed)


@pytest.mark.parametrize("solver", ["exact", "randomized", "sketch", "nystrom", "icf"])
@pytest.mark.parametrize("container", [scipy.sparse.csr_matrix, scipy.sparse.csc_matrix,
                                       scipy.sparse.csr_array, "dask"])
def test_sparse_fit_equals_dense_fit(solver, container, data):
    S = _sparse_data()
    dense = S.toarray()
    if container == "dask":
        X = da.from_array(S, chunks=(40, -1), asarray=False)
    else:
        X = container(S)
    options = SOLVER_OPTIONS[solver]
    sparse_fit = KernelPCA(3, kernel="rbf", gamma=0.5, solver=clone(options), random_state=0)
    dense_fit = KernelPCA(3, kernel="rbf", gamma=0.5, solver=clone(options), random_state=0)
    scores = sparse_fit.fit_transform(X)
    dense_scores = dense_fit.fit_transform(dense)
    np.testing.assert_allclose(sparse_fit.eigenvalues_, dense_fit.eigenvalues_, rtol=1e-8)
    assert_same_up_to_sign(np.asarray(scores), dense_scores, atol=1e-8)
    new = _sparse_data(10, seed=1)
    assert_same_up_to_sign(np.asarray(sparse_fit.transform(new)),
                           dense_fit.transform(new.toarray()), atol=1e-8)


def test_sparse_data_is_never_densified_whole(monkeypatch):
    """Every cached tile is evaluated on sparse blocks of the data."""
    seen = []

    def spy(kernel, Xi, Xj, dtype):
        seen.append(scipy.sparse.issparse(Xi) and scipy.sparse.issparse(Xj))
        return evaluate_tile(kernel, Xi, Xj, dtype)

    monkeypatch.setattr(dkpca._tile_values, "evaluate_tile", spy)
    KernelPCA(3, kernel="rbf", gamma=0.5, solver="randomized", random_state=0,
              block_size=8 * 50 * 50).fit(_sparse_data(200))
    assert len(seen) > 1 and all(seen)


def test_sparse_preimages(data):
    S = _sparse_data()
    model = KernelPCA(3, kernel="rbf", gamma=0.5).fit(S)
    with pytest.raises(NotFittedError, match="fit_inverse_transform"):
        model.inverse_transform(np.zeros((1, 3)))
    learned = KernelPCA(3, kernel="rbf", gamma=0.5, fit_inverse_transform=True).fit(S)
    reference = KernelPCA(3, kernel="rbf", gamma=0.5, fit_inverse_transform=True,
                          preimage="learned").fit(S.toarray())
    np.testing.assert_allclose(learned.denoise(S[:5]), reference.denoise(S[:5].toarray()),
                               atol=1e-8)


@pytest.mark.parametrize("solver", ["gram", "sketch"])
def test_pca_refuses_sparse_input_where_it_would_densify(solver):
    with pytest.raises(TypeError, match="sparse input is supported by solver='covariance'"):
        PCA(2, solver=solver).fit(_sparse_data())


@pytest.mark.parametrize("solver", ["auto", "covariance", "randomized"])
def test_pca_takes_sparse_input(solver):
    S = _sparse_data()
    dense = PCA(3, solver="covariance").fit(S.toarray())
    sparse = PCA(3, solver=solver, tol=1e-12, random_state=0).fit(S)
    np.testing.assert_allclose(sparse.explained_variance_, dense.explained_variance_,
                               rtol=1e-10)
    assert_same_up_to_sign(sparse.components_.T, dense.components_.T, atol=1e-8)


# ------------------------------------------------------------------- zero eigenvalues, width

RANK_TWO = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.1], [3.0, 2.9], [4.0, 4.0]])


@pytest.mark.parametrize("solver", ["exact", "randomized", "nystrom"])
def test_width_is_what_was_asked_for(solver):
    """Linear kernel on rank-2 data: the third component has a zero eigenvalue."""
    options = Nystrom(n_landmarks=5) if solver == "nystrom" else solver
    model = KernelPCA(3, kernel="linear", solver=options, random_state=0)
    scores = model.fit_transform(RANK_TWO)  # no warning: the width asked for (pyproject)
    assert scores.shape == (5, 3) and model.transform(RANK_TWO).shape == (5, 3)
    assert model.eigenvalues_[2] == 0 and np.all(scores[:, 2] == 0)
    assert np.all(model.transform(RANK_TWO)[:, 2] == 0)
    reference = SkKernelPCA(2, kernel="linear").fit(RANK_TWO)
    np.testing.assert_allclose(model.eigenvalues_[:2], reference.eigenvalues_,
                               atol=1e-6 * reference.eigenvalues_[0])  # float32 tiles


def test_remove_zero_eig_drops_them():
    with pytest.warns(UserWarning, match="keeping 2"):
        model = KernelPCA(3, kernel="linear", remove_zero_eig=True).fit(RANK_TWO)
    assert model.n_components_ == 2
    assert KernelPCA(None, kernel="linear").fit(RANK_TWO).n_components_ == 2


def test_significant_negative_eigenvalue_raises():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(8, 8))
    K = (A + A.T) / 2  # indefinite
    with pytest.raises(ValueError, match="significant negative eigenvalues"):
        KernelPCA(8, kernel="precomputed").fit(K)


# ---------------------------------------------------------------------- estimator checks

@parametrize_with_checks(
    [KernelPCA(n_components=2), PCA(n_components=2), Renormalizer()],
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("estimator", [KernelPCA(n_components=2), PCA(n_components=2),
                                       KernelPCA(2, solver=Nystrom(n_landmarks=10))],
                         ids=["KernelPCA", "PCA", "KernelPCA-nystrom"])
def test_dataframe_column_names_are_kept_and_checked(estimator):
    """scikit-learn's check (not among parametrize_with_checks's): feature_names_in_ after a
    DataFrame fit; other names or another order raise in transform (and a later partial_fit)."""
    from sklearn.utils.estimator_checks import check_dataframe_column_names_consistency

    check_dataframe_column_names_consistency(type(estimator).__name__, estimator)


@pytest.mark.parametrize("estimator", [PCA(2), KernelPCA(2, solver="nystrom")],
                         ids=["PCA", "KernelPCA"])
def test_feature_names_survive_save_and_load(estimator, data, tmp_path):
    """A model fitted on a DataFrame keeps checking its columns after a round trip."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(data[0][:, :4], columns=["w", "x", "y", "z"])
    model = estimator.fit(frame)
    dkpca.save(model, tmp_path / "model.zarr")
    loaded = dkpca.load(tmp_path / "model.zarr")
    assert loaded.feature_names_in_.tolist() == ["w", "x", "y", "z"]
    np.testing.assert_array_equal(np.asarray(loaded.transform(frame)),
                                  np.asarray(model.transform(frame)))
    with pytest.raises(ValueError, match="same order as they were in fit"):
        loaded.transform(frame[["z", "y", "x", "w"]])
    refitted = clone(estimator).fit(data[0][:, :4])  # a refit on an array forgets the names
    assert not hasattr(refitted, "feature_names_in_")
