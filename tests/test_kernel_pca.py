"""KernelPCA against scikit-learn's dense KernelPCA, and its contracts."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import match_signs
from sklearn.base import clone
from sklearn.decomposition import KernelPCA as SkKernelPCA
from sklearn.exceptions import NotFittedError

from dkpca import KernelPCA
from dkpca.kernels import RBF, Linear, Polynomial
from dkpca.options import ICF, FixedSize, Nystrom, Randomized

KERNELS = ["rbf", "poly", "sigmoid", "linear"]


_REFERENCES: dict = {}


def _reference(X, kernel, n_components, dataset):
    """scikit-learn's dense fit, computed once per data set, kernel and size."""
    key = (dataset, kernel, n_components)
    if key not in _REFERENCES:
        _REFERENCES[key] = SkKernelPCA(n_components, kernel=kernel, eigen_solver="dense").fit(X)
    return _REFERENCES[key]


def _n_components(dataset, kernel):
    # Two-moons features span 2 (linear) and 9 (cubic) centred dimensions.
    return {"linear": 2, "poly": 8}.get(kernel, 10) if dataset == "moons" else 10


def _data(request, name):
    X = request.getfixturevalue(name)
    rng = np.random.default_rng(0)
    train = rng.permutation(len(X))
    return X[train[: len(X) * 4 // 5]], X[train[len(X) * 4 // 5 :]]


@pytest.mark.parametrize("dataset", ["digits", "moons"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_exact_matches_sklearn_dense(request, dataset, kernel):
    X, X_new = _data(request, dataset)
    n_components = _n_components(dataset, kernel)
    ref = _reference(X, kernel, n_components, dataset)
    kp = KernelPCA(n_components, kernel=kernel, solver="exact").fit(X)
    np.testing.assert_allclose(kp.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    got, expected = kp.transform(X_new), ref.transform(X_new)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(match_signs(got, expected), expected, rtol=0, atol=1e-8 * scale)
    train_scores = kp.fit_transform(X)
    np.testing.assert_allclose(
        match_signs(train_scores, ref.transform(X)), ref.transform(X), atol=1e-8 * scale
    )


@pytest.mark.parametrize("dataset", ["digits", "moons"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_randomized_matches_sklearn_dense(request, dataset, kernel, global_random_seed):
    X, X_new = _data(request, dataset)
    n_components = _n_components(dataset, kernel)
    ref = _reference(X, kernel, n_components, dataset)
    kp = KernelPCA(
        n_components, kernel=kernel, solver="randomized", random_state=global_random_seed
    ).fit(X)
    assert kp.solver_ == "randomized"
    # The Krylov residuals are relative to the largest eigenvalue, and so is the accuracy of a
    # tail eigenvalue 1e4 times smaller (sigmoid on moons: 6e-9 of λ1 with scipy 1.17.1).
    np.testing.assert_allclose(kp.eigenvalues_, ref.eigenvalues_, rtol=1e-4,
                               atol=1e-8 * ref.eigenvalues_[0])
    got, expected = kp.transform(X_new), ref.transform(X_new)
    np.testing.assert_allclose(
        match_signs(got, expected), expected, atol=1e-3 * np.abs(expected).max()
    )


@pytest.mark.parametrize(("cache_dtype", "rtol"), [("float64", 1e-10), ("float32", 1e-7)])
@pytest.mark.parametrize("max_memory", ["1GiB", 1000])
def test_randomized_streaming_equals_cached(digits, max_memory, cache_dtype, rtol):
    # max_memory=1000 bytes forces the tiles to be re-evaluated on every pass; streamed float32
    # tiles take their shift from a subsample, so they round a little differently.
    X = digits[:700]
    kwargs = {"solver": Randomized(cache_dtype=cache_dtype), "random_state": 0,
              "block_size": 200 * 200 * 8}
    cached = KernelPCA(5, **kwargs).fit(X)
    other = KernelPCA(5, max_memory=max_memory, **kwargs).fit(X)
    np.testing.assert_allclose(other.eigenvalues_, cached.eigenvalues_, rtol=rtol)
    np.testing.assert_allclose(other.transform(X[:20]), cached.transform(X[:20]),
                               atol=1e2 * rtol)


@pytest.mark.parametrize(("cache_dtype", "rtol"), [("float64", 1e-12), ("float32", 1e-7)])
def test_same_result_for_any_chunking(digits, cache_dtype, rtol):
    # Chunks never matter; tile sizes change float32 rounding only (each tile its own shift).
    X = digits[:600]
    kwargs = {"solver": Randomized(cache_dtype=cache_dtype), "random_state": 1}
    reference = KernelPCA(6, **kwargs).fit(X)
    for chunks in [(600, -1), (100, -1), ((250, 7, 343), -1)]:
        kp = KernelPCA(6, block_size=150 * 150 * 8, **kwargs)
        kp.fit(da.from_array(X, chunks=chunks))
        np.testing.assert_allclose(kp.eigenvalues_, reference.eigenvalues_, rtol=rtol)
        np.testing.assert_allclose(kp.transform(X[:9]), reference.transform(X[:9]),
                                   atol=1e2 * rtol)


@pytest.mark.distributed
def test_same_result_under_distributed_client(digits, client):
    X = digits[:500]
    Xd = da.from_array(X, chunks=(120, -1))
    # float32 tiles (the randomized default here) round differently when a float32 GEMM or
    # reduction runs on differently aligned memory (the allocation history decides): about
    # 1e-8 relative on the eigenvalues, the accuracy such tiles promise
    for solver, rtol in [("exact", 1e-12), (Randomized(cache_dtype="float64"), 1e-12),
                         (Randomized(cache_dtype="auto"), 1e-6)]:
        kwargs = {"solver": solver, "random_state": 0, "block_size": 150 * 150 * 8}
        with_client = KernelPCA(5, **kwargs).fit(Xd)
        scores = with_client.transform(Xd).compute()
        client_free = KernelPCA(5, **kwargs)
        with dask.config.set(scheduler="threads"):
            client_free.fit(Xd)
            expected = client_free.transform(Xd).compute()
        np.testing.assert_allclose(with_client.eigenvalues_, client_free.eigenvalues_, rtol=rtol)
        np.testing.assert_allclose(match_signs(scores, expected), expected, atol=1e2 * rtol)


def test_dask_in_dask_out_lazily(digits, no_compute):
    kp = KernelPCA(4, solver="exact").fit(digits[:300])
    Xd = da.from_array(digits[300:400], chunks=(30, -1))
    with no_compute():
        Z = kp.transform(Xd)
    assert isinstance(Z, da.Array) and Z.chunks == (Xd.chunks[0], (4,))
    np.testing.assert_allclose(Z.compute(), kp.transform(digits[300:400]), atol=1e-12)
    assert isinstance(kp.transform(digits[:5]), np.ndarray)


def test_fit_transform_with_dask_input_is_dask(digits):
    Xd = da.from_array(digits[:300], chunks=(100, -1))
    Z = KernelPCA(3, solver="exact").fit_transform(Xd)
    assert isinstance(Z, da.Array) and Z.chunks[0] == (100, 100, 100)


def test_xarray_input(digits):
    X = xr.DataArray(digits[:200], dims=("sample", "pixel"))
    Z = KernelPCA(3, solver="exact").fit(X).transform(X)
    np.testing.assert_allclose(Z, KernelPCA(3, solver="exact").fit(digits[:200]).transform(X))


def test_float32_stays_float32(digits):
    X = digits[:300].astype(np.float32)
    kp = KernelPCA(3, solver="exact").fit(X)
    assert kp.transform(X).dtype == np.float32
    ref = KernelPCA(3, solver="exact").fit(X.astype(np.float64))
    np.testing.assert_allclose(kp.eigenvalues_, ref.eigenvalues_, rtol=1e-4)


@pytest.mark.parametrize("solver", ["exact", "randomized", "nystrom", "sketch", "fixed_size",
                                    "icf"])
@pytest.mark.parametrize("lazy", [False, True])
def test_fit_transform_comes_in_transforms_dtype(digits, solver, lazy):
    X = digits[:200].astype(np.float32)
    X = da.from_array(X, chunks=(50, -1)) if lazy else X
    kp = KernelPCA(3, solver=solver, random_state=0)
    scores = kp.fit_transform(X)
    assert scores.dtype == kp.transform(X).dtype == np.float32
    np.testing.assert_allclose(np.abs(np.asarray(scores)), np.abs(np.asarray(kp.transform(X))),
                               atol=1e-3 * float(np.abs(np.asarray(scores)).max()))


def test_attributes_and_sklearn_api(digits):
    kp = KernelPCA(5, kernel="rbf", sigma2=32.0, solver="exact").fit(digits[:400])
    assert kp.kernel_ == RBF(sigma2=32.0) and kp.gamma_ == pytest.approx(1 / 64)
    assert kp.n_components_ == 5 and kp.n_features_in_ == 64 and kp.n_iter_ == 1
    np.testing.assert_allclose(kp.explained_variance_, kp.eigenvalues_ / 400)
    assert np.all(np.diff(kp.eigenvalues_) <= 0)
    assert 0 < kp.explained_variance_ratio_.sum() < 1
    np.testing.assert_allclose(kp.eigenvectors_.T @ kp.eigenvectors_, np.eye(5), atol=1e-10)
    cloned = clone(kp)
    assert cloned.get_params() == kp.get_params() and not hasattr(cloned, "basis_")
    assert list(kp.get_feature_names_out()) == [f"kernelpca{i}" for i in range(5)]
    assert "KernelPCA(" in repr(kp)


def test_default_gamma_is_inverse_features(digits):
    kp = KernelPCA(2, solver="exact").fit(digits[:100])
    assert kp.gamma_ == pytest.approx(1 / 64)
    assert KernelPCA(2, kernel="linear", solver="exact").fit(digits[:100]).gamma_ is None


def test_kernel_object_and_sum(digits):
    X = digits[:300]
    kernel = RBF(gamma=0.01) + Linear()
    kp = KernelPCA(4, kernel=kernel, solver="exact").fit(X)
    K = kernel.pairwise(X)
    H = np.eye(300) - 1 / 300
    expected = np.sort(np.linalg.eigvalsh(H @ K @ H))[::-1][:4]
    np.testing.assert_allclose(kp.eigenvalues_, expected, rtol=1e-9)


@pytest.mark.parametrize("solver", ["exact", "randomized"])
def test_variance_fraction_rule(digits, solver):
    X = digits[:800]
    full = KernelPCA(None, solver="exact").fit(X)
    ratios = np.cumsum(full.eigenvalues_) / full.eigenvalues_.sum()
    expected = int(np.searchsorted(ratios, 0.5) + 1)
    kp = KernelPCA(0.5, solver=solver, random_state=0).fit(X)
    assert kp.n_components_ == expected
    assert kp.explained_variance_ratio_.sum() >= 0.5 > kp.explained_variance_ratio_[:-1].sum()


@pytest.mark.parametrize("solver", ["exact", "randomized"])
def test_relative_eigenvalue_threshold_rule(digits, solver):
    X = digits[:800]
    kp = KernelPCA(
        40 if solver == "randomized" else None, min_relative_eigenvalue=0.1,
        solver=solver, random_state=0,
    ).fit(X)
    full = KernelPCA(None, solver="exact").fit(X).eigenvalues_
    assert kp.n_components_ == np.count_nonzero(full >= 0.1 * full[0])
    assert kp.eigenvalues_[-1] >= 0.1 * kp.eigenvalues_[0]


def test_all_components_drops_zero_eigenvalues(digits):
    kp = KernelPCA(None, kernel="linear").fit(digits[:200])
    assert kp.solver_ == "exact" and kp.n_components_ <= 64


def test_rank_deficient_count_warns():
    X = np.random.default_rng(0).normal(size=(50, 3))
    assert KernelPCA(5, kernel="linear", solver="exact").fit(X).n_components_ == 5  # zeros
    with pytest.warns(UserWarning, match="only 3 of the 5 requested components") as record:
        kp = KernelPCA(5, kernel="linear", solver="exact", remove_zero_eig=True).fit(X)
    assert record[0].filename == __file__  # points at the caller, not at dkpca
    assert kp.n_components_ == 3


def test_auto_solver_choice(digits, moons):
    assert KernelPCA(5).fit(digits).solver_ == "exact"  # n <= 2000
    big = np.random.default_rng(0).normal(size=(2500, 3))
    assert KernelPCA(5, random_state=0).fit(big).solver_ == "randomized"
    assert KernelPCA(600).fit(big).solver_ == "exact"  # more than n / 5 components
    assert KernelPCA(5, max_memory=1000, random_state=0).fit(moons).solver_ == "randomized"


def test_random_state_reproducible(digits):
    a = KernelPCA(5, solver="randomized", random_state=7).fit(digits)
    b = KernelPCA(5, solver="randomized", random_state=np.random.default_rng(7)).fit(digits)
    c = KernelPCA(5, solver="randomized", random_state=7).fit(digits)
    np.testing.assert_array_equal(a.eigenvectors_, c.eigenvectors_)
    np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-6)


def test_not_converged_warns(digits):
    with pytest.warns(UserWarning, match="stopped after 1 passes"):
        KernelPCA(5, solver=Randomized(max_iter=1), random_state=0).fit(digits)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("X", "error", "message"),
    [
        (np.array([[1.0, np.nan], [2.0, 3.0]]), ValueError, "NaN or infinity"),
        (np.array([[1.0, np.inf], [2.0, 3.0]]), ValueError, "NaN or infinity"),
        (np.ones((1, 3)), ValueError, "at least 2 samples, got n_samples=1"),
        (np.ones(5), ValueError, r"must be 2-D.*X.reshape\(-1, 1\)"),
        (np.ones((2, 3, 4)), ValueError, "must be 2-D"),
        (np.ones((0, 3)), ValueError, "empty"),
        (np.array([["a", "b"], ["c", "d"]]), ValueError, "non-numeric dtype"),
        (np.ones((3, 2), dtype=complex), ValueError, "complex dtype"),
        (3.0, ValueError, "got a scalar"),
    ],
)
def test_bad_input(X, error, message):
    with pytest.raises(error, match=message):
        KernelPCA(1, solver="exact").fit(X)


def test_nan_in_lazy_input_found_during_fit():
    X = np.random.default_rng(0).normal(size=(60, 3))
    X[17, 1] = np.nan
    X[3, 0] = np.inf
    for solver in ["exact", "randomized"]:
        for max_memory in ["auto", 100]:
            if solver == "exact" and max_memory == 100:
                continue
            kp = KernelPCA(2, solver=solver, max_memory=max_memory, random_state=0)
            with pytest.raises(ValueError, match="NaN or infinity"):
                kp.fit(da.from_array(X, chunks=20))


def test_overflowing_kernel_is_not_blamed_on_input():
    X = np.random.default_rng(0).normal(size=(30, 3)) * 1e3
    with pytest.raises(ValueError, match="non-finite entries"):
        KernelPCA(2, kernel="poly", degree=200, solver="exact").fit(X)


def test_too_many_components(digits):
    with pytest.raises(ValueError, match="n_components=200 is larger than possible"):
        KernelPCA(200).fit(digits[:100])


def test_feature_mismatch_at_transform(digits):
    kp = KernelPCA(2, solver="exact").fit(digits[:100])
    with pytest.raises(ValueError, match="X has 10 features, but KernelPCA is expecting 64"):
        kp.transform(digits[:5, :10])


def test_unfitted_use():
    with pytest.raises(NotFittedError, match="not fitted yet"):
        KernelPCA(2).transform(np.ones((3, 2)))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_components": 0}, "invalid n_components=0"),
        ({"n_components": 1.5}, "invalid n_components=1.5"),
        ({"kernel": "nope"}, "unknown kernel 'nope'"),
        ({"solver": "nystrom-ish"}, "invalid solver='nystrom-ish'"),
        ({"gamma": -1.0}, "invalid gamma=-1.0"),
        ({"gamma": 1.0, "sigma2": 2.0}, "gamma or sigma2, not both"),
        ({"kernel": "poly", "sigma2": 2.0}, "sigma2 applies to the rbf kernel only"),
        ({"degree": 0}, "invalid degree=0"),
        ({"solver": Randomized(tol=0)}, "invalid Randomized tol=0"),
        ({"solver": Randomized(max_iter=0)}, "invalid Randomized max_iter=0"),
        ({"block_size": "lots"}, "block_size='lots' is not a size"),
        ({"max_memory": -5}, "invalid max_memory=-5"),
        ({"random_state": "seed"}, "invalid random_state='seed'"),
        ({"n_components": None, "solver": "randomized"}, "needs n_components"),
        ({"solver": "exact", "max_memory": 1000}, "solver='randomized'"),
        ({"n_components": None, "max_memory": 1000}, "set n_components"),
    ],
)
def test_invalid_parameters(digits, params, message):
    params = {"n_components": 2, **params}
    with pytest.raises(ValueError, match=message):
        KernelPCA(**params).fit(digits[:50])


def _peak_bytes(fit) -> int:
    """Peak traced allocation of ``fit()``, after a warm-up call (first-use imports)."""
    import tracemalloc

    fit()
    tracemalloc.start()
    try:
        fit()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_exact_peak_memory_is_one_kernel_matrix(digits):
    # The kernel is gathered tile by tile into one array that LAPACK then uses as workspace:
    # no centred copy and no Fortran-order copy (either would double the peak).
    X = digits[:1500]
    kernel_bytes = 1500 * 1500 * 8
    peak = _peak_bytes(lambda: KernelPCA(5, solver="exact", block_size=150 * 150 * 8).fit(X))
    assert peak < 1.2 * kernel_bytes, f"peak {peak / kernel_bytes:.2f} x the kernel matrix"


def test_randomized_cache_holds_a_quarter_of_the_kernel(digits):
    from dkpca.solvers.randomized import block_width
    from dkpca.tiles import cached_kernel_bytes

    X = digits[:1600]
    n, block = 1600, 200 * 200 * 8
    kp = KernelPCA(5, solver="randomized", random_state=0, block_size=block)
    peak = _peak_bytes(lambda: kp.fit(X))
    tiles = cached_kernel_bytes(n, 4, block)  # float32 tiles, the upper half of K
    # The basis and its image are allocated for the whole pass budget (tracemalloc counts them
    # whole; only the columns filled take memory).
    krylov = 2 * n * min(n, block_width(5, n, None) * Randomized().max_iter) * 8
    assert tiles < 0.3 * n * n * 8
    copy = X.nbytes  # copy_X: the model's own copy of the training data
    # A product is summed as a double-double (high and low parts), on the holder and here.
    product = 4 * n * block_width(5, n, None) * 8
    assert peak < tiles + krylov + copy + product + 0.3 * n * n * 8, f"peak {peak / 2**20:.1f} MiB"


def test_long_randomized_run_has_no_ghost_eigenvalues():
    # Flat spectrum, a wide block and a Krylov basis that nearly fills the space: rounding
    # residue along the ones vector (where the uncentred kernel is huge) must not leak in.
    from sklearn.datasets import make_classification

    X, _ = make_classification(n_samples=1200, n_features=300, n_informative=10, random_state=0)
    exact = KernelPCA(8, solver="exact").fit(X)
    kp = KernelPCA(8, solver=Randomized(n_oversamples=60, tol=1e-12, max_iter=30),
                   random_state=0).fit(X)
    np.testing.assert_allclose(kp.eigenvalues_, exact.eigenvalues_, rtol=1e-8)


@pytest.mark.parametrize("solver", ["exact", "randomized", "nystrom", "sketch"])
def test_constant_data_fit_with_a_warning(solver):
    X = np.full((80, 3), 3.7)
    with pytest.warns(UserWarning, match="the training data do not vary"):
        model = KernelPCA(2, solver=solver, random_state=0).fit(X)
    assert np.all(model.eigenvalues_ == 0)
    varied = X + np.random.default_rng(0).normal(scale=1e-3, size=X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert KernelPCA(2, solver=solver, random_state=0).fit(varied).eigenvalues_[0] > 0


@pytest.mark.parametrize("first, second", [
    ({"solver": "randomized", "fit_inverse_transform": True}, {"solver": "exact"}),
    ({"solver": ICF(max_rank=30)}, {"solver": "exact"}),
    ({"solver": FixedSize(n_landmarks=30)}, {"solver": Nystrom(n_landmarks=30)}),
    ({"solver": Nystrom(n_landmarks=30)}, {"solver": "randomized"}),
])
def test_a_refit_keeps_nothing_from_the_previous_fit(first, second, tmp_path):
    import dkpca

    X = np.random.default_rng(0).normal(size=(120, 3))
    model = KernelPCA(2, random_state=0, **first).fit(X)
    model.set_params(**{**{k: KernelPCA().get_params()[k] for k in first}, **second}).fit(X)
    fresh = KernelPCA(2, random_state=0, **second).fit(X)
    fitted = {k for k in vars(model) if k.endswith("_")}
    assert fitted == {k for k in vars(fresh) if k.endswith("_")}
    dkpca.save(model, tmp_path / "m.zarr")
    saved = set(dkpca.load(tmp_path / "m.zarr").__dict__)
    assert not saved & {"dual_coef_", "residual_trace_", "entropy_trace_"} - fitted


@pytest.mark.parametrize("rows_limit, one_thread", [(10_000, True), (0, False)])
def test_the_krylov_bookkeeping_runs_on_one_blas_thread_for_few_rows(monkeypatch, rows_limit,
                                                                     one_thread):
    # After a multithreaded BLAS call OpenBLAS's idle threads spin and take cores from the
    # next pass, which is short when n is small: there the bookkeeping runs on one thread,
    # above the limit on every thread. The operator's own tasks set their own threads.
    from threadpoolctl import threadpool_limits

    from dkpca.linalg import blas_single_threaded
    from dkpca.solvers import randomized

    seen = []
    krylov = randomized.block_krylov_eigh

    def recording(matmul, start, k, **options):
        seen.append(blas_single_threaded())
        return krylov(matmul, start, k, **options)

    monkeypatch.setattr(randomized, "block_krylov_eigh", recording)
    monkeypatch.setattr(randomized, "ONE_THREAD_BOOKKEEPING_ROWS", rows_limit)
    X = np.random.default_rng(0).normal(size=(300, 4))
    with threadpool_limits(limits=2, user_api="blas"), dask.config.set(scheduler="threads"):
        KernelPCA(3, solver="randomized", random_state=0).fit(X)
        assert not blas_single_threaded()  # restored after the fit
    assert seen and all(value is one_thread for value in seen)


@pytest.mark.parametrize("kernel, params, named", [
    (RBF(), {"gamma": 5.0}, "gamma=5.0"),
    (RBF(), {"sigma2": 2.0}, "sigma2=2.0"),
    (Polynomial(degree=2), {"degree": 5, "coef0": 3.0}, "degree=5, coef0=3.0"),
])
def test_flat_kernel_parameters_next_to_a_kernel_object_are_refused(kernel, params, named):
    """They used to be ignored silently (gamma_ reported the object's own)."""
    X = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises(ValueError, match=f"{named} cannot be applied to kernel=.*carries its own"):
        KernelPCA(2, kernel=kernel, **params).fit(X)
    model = clone(KernelPCA(2, kernel=RBF(gamma=5.0))).fit(X)  # the object's own: fine
    assert model.gamma_ == 5.0
    assert KernelPCA(2, kernel=kernel).get_params()["gamma"] is None


def test_copy_x_copies_a_dataframe(digits):
    # The model's training rows must not be a view of the caller's frame: editing the frame
    # after fit changed the model's projections before.
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(digits[:100, :20].astype(np.float64))
    model = KernelPCA(3, kernel="rbf", gamma=0.01).fit(frame)
    before = np.asarray(model.transform(frame.to_numpy(copy=True)))
    frame.iloc[:, :] = 0.0
    np.testing.assert_array_equal(np.asarray(model.transform(digits[:100, :20])), before)


@pytest.mark.parametrize("solver", ["exact", "randomized", "sketch", "nystrom", "fixed_size",
                                    "icf"])
def test_a_model_fitted_on_dask_input_pickles(solver):
    # The landmark solvers keep a lazy eigenvectors_ built by kernel_product, whose task
    # function was a local one: pickle and joblib refused the fitted model.
    import io
    import pickle

    import joblib

    X = np.random.default_rng(0).normal(size=(60, 3))
    model = KernelPCA(2, solver=solver, random_state=0).fit(da.from_array(X, chunks=20))
    expected = np.asarray(model.transform(X))
    buffer = io.BytesIO()
    joblib.dump(model, buffer)
    buffer.seek(0)
    for loaded in (pickle.loads(pickle.dumps(model)), joblib.load(buffer)):
        np.testing.assert_allclose(np.asarray(loaded.transform(X)), expected, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(loaded.eigenvectors_),
                                   np.asarray(model.eigenvectors_), rtol=1e-12)


def _sigmoid_pca(**params):
    return KernelPCA(3, kernel="sigmoid", gamma=1.0, coef0=-1.0, fit_inverse_transform=True,
                     **params)


def test_a_failed_fit_leaves_the_model_unfitted():
    # The learned pre-image's ridge system of an indefinite kernel failed after the spectrum
    # was set: the model transformed, and inverse_transform blamed fit_inverse_transform.
    from dkpca._validation import check_is_fitted

    X = np.random.default_rng(0).normal(size=(60, 3))
    model = _sigmoid_pca(alpha=1e3).fit(X)  # fitted first: nothing of it may linger either
    lowest = np.linalg.eigvalsh(model.kernel_.pairwise(model.transform(X)))[0]
    assert lowest < -1e-3  # the sigmoid kernel is indefinite on these scores
    model.set_params(alpha=1e-3)
    with pytest.raises(np.linalg.LinAlgError, match=f"raise alpha above {-lowest:.3g}"):
        model.fit(X)
    assert not [name for name in vars(model) if name.endswith("_")]
    with pytest.raises(NotFittedError):
        check_is_fitted(model, "basis_")
    with pytest.raises(NotFittedError, match="not fitted yet"):
        model.transform(X)
    model.set_params(alpha=1.5 * -lowest).fit(X)  # the suggested alpha solves
    assert model.inverse_transform(model.transform(X[:2])).shape == (2, 3)


def test_a_failed_partial_fit_leaves_the_model_as_it_was():
    X = np.random.default_rng(0).normal(size=(60, 3))
    model = _sigmoid_pca(alpha=1e3, solver=Nystrom(landmarks=X[:20])).partial_fit(X[:30])
    before = dict(vars(model))
    with pytest.raises(np.linalg.LinAlgError, match="raise alpha above"):
        model.set_params(alpha=1e-3).partial_fit(X[30:])
    assert vars(model).keys() == before.keys()
    assert all(vars(model)[name] is value for name, value in before.items() if name != "alpha")
    assert model.n_samples_seen_ == 30


@pytest.mark.parametrize("solver", ["exact", "randomized", "sketch", "nystrom", "fixed_size",
                                    "icf"])
def test_a_relative_eigenvalue_cut_of_a_count_does_not_warn(solver):
    # The user's threshold keeps fewer than the count: no "only k of the n requested
    # components have a positive eigenvalue" (the full-kernel solvers said so; Nyström did not).
    X = np.random.default_rng(0).normal(size=(60, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kp = KernelPCA(10, min_relative_eigenvalue=0.3, solver=solver, random_state=0).fit(X)
    assert np.all(kp.eigenvalues_ >= 0.3 * kp.eigenvalues_[0])
    if solver == "exact":
        K = RBF(gamma=1 / 3).pairwise(X)
        H = np.eye(60) - 1 / 60
        full = np.linalg.eigvalsh(H @ K @ H)[::-1]
        assert kp.n_components_ == np.count_nonzero(full >= 0.3 * full[0]) < 10
