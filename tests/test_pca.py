"""Linear PCA against scikit-learn's PCA (up to sign)."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import match_signs
from sklearn.decomposition import PCA as SkPCA

from dkpca import PCA, KernelPCA


def _tall_and_wide():
    rng = np.random.default_rng(0)
    tall = rng.normal(size=(500, 20)) @ rng.normal(size=(20, 20)) + 50.0  # large mean
    wide = rng.normal(size=(60, 3000)) * np.linspace(3, 0.1, 3000) + 1.0
    return {"tall": tall, "wide": wide}


DATA = _tall_and_wide()


@pytest.mark.parametrize("shape", ["tall", "wide"])
@pytest.mark.parametrize("solver", ["auto", "covariance", "gram"])
@pytest.mark.parametrize("chunks", [None, 37])
def test_matches_sklearn(shape, solver, chunks):
    X = DATA[shape]
    ref = SkPCA(10, svd_solver="full").fit(X)
    data = X if chunks is None else da.from_array(X, chunks=(chunks, -1))
    pca = PCA(10, solver=solver, block_size=2**16).fit(data)
    assert pca.solver_ == (solver if solver != "auto" else {"tall": "covariance"}.get(shape, "gram"))
    np.testing.assert_allclose(pca.explained_variance_, ref.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(pca.explained_variance_ratio_, ref.explained_variance_ratio_,
                               rtol=1e-9)
    np.testing.assert_allclose(pca.singular_values_, ref.singular_values_, rtol=1e-9)
    np.testing.assert_allclose(pca.mean_, ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(
        match_signs(pca.components_.T, ref.components_.T), ref.components_.T, atol=1e-9
    )
    Z, Z_ref = pca.transform(X), ref.transform(X)
    np.testing.assert_allclose(match_signs(Z, Z_ref), Z_ref, atol=1e-8 * np.abs(Z_ref).max())


@pytest.mark.parametrize("shape", ["tall", "wide"])
def test_fraction_and_threshold_rules(shape):
    X = DATA[shape]
    ref = SkPCA(0.8, svd_solver="full").fit(X)
    assert PCA(0.8).fit(X).n_components_ == ref.n_components_
    full = SkPCA(svd_solver="full").fit(X).explained_variance_
    expected = np.count_nonzero(full >= 0.05 * full[0])
    assert PCA(min_relative_eigenvalue=0.05).fit(X).n_components_ == expected


def test_equals_linear_kernel_pca():
    X = DATA["tall"]
    pca = PCA(5).fit(X)
    kp = KernelPCA(5, kernel="linear", solver="exact").fit(X)
    np.testing.assert_allclose(pca.explained_variance_ * (len(X) - 1), kp.eigenvalues_, rtol=1e-9)
    Z = pca.transform(X[:10])
    np.testing.assert_allclose(match_signs(kp.transform(X[:10]), Z), Z, atol=1e-8)


def test_lazy_transform_and_inverse(no_compute):
    X = DATA["tall"]
    pca = PCA(20).fit(X)
    Xd = da.from_array(X, chunks=(100, -1))
    with no_compute():
        Z = pca.transform(Xd)
        back = pca.inverse_transform(Z)
    assert isinstance(back, da.Array)
    np.testing.assert_allclose(back.compute(), X, atol=1e-9)


def test_float32_stays_float32():
    X = DATA["tall"].astype(np.float32)
    assert PCA(3).fit(X).transform(X).dtype == np.float32


@pytest.mark.parametrize(
    ("X", "params", "error", "message"),
    [
        (np.ones((1, 4)), {}, ValueError, "at least 2 samples"),
        (np.array([[1.0, np.nan], [0.0, 1.0], [2.0, 2.0]]), {}, ValueError, "NaN or infinity"),
        (np.ones((5, 3), dtype=complex), {}, ValueError, "complex dtype"),
        (np.ones((10, 3)), {"n_components": 4}, ValueError, "larger than possible"),
        (np.ones((10, 3)), {"solver": "power"}, ValueError, "invalid solver='power'"),
        (np.ones((10, 3)), {"block_size": 0}, ValueError, "invalid block_size=0"),
    ],
)
def test_bad_input(X, params, error, message):
    with pytest.raises(error, match=message):
        PCA(**params).fit(X)


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("solver", ["covariance", "gram", "randomized", "sketch"])
def test_non_finite_input_names_the_first_row_at_fault(solver, lazy):
    """Every solver finds NaN and infinity in its statistics, then names the first row."""
    X = np.random.default_rng(0).normal(size=(60, 4))
    X[[37, 52], [2, 0]] = [np.inf, np.nan]
    data = da.from_array(X, chunks=10) if lazy else X
    with pytest.raises(ValueError, match=r"^PCA: X contains NaN or infinity at row 37 \(the "
                                         r"first such row\)"):
        PCA(2, solver=solver, random_state=0).fit(data)


def test_non_finite_batch_names_its_row():
    pca = PCA(2).partial_fit(np.random.default_rng(0).normal(size=(10, 3)))
    with pytest.raises(ValueError, match="at row 1 "):
        pca.partial_fit(np.array([[1.0, 2.0, 3.0], [1.0, np.nan, 3.0]]))
    assert pca.n_samples_seen_ == 10


@pytest.mark.parametrize("sparse", [False, True])
def test_overflowing_sums_are_told_from_non_finite_values(sparse):
    import scipy.sparse

    X = np.random.default_rng(0).normal(size=(40, 3)) * 1e200
    data = scipy.sparse.csr_matrix(X) if sparse else X
    with pytest.raises(ValueError, match="is finite, but its sums overflowed"):
        PCA(2).fit(data)


def test_transform_feature_mismatch_and_inverse_width():
    pca = PCA(2).fit(DATA["tall"])
    with pytest.raises(ValueError, match="X has 3 features, but PCA is expecting 20"):
        pca.transform(np.ones((2, 3)))
    with pytest.raises(ValueError, match="Z has 3 columns, but PCA has 2 components"):
        pca.inverse_transform(np.ones((2, 3)))


@pytest.mark.parametrize("solver", ["covariance", "gram", "sketch"])
@pytest.mark.parametrize("level", [0.0, 3.7, 1e6])
def test_constant_data_fit_with_a_warning(solver, level):
    X = np.full((80, 3), level)
    with pytest.warns(UserWarning, match="the training data do not vary"):
        model = PCA(1, solver=solver).fit(X)
    np.testing.assert_array_equal(model.explained_variance_ratio_, 0.0)
    varied = X + np.random.default_rng(0).normal(scale=1e-3 * max(level, 1), size=X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PCA(1, solver=solver).fit(varied).explained_variance_ratio_[0] > 0


@pytest.mark.parametrize("offset", [1e6, 1e7])
@pytest.mark.parametrize("chunks", [None, (-1, 40), (10, 60)])
def test_gram_solver_far_from_the_origin(offset, chunks):
    """Wide data with a mean far above its spread: the Gram matrix of rows shifted by the
    first keeps the centred spectrum (the Gram matrix of the raw rows lost it to cancellation:
    eigenvalues 8 % off, ratios 0 and a "do not vary" warning at 1e7)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 200)) * np.linspace(2.0, 0.5, 200) + offset
    data = X if chunks is None else da.from_array(X, chunks=chunks)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = PCA(3, solver="gram").fit(data)
    ref = SkPCA(3, svd_solver="full").fit(X)
    np.testing.assert_allclose(model.explained_variance_, ref.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(model.explained_variance_ratio_, ref.explained_variance_ratio_,
                               rtol=1e-9)
    signs = np.sign(np.sum(model.components_ * ref.components_, axis=1))
    np.testing.assert_allclose(model.components_ * signs[:, None], ref.components_, atol=1e-8)
    np.testing.assert_allclose(np.asarray(model.transform(X)) * signs, ref.transform(X),
                               atol=1e-6)


# ------------------------------------------------------------- dtype and widths (issue 32.4)


@pytest.mark.parametrize("solver", ["covariance", "gram", "sketch"])
def test_float32_fitted_attributes_and_outputs(solver):
    X = DATA["tall"][:200, :8]
    pca32 = PCA(3, solver=solver, random_state=0).fit(X.astype(np.float32))
    pca64 = PCA(3, solver=solver, random_state=0).fit(X)
    for name in ["components_", "explained_variance_", "explained_variance_ratio_",
                 "singular_values_", "mean_"]:
        assert getattr(pca32, name).dtype == np.float32, name
        assert getattr(pca64, name).dtype == np.float64, name
    Z = pca32.transform(X.astype(np.float32))
    assert Z.dtype == np.float32 and pca32.inverse_transform(Z).dtype == np.float32
    np.testing.assert_allclose(pca32.explained_variance_, pca64.explained_variance_, rtol=1e-5)


@pytest.mark.parametrize("solver", ["auto", "covariance", "gram"])
def test_none_keeps_min_of_samples_and_features(solver):
    X = np.random.default_rng(0).normal(size=(30, 100))
    assert PCA(solver=solver).fit(X).n_components_ == 30
    assert PCA(solver=solver).fit(X.T).n_components_ == 30


@pytest.mark.parametrize("solver", ["covariance", "gram", "sketch"])
def test_integer_width_kept_with_zero_variance_components(solver):
    X = np.random.default_rng(0).normal(size=(3, 100))  # rank 2 once centred
    pca = PCA(3, solver=solver, random_state=0).fit(X)
    assert pca.n_components_ == 3 and pca.components_.shape == (3, 100)
    if solver != "sketch":  # the sketch's directions are approximate (tutorial Alg. 4)
        np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(3), atol=1e-10)
    assert pca.explained_variance_[2] <= 1e-12 * pca.explained_variance_[0]
    assert np.all(pca.explained_variance_ >= 0)
    np.testing.assert_allclose(pca.singular_values_ ** 2,
                               pca.explained_variance_ * 2, rtol=1e-12)


def test_rank_deficient_variances_clipped_at_zero():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 3)) @ rng.normal(size=(3, 10))
    pca = PCA(solver="covariance").fit(X)
    assert np.all(pca.explained_variance_ >= 0) and np.all(pca.explained_variance_ratio_ >= 0)
    np.testing.assert_allclose(pca.singular_values_ ** 2, pca.explained_variance_ * 49)


def test_fraction_tie_keeps_the_next_component():
    """scikit-learn's gh-15669 rule: a cumulative ratio equal to the fraction is not enough."""
    X = DATA["tall"][:, :6]
    full = PCA().fit(X)
    at_tie = full.explained_variance_ratio_.cumsum()[-2]
    assert PCA(float(at_tie)).fit(X).n_components_ == 6
    assert PCA(float(full.explained_variance_ratio_[0])).fit(X).n_components_ == 2


# ------------------------------------------------------- probabilistic PCA (issue 32.3)


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize(("shape", "k"), [("tall", 5), ("tall", 20), ("wide", 7)])
def test_probabilistic_model_matches_sklearn(shape, k, whiten):
    X = DATA[shape][:, :400]
    ref = SkPCA(k, whiten=whiten, svd_solver="full").fit(X)
    pca = PCA(k, whiten=whiten).fit(X)
    np.testing.assert_allclose(pca.noise_variance_, ref.noise_variance_, rtol=1e-8,
                               atol=1e-12 * ref.explained_variance_[0])
    scale = np.abs(ref.get_covariance()).max()
    np.testing.assert_allclose(pca.get_covariance(), ref.get_covariance(), atol=1e-9 * scale)
    if ref.noise_variance_ > 0:
        np.testing.assert_allclose(pca.get_precision() @ pca.get_covariance(),
                                   np.eye(X.shape[1]), atol=1e-8)
        np.testing.assert_allclose(pca.score_samples(X[:20]), ref.score_samples(X[:20]),
                                   rtol=1e-8)
        assert pca.score(X) == pytest.approx(ref.score(X), rel=1e-8)
    Z, Z_ref = pca.transform(X), ref.transform(X)
    np.testing.assert_allclose(match_signs(Z, Z_ref), Z_ref, atol=1e-7 * np.abs(Z_ref).max())
    np.testing.assert_allclose(pca.inverse_transform(Z), ref.inverse_transform(Z_ref),
                               atol=1e-8 * np.abs(X).max())


def test_whitened_scores_have_unit_variance_and_invert():
    X = DATA["tall"]
    pca = PCA(20, whiten=True).fit(X)
    Z = pca.transform(X)
    np.testing.assert_allclose(Z.std(axis=0, ddof=1), 1.0, rtol=1e-10)
    np.testing.assert_allclose(pca.inverse_transform(Z), X, atol=1e-8 * np.abs(X).max())
    lazy = pca.score_samples(da.from_array(X, chunks=(100, -1)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), pca.score_samples(X), rtol=1e-12)


def test_no_noise_model_scores_with_the_dense_precision():
    X = DATA["tall"][:, :5]
    pca, ref = PCA(5).fit(X), SkPCA(5, svd_solver="full").fit(X)
    assert pca.noise_variance_ == 0
    assert pca.score(X) == pytest.approx(ref.score(X), rel=1e-8)


@pytest.mark.parametrize("n_components", [None, 0.95])
def test_singular_model_without_noise_scores_minus_infinity(n_components):
    # 8 samples, 60 features: no noise (all directions with variance kept) and a covariance
    # of rank 7. scikit-learn's score is -inf there, with a LinAlgWarning; dkpca returned
    # 858 (the inverse of a singular matrix, and slogdet's sign ignored).
    import scipy.linalg

    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 60)) * np.linspace(3, 0.1, 60) + 5
    pca = PCA(n_components).fit(X)
    assert pca.noise_variance_ == 0
    assert np.linalg.matrix_rank(pca.get_covariance()) < X.shape[1]
    with pytest.warns(scipy.linalg.LinAlgWarning, match="singular"):
        assert pca.score(X) == -np.inf
    with pytest.warns(scipy.linalg.LinAlgWarning, match="singular"):
        lazy = pca.score_samples(da.from_array(X, chunks=(3, -1)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), np.full(len(X), -np.inf))


@pytest.mark.parametrize("seed", range(4))
def test_mle_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=(400, 3)) @ rng.normal(size=(3, 12)) * 2
    X = signal + 0.3 * rng.normal(size=(400, 12)) + 5.0
    ref = SkPCA("mle", svd_solver="full").fit(X)
    pca = PCA("mle").fit(X)
    assert pca.n_components_ == ref.n_components_
    assert pca.noise_variance_ == pytest.approx(ref.noise_variance_, rel=1e-9)


def _nearly_low_rank():
    """Square data of rank 8 at scale 1e2 plus noise at 1e-6..1e-3: a spectrum spanning 1e-14."""
    rng = np.random.default_rng(19)
    n = d = int(rng.integers(6, 30))
    r = int(rng.integers(1, d - 2))
    return (rng.normal(size=(n, r)) @ rng.normal(size=(r, d)) * 100
            + rng.normal(size=(n, d)) * 10 ** rng.uniform(-6, -3))


def test_gram_keeps_the_small_eigenpairs_float64_resolves():
    # Eigenvalues from 1e-12 of the first down to the rounding floor (n·eps·λ₁) were dropped
    # (zero variance, arbitrary directions), and "mle" saw a wrong spectrum.
    X = _nearly_low_rank()
    n = len(X)
    ref = SkPCA(svd_solver="full").fit(X)
    gram, covariance = PCA(solver="gram").fit(X), PCA(solver="covariance").fit(X)
    floor = n * np.finfo(float).eps * ref.explained_variance_[0]
    resolved = ref.explained_variance_ > 10 * floor
    assert resolved.sum() > 8  # the noise's eigenvalues, not only the rank-8 signal
    for pca in (gram, covariance):  # both within the rounding of λ₁
        np.testing.assert_allclose(pca.explained_variance_[resolved],
                                   ref.explained_variance_[resolved], rtol=1e-9, atol=floor)
    W = gram.components_[resolved]
    np.testing.assert_allclose(W @ W.T, np.eye(len(W)), atol=1e-12)
    assert PCA("mle").fit(X).n_components_ == SkPCA("mle", svd_solver="full").fit(X).n_components_


@pytest.mark.parametrize("solver", ["gram", "randomized"])
def test_wide_solvers_convert_eigenpairs_down_to_the_rounding_floor(solver):
    # Eigenvalues 1e-12 .. 5e-14 of the first: kept and converted (X_cᵀ u / sqrt(λ)), not
    # replaced by zero-variance directions. Products through the n × d data are accurate to
    # about d·n·eps·λ₁, so the randomized solver resolves them to that (tol at the floor).
    rng = np.random.default_rng(1)
    n, d = 24, 60
    U = np.linalg.qr(rng.normal(size=(n, n)))[0]
    U = np.linalg.qr(U - U.mean(axis=0))[0][:, :8]
    V = np.linalg.qr(rng.normal(size=(d, 8)))[0]
    sigma = np.sqrt([1, 0.5, 0.2, 1e-12, 5e-13, 2e-13, 1e-13, 5e-14]) * 1e3
    X = (U * sigma) @ V.T + 7.0
    ref = SkPCA(8, svd_solver="full").fit(X)
    pca = PCA(8, solver=solver, tol=1e-12, random_state=0).fit(X)
    assert pca.solver_ == solver
    floor = d * n * np.finfo(float).eps * ref.explained_variance_[0]
    np.testing.assert_allclose(pca.explained_variance_, ref.explained_variance_, atol=floor)
    assert np.all(pca.explained_variance_ > 0)
    np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(8), atol=1e-12)
    assert np.all(np.abs(np.sum(pca.components_ * ref.components_, axis=1)) > 0.99)


def test_mle_needs_more_samples_than_features_and_the_whole_spectrum():
    with pytest.raises(ValueError, match="n_samples >= n_features"):
        PCA("mle").fit(DATA["wide"])
    with pytest.raises(ValueError, match="whole spectrum"):
        PCA("mle", solver="sketch").fit(DATA["tall"])


@pytest.mark.parametrize("params", [{"n_components": 4, "whiten": True},
                                    {"n_components": 3, "solver": "randomized"},
                                    {"n_components": "mle"}])
def test_probabilistic_model_survives_save_and_load(params, tmp_path):
    import dkpca

    X = DATA["tall"]
    pca = PCA(**params).fit(X)
    dkpca.save(pca, tmp_path / "model.zarr")
    loaded = dkpca.load(tmp_path / "model.zarr")
    assert loaded.whiten == pca.whiten and loaded.n_components_ == pca.n_components_
    assert float(loaded.noise_variance_) == float(pca.noise_variance_)
    np.testing.assert_array_equal(loaded.transform(X[:5]), pca.transform(X[:5]))
    np.testing.assert_array_equal(loaded.get_precision(), pca.get_precision())
    assert loaded.score(X) == pca.score(X)


# ------------------------------------------------------------------ sparse input (issue 32.2)


def _sparse(n=400, d=60, density=0.05, seed=0):
    import scipy.sparse

    rng = np.random.default_rng(seed)
    S = scipy.sparse.random(n, d, density=density, format="csr", random_state=seed)
    return S.multiply(rng.uniform(1, 20, size=d)).tocsr()  # columns of different scales


@pytest.mark.parametrize("solver", ["covariance", "randomized"])
@pytest.mark.parametrize("container", ["csr", "csc", "dask", "dask-2d"])
def test_sparse_input_matches_dense(solver, container):
    S = _sparse()
    X = {"csr": S, "csc": S.tocsc(),
         "dask": da.from_array(S, chunks=(90, -1), asarray=False),
         "dask-2d": da.from_array(S, chunks=(90, 25), asarray=False)}[container]
    ref = SkPCA(5, svd_solver="full").fit(S.toarray())
    pca = PCA(5, solver=solver, tol=1e-12, random_state=0).fit(X)
    np.testing.assert_allclose(pca.explained_variance_, ref.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(pca.mean_, ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(match_signs(pca.components_.T, ref.components_.T),
                               ref.components_.T, atol=1e-8)
    Z = pca.transform(X)
    assert isinstance(Z, da.Array) == container.startswith("dask")
    Z_ref = ref.transform(S.toarray())
    np.testing.assert_allclose(match_signs(np.asarray(Z), Z_ref), Z_ref, atol=1e-8)
    scores = pca.score_samples(X)
    np.testing.assert_allclose(np.asarray(scores), ref.score_samples(S.toarray()), rtol=1e-8)


def test_sparse_input_is_never_densified(monkeypatch):
    import scipy.sparse

    S = _sparse(300, 40)
    for kind in (scipy.sparse.csr_matrix, scipy.sparse.csr_array):
        monkeypatch.setattr(kind, "toarray", lambda self, *a, **k: pytest.fail("densified"))
        monkeypatch.setattr(kind, "todense", lambda self, *a, **k: pytest.fail("densified"))
    for solver in ["randomized"]:
        PCA(3, solver=solver, random_state=0).fit(S).transform(S)


# ------------------------------------------------------------ randomized solver (issue 32.1)


def _spectrum_data(n, d, seed=0, mean=3.0):
    rng = np.random.default_rng(seed)
    scales = 1.0 / np.arange(1, min(n, d) + 1) ** 0.7
    U = np.linalg.qr(rng.normal(size=(n, len(scales))))[0]
    V = np.linalg.qr(rng.normal(size=(d, len(scales))))[0]
    return (U * scales * 100) @ V.T + mean


@pytest.mark.parametrize(("n", "d", "chunks"), [
    (600, 80, None),          # tall, in memory
    (60, 900, None),          # wide, in memory
    (600, 80, (100, -1)),     # tall, row chunks
    (300, 400, (70, 90)),     # both ways
    (60, 900, (25, 200)),     # wide, both ways
])
def test_randomized_matches_sklearn_and_eigh(n, d, chunks):
    X = _spectrum_data(n, d)
    data = X if chunks is None else da.from_array(X, chunks=chunks)
    pca = PCA(8, solver="randomized", random_state=0).fit(data)  # default tol
    Xc = X - X.mean(axis=0)
    small = Xc.T @ Xc if d <= n else Xc @ Xc.T
    exact = np.linalg.eigvalsh(small)[::-1][:8] / (n - 1)
    # the default tolerance: eigenvalue errors at most 1e-6 of the largest (in fact far less)
    assert np.max(np.abs(pca.explained_variance_ - exact) / exact[0]) <= 1e-6
    np.testing.assert_allclose(pca.explained_variance_, exact, rtol=1e-6)
    ref = SkPCA(8, svd_solver="full").fit(X)
    np.testing.assert_allclose(match_signs(pca.components_.T, ref.components_.T),
                               ref.components_.T, atol=1e-5)
    np.testing.assert_allclose(pca.explained_variance_ratio_, ref.explained_variance_ratio_,
                               rtol=1e-6)
    assert pca.solver_ == "randomized" and pca.n_iter_ >= 2


def test_randomized_one_compute_per_pass():
    X = da.from_array(_spectrum_data(500, 120), chunks=(100, 40))
    calls = []
    import dkpca.blocked

    original = dkpca.blocked._progress.compute

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dkpca.blocked._progress, "compute", counting)
        pca = PCA(5, solver="randomized", random_state=0).fit(X)
    assert len(calls) == pca.n_iter_  # tall: statistics pass, then one compute per product


@pytest.mark.parametrize(("n", "d", "chunks"), [
    (500, 120, (100, 40)),  # tall: X_cᵀ (X_c V), a row stripe held
    (90, 700, (30, 200)),   # wide: X_c (X_cᵀ U), a feature stripe held
])
def test_randomized_reads_each_block_once_per_pass(monkeypatch, n, d, chunks):
    """One pass a product where a stripe fits a worker's budget, else two; one read a pass."""
    import dkpca._pca_randomized

    X = _spectrum_data(n, d)
    reads = []

    def counted(block):
        if block.size:  # map_blocks also calls it once on an empty meta array
            reads.append(1)
        return block

    data = da.from_array(X, chunks=chunks).map_blocks(counted, dtype=X.dtype)
    n_blocks = data.numblocks[0] * data.numblocks[1]
    fits = {}
    for stripes_fit in (True, False):
        if not stripes_fit:
            monkeypatch.setattr(dkpca._pca_randomized, "_stripe_budget", lambda: 0)
        reads.clear()
        with dask.config.set(scheduler="threads"):
            fits[stripes_fit] = PCA(5, solver="randomized", tol=1e-10, random_state=0).fit(data)
        assert len(reads) == fits[stripes_fit].n_iter_ * n_blocks  # each pass reads once
    # the statistics pass, the products, and (wide) one pass for the components
    fixed = 2 if d > n else 1
    assert fits[False].n_iter_ - fixed == 2 * (fits[True].n_iter_ - fixed)
    Xc = X - X.mean(axis=0)
    exact = np.linalg.svd(Xc, compute_uv=False)[:5] ** 2 / (n - 1)
    for pca in fits.values():
        np.testing.assert_allclose(pca.explained_variance_, exact, rtol=1e-9)


@pytest.mark.parametrize("chunks", [None, (300, 70), (80, 600)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_randomized_products_slab_by_slab(monkeypatch, chunks, dtype):
    """Blocks far taller than a slab (8 rows here) give the same fit as one slab a block."""
    import dkpca._pca_products

    shape = (600, 140) if chunks != (80, 600) else (160, 1200)
    X = _spectrum_data(*shape).astype(dtype)
    data = X if chunks is None else da.from_array(X, chunks=chunks)
    whole = PCA(6, solver="randomized", tol=1e-10, random_state=0).fit(data)
    monkeypatch.setattr(dkpca._pca_products, "SLAB_BYTES", 1)  # 8-row slabs
    slabs = PCA(6, solver="randomized", tol=1e-10, random_state=0).fit(data)
    assert whole.n_iter_ == slabs.n_iter_
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(slabs.explained_variance_, whole.explained_variance_, rtol=rtol)
    Xc = X.astype(np.float64) - X.astype(np.float64).mean(axis=0)
    exact = np.linalg.svd(Xc, compute_uv=False)[:6] ** 2 / (len(X) - 1)
    np.testing.assert_allclose(slabs.explained_variance_, exact, rtol=1e-6)


def test_randomized_float32_and_tight_tolerance():
    X = _spectrum_data(400, 50).astype(np.float32)
    pca = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(X)
    assert pca.components_.dtype == np.float32
    ref = SkPCA(4, svd_solver="full").fit(X.astype(np.float64))
    np.testing.assert_allclose(pca.explained_variance_, ref.explained_variance_, rtol=1e-5)


def test_float32_block_products_keep_float64_accuracy_of_the_centring():
    """Float32 GEMMs on a block far from the origin: the float32 mean's rounding comes back."""
    from dkpca._pca_products import centred_rtimes, centred_times

    rng = np.random.default_rng(0)
    X = (rng.normal(size=(300, 70)) + rng.uniform(1e3, 1e4, 70)).astype(np.float32)
    mean = X.astype(np.float64).mean(axis=0)
    V, U = rng.normal(size=(70, 5)), rng.normal(size=(300, 5))
    Xc = X.astype(np.float64) - mean
    for dtype in (np.float64, np.float32):
        product, rproduct = centred_times(X, V, mean, dtype), centred_rtimes(X, U, mean, dtype)
        assert product.dtype == rproduct.dtype == np.float64
        # without the rank-one term for μ - float32(μ) the error would be about 1e-4 here
        rtol = 1e-12 if dtype == np.float64 else 3e-6
        assert np.abs(product - Xc @ V).max() <= rtol * np.abs(Xc @ V).max()
        assert np.abs(rproduct - Xc.T @ U).max() <= rtol * np.abs(Xc.T @ U).max()


@pytest.mark.parametrize("chunks", [None, (100, 30)])
def test_randomized_products_in_float32_only_where_the_tolerance_allows(monkeypatch, chunks):
    """float32 data at tol >= 1e-6: float32 GEMMs, errors within tol of the first eigenvalue;
    at a tighter tol, float64 products reach it."""
    import dkpca._pca_products

    X = _spectrum_data(400, 90, mean=500.0).astype(np.float32)
    data = X if chunks is None else da.from_array(X, chunks=chunks)
    Xc = X.astype(np.float64) - X.astype(np.float64).mean(axis=0)
    exact = np.linalg.svd(Xc, compute_uv=False)[:5] ** 2 / (len(X) - 1)
    seen = set()
    original = dkpca._pca_products.centred_times

    def spy(block, V, mean, dtype=np.float64):
        seen.add(np.dtype(dtype))
        return original(block, V, mean, dtype)

    for module in ("dkpca._pca_randomized", "dkpca._pca_stripes"):  # the two that call it
        monkeypatch.setattr(f"{module}.centred_times", spy)
    for tol, dtype, rtol in ((1e-6, np.float32, 1e-6), (1e-11, np.float64, 1e-10)):
        seen.clear()
        pca = PCA(5, solver="randomized", tol=tol, random_state=0).fit(data)
        assert seen == {np.dtype(dtype)}
        # float32 explained variances: compare the float64 eigenvalues behind them
        errors = np.abs(pca.explained_variance_.astype(np.float64) - exact) / exact[0]
        assert errors.max() <= max(rtol, 1e-7)


def test_auto_chooses_randomized_beyond_the_memory_budget():
    X = _spectrum_data(200, 150)
    assert PCA(3).fit(X).solver_ == "covariance"
    assert PCA(3, memory_budget=8 * 100 * 100).fit(X).solver_ == "randomized"
    # a fraction needs the whole spectrum: the exact solver even beyond the budget
    assert PCA(0.5, memory_budget=8 * 100 * 100).fit(X).solver_ == "covariance"


def test_randomized_refuses_what_needs_the_whole_spectrum():
    X = _spectrum_data(200, 20)
    with pytest.raises(ValueError, match="integer n_components"):
        PCA(0.5, solver="randomized").fit(X)
    with pytest.raises(ValueError, match="whole spectrum"):
        PCA("mle", solver="randomized").fit(X)


def test_randomized_warns_when_not_converged():
    from sklearn.exceptions import ConvergenceWarning

    X = np.random.default_rng(0).normal(size=(3000, 600))  # flat spectrum
    with pytest.warns(ConvergenceWarning, match="did not reach"):
        PCA(2, solver="randomized", tol=1e-12, max_iter=2, random_state=0).fit(X)


@pytest.mark.distributed
def test_randomized_on_a_distributed_cluster(client):
    X = _spectrum_data(400, 90)
    local = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(X)
    remote = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(
        da.from_array(X, chunks=(100, 30)))
    np.testing.assert_allclose(remote.explained_variance_, local.explained_variance_,
                               rtol=1e-9)
    np.testing.assert_allclose(remote.components_, local.components_, atol=1e-7)


@pytest.mark.distributed
def test_randomized_sends_its_vectors_beside_the_graph(client):
    """V (a row per sample or feature) is scattered, not embedded in each pass's graph."""
    X = _spectrum_data(3000, 400)  # tall: V is 400 x 20 float64, 64 kB a pass
    data = da.from_array(X, chunks=(1000, 200)).persist()  # on the workers: not in the graph
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "40kB"}), \
            warnings.catch_warnings():
        warnings.filterwarnings("error", message="Sending large graph")
        pca = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(data)
    exact = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)[:4] ** 2 / (len(X) - 1)
    np.testing.assert_allclose(pca.explained_variance_, exact, rtol=1e-9)
    # in-memory data stay in this process: the statistics pass ships nothing either
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "40kB"}), \
            warnings.catch_warnings():
        warnings.filterwarnings("error", message="Sending large graph")
        local = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(X)
    np.testing.assert_allclose(local.explained_variance_, exact, rtol=1e-9)


def test_sparse_column_of_large_mean_still_varies():
    """The no-variance floor of sparse moments is a rounding bound over columns (eps·Σμ²
    times the rows summed), not d·max μ², which exceeded the real total next to one
    large-mean column: a false "do not vary" warning and zero ratios."""
    import scipy.sparse

    rng = np.random.default_rng(0)
    B = (rng.random((500, 100)) < 0.05).astype(float)
    B[:, 0] = 1e6 + rng.normal(size=500)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "do not vary" warning
        model = PCA(3).fit(scipy.sparse.csr_matrix(B))
    reference = SkPCA(3, svd_solver="full").fit(B)
    np.testing.assert_allclose(model.explained_variance_ratio_,
                               reference.explained_variance_ratio_, rtol=1e-2)
    np.testing.assert_allclose(model.explained_variance_ratio_,
                               model.explained_variance_ / np.var(B, axis=0, ddof=1).sum(),
                               rtol=1e-2)  # sparse moments lose log10(μ²/σ²) digits


@pytest.mark.parametrize("value", [0.1, 1e6 + 0.1, 7.77])
def test_constant_sparse_data_still_warns(value):
    import scipy.sparse

    X = scipy.sparse.csr_matrix(np.full((2000, 3), value) * [1.0, 3.0, 0.5])
    with pytest.warns(UserWarning, match="do not vary"):
        model = PCA(2).fit(X)
    np.testing.assert_array_equal(model.explained_variance_ratio_, 0.0)
