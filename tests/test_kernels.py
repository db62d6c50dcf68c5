import json
import pickle
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import (
    additive_chi2_kernel,
    chi2_kernel,
    cosine_similarity,
    laplacian_kernel,
    linear_kernel,
    polynomial_kernel,
    rbf_kernel,
    sigmoid_kernel,
)

import dkpca.kernels
import dkpca.kernels._base
from dkpca.kernels import (
    RBF,
    AdditiveChi2,
    CallableKernel,
    Chi2,
    Cosine,
    Kernel,
    Laplacian,
    Linear,
    Polynomial,
    Sigmoid,
    SumKernel,
    get_kernel,
    kernel_from_config,
)


@pytest.fixture
def blocks():
    rng = np.random.default_rng(0)
    return rng.normal(size=(40, 7)), rng.normal(size=(25, 7)) * 2 + 1


CASES = [
    (RBF(gamma=0.3), lambda X, Y: rbf_kernel(X, Y, gamma=0.3)),
    (Polynomial(degree=3, gamma=0.2, coef0=1.5),
     lambda X, Y: polynomial_kernel(X, Y, degree=3, gamma=0.2, coef0=1.5)),
    (Sigmoid(gamma=0.1, coef0=-0.5), lambda X, Y: sigmoid_kernel(X, Y, gamma=0.1, coef0=-0.5)),
    (Linear(), linear_kernel),
]


@pytest.mark.parametrize(("kernel", "reference"), CASES, ids=lambda c: repr(c)[:12])
def test_pairwise_equals_sklearn(kernel, reference, blocks):
    X, Y = blocks
    np.testing.assert_allclose(kernel.pairwise(X, Y), reference(X, Y), rtol=0, atol=1e-10)
    np.testing.assert_allclose(kernel.pairwise(X), reference(X, X), rtol=0, atol=1e-10)


@pytest.mark.parametrize(("kernel", "reference"), CASES, ids=lambda c: repr(c)[:12])
def test_diag_equals_matrix_diagonal(kernel, reference, blocks):
    X, _ = blocks
    np.testing.assert_allclose(kernel.diag(X), np.diag(reference(X, X)), atol=1e-10)


@pytest.mark.parametrize(
    ("kernel", "reference"),
    [*CASES, (RBF(gamma=0.3) + Linear(), lambda X, Y: rbf_kernel(X, Y, gamma=0.3) + X @ Y.T)],
    ids=lambda c: repr(c)[:12],
)
def test_pairwise_offset_adds_up_to_the_kernel(kernel, reference, blocks):
    X, Y = blocks
    K, c = kernel.pairwise_offset(X, Y)
    np.testing.assert_allclose(K + c, reference(X, Y), rtol=0, atol=1e-10)


def test_rbf_offset_keeps_the_digits_of_a_nearly_constant_kernel(blocks):
    X, Y = (b.astype(np.float32) for b in blocks)
    kernel = RBF(gamma=1e-7)
    K, c = kernel.pairwise_offset(X, Y)
    assert c == 1.0 and K.dtype == np.float32
    exact = np.expm1(-1e-7 * ((X[:, None, :].astype(float) - Y[None]) ** 2).sum(-1))
    np.testing.assert_allclose(K, exact, rtol=1e-4)
    naive = kernel.pairwise(X, Y).astype(float) - 1  # exp() in float32 keeps a few digits
    assert np.abs((naive - exact) / exact).max() > 1e-3


@pytest.mark.parametrize("kernel", [k for k, _ in CASES], ids=repr)
def test_float32_stays_float32(kernel, blocks):
    X, Y = (b.astype(np.float32) for b in blocks)
    K = kernel.pairwise(X, Y)
    assert K.dtype == np.float32
    np.testing.assert_allclose(K, kernel.pairwise(X.astype(float), Y.astype(float)), atol=1e-4)
    assert kernel.pairwise(X, Y.astype(float)).dtype == np.float64


def test_rbf_parameterisations_agree(blocks):
    X, Y = blocks
    by_gamma = RBF(gamma=0.125).pairwise(X, Y)
    np.testing.assert_allclose(RBF(sigma2=4.0).pairwise(X, Y), by_gamma, rtol=1e-14)
    np.testing.assert_allclose(RBF(c=8.0).pairwise(X, Y), by_gamma, rtol=1e-14)
    assert RBF(sigma2=4.0).sigma2 == 4.0 and RBF(c=8.0).c == 8.0


def test_default_gamma_resolves_to_inverse_features():
    assert RBF().with_defaults(8).gamma == 0.125
    assert Polynomial(degree=2).with_defaults(4).gamma == 0.25
    assert RBF(gamma=2.0).with_defaults(8).gamma == 2.0


def test_sum_kernel(blocks):
    X, Y = blocks
    k = RBF(gamma=0.3) + Linear() + Polynomial(2, 0.1, 0.0)
    assert isinstance(k, SumKernel) and len(k.kernels) == 3
    expected = rbf_kernel(X, Y, gamma=0.3) + X @ Y.T + (0.1 * X @ Y.T) ** 2
    np.testing.assert_allclose(k.pairwise(X, Y), expected, atol=1e-10)
    np.testing.assert_allclose(k.diag(X), np.diag(k.pairwise(X)), atol=1e-10)


@pytest.mark.parametrize(
    "kernel",
    [RBF(gamma=0.3), RBF(), Polynomial(4, None, 2.0), Sigmoid(0.5, 0.0), Linear(),
     RBF(sigma2=2.0) + Linear(), Laplacian(), Laplacian(gamma=0.7), Cosine(), Chi2(),
     Chi2(gamma=0.2), AdditiveChi2(), Laplacian(0.5) + Chi2(2.0)],
    ids=repr,
)
def test_config_round_trips_through_json(kernel):
    config = json.loads(json.dumps(kernel.get_config()))
    rebuilt = Kernel.from_config(config)
    assert rebuilt == kernel and repr(rebuilt) == repr(kernel)
    assert kernel_from_config(config).get_config() == kernel.get_config()


def test_large_block_times_itself_does_not_use_one_buffer():
    # X @ X.T on one buffer can crash OpenBLAS's syrk (API notes); the kernels multiply
    # distinct augmented copies, so the same block on both sides is safe and symmetric.
    X = np.random.default_rng(1).normal(size=(300, 5))
    K = Linear().pairwise(X)
    np.testing.assert_allclose(K, K.T, atol=1e-12)


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: RBF(gamma=-1.0), "gamma must be a positive"),
        (lambda: RBF(gamma=1.0, sigma2=2.0), "at most one of gamma, sigma2 and c"),
        (lambda: RBF(c=0.0), "c must be a positive"),
        (lambda: Polynomial(degree=0), "degree must be an int >= 1"),
        (lambda: Polynomial(degree=2.5), "degree must be an int >= 1"),
        (lambda: Sigmoid(coef0=float("nan")), "coef0 must be a finite"),
        (lambda: SumKernel(RBF()), "at least two"),
        (lambda: get_kernel("nope"), "unknown kernel 'nope'.*callable"),
        (lambda: get_kernel("sum"), "unknown kernel 'sum'"),
        (lambda: Laplacian(gamma=0.0), "gamma must be a positive"),
        (lambda: Chi2(gamma=-2.0), "gamma must be a positive"),
        (lambda: kernel_from_config({"name": "nope"}), "unknown kernel 'nope'"),
        (lambda: kernel_from_config("rbf"), "not a kernel config"),
    ],
)
def test_bad_kernel_parameters(factory, message):
    with pytest.raises(ValueError, match=message):
        factory()


def test_feature_mismatch_between_blocks():
    with pytest.raises(ValueError, match="different numbers of features: 3 and 4"):
        RBF(gamma=1.0).pairwise(np.ones((2, 3)), np.ones((2, 4)))


def test_get_kernel_by_name_and_alias():
    assert get_kernel("poly", degree=2, gamma=None, coef0=0.0) == Polynomial(2, None, 0.0)
    assert get_kernel("gaussian", gamma=0.5) == RBF(gamma=0.5)
    assert get_kernel("rbf", sigma2=0.5) == RBF(gamma=1.0)
    k = Linear()
    assert get_kernel(k) is k


# --- Laplacian, cosine, chi2 and additive chi2 against scikit-learn ---------------------------


def _histograms(rng, n, d):
    """Non-negative data with exact zeros, a feature that is 0 everywhere and a zero row."""
    H = rng.random((n, d)) * (rng.random((n, d)) < 0.6)
    H[:, 0] = 0.0  # x_k + y_k == 0 for every pair in this feature
    H[1] = 0.0
    return H


@pytest.fixture
def histograms():
    rng = np.random.default_rng(3)
    return _histograms(rng, 30, 6), _histograms(rng, 20, 6) * 3


@pytest.fixture
def signed():
    """Normal data with zero rows on both sides (cosine's special case)."""
    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(30, 6)), rng.normal(size=(20, 6)) * 2 + 1
    X[2] = 0.0
    Y[5] = 0.0
    return X, Y


NEW_CASES = [
    (Laplacian(gamma=0.3), lambda X, Y: laplacian_kernel(X, Y, gamma=0.3), "signed"),
    (Laplacian(), lambda X, Y: laplacian_kernel(X, Y), "signed"),  # 1 / n_features both
    (Cosine(), cosine_similarity, "signed"),
    (Chi2(), chi2_kernel, "histograms"),
    (Chi2(gamma=0.4), lambda X, Y: chi2_kernel(X, Y, gamma=0.4), "histograms"),
    (AdditiveChi2(), additive_chi2_kernel, "histograms"),
]


@pytest.fixture
def data(request, signed, histograms):
    return {"signed": signed, "histograms": histograms}[request.param]


def _new_cases():
    return [pytest.param(k, ref, d, id=repr(k)) for k, ref, d in NEW_CASES]


@pytest.mark.parametrize(("kernel", "reference", "data"), _new_cases(), indirect=["data"])
def test_new_kernels_equal_sklearn(kernel, reference, data):
    X, Y = data
    np.testing.assert_allclose(kernel.pairwise(X, Y), reference(X, Y), rtol=0, atol=1e-10)
    np.testing.assert_allclose(kernel.pairwise(X), reference(X, X), rtol=0, atol=1e-10)
    np.testing.assert_allclose(kernel.diag(X), np.diag(reference(X, X)), rtol=0, atol=1e-10)
    K, c = kernel.pairwise_offset(X, Y)
    np.testing.assert_allclose(K + c, reference(X, Y), rtol=0, atol=1e-10)


@pytest.mark.parametrize(("kernel", "reference", "data"), _new_cases(), indirect=["data"])
def test_new_kernels_in_float32(kernel, reference, data):
    X, Y = (b.astype(np.float32) for b in data)
    K = kernel.pairwise(X, Y)
    assert K.dtype == np.float32 and kernel.diag(X).dtype == np.float32
    expected = reference(X.astype(float), Y.astype(float))
    np.testing.assert_allclose(K, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    assert kernel.pairwise(X, Y.astype(float)).dtype == np.float64


def test_cosine_zero_rows_give_zero(signed):
    X, Y = signed
    K = Cosine().pairwise(X, Y)
    assert np.all(K[2] == 0) and np.all(K[:, 5] == 0)
    assert Cosine().diag(X)[2] == 0 and np.all(np.delete(Cosine().diag(X), 2) == 1)
    assert np.isnan(Cosine().pairwise(np.array([[np.nan, 1.0]]), Y[:, :2])).all()


def test_chi2_zero_sum_features_count_as_zero():
    X = np.array([[0.0, 1.0, 2.0]])
    Y = np.array([[0.0, 3.0, 0.0]])
    # by hand: (1 - 3)² / 4 + (2 - 0)² / 2 = 1 + 2
    assert AdditiveChi2().pairwise(X, Y).item() == -3.0
    np.testing.assert_allclose(Chi2(gamma=0.5).pairwise(X, Y), [[np.exp(-1.5)]], rtol=1e-15)
    assert not np.isnan(Chi2().pairwise(np.zeros((2, 3)))).any()


def test_new_kernel_properties():
    assert Laplacian().positive_semidefinite and Laplacian().translation_invariant
    assert Cosine().positive_semidefinite and not Cosine().translation_invariant
    assert Chi2().positive_semidefinite and not AdditiveChi2().positive_semidefinite
    assert Laplacian().with_defaults(5).gamma == 0.2
    assert Chi2().gamma == 1.0 and Chi2(gamma=None).gamma == 1.0  # not 1 / n_features
    assert Chi2().with_defaults(5) == Chi2(gamma=1.0)


@pytest.mark.parametrize("kernel", [Chi2(), AdditiveChi2()], ids=repr)
@pytest.mark.parametrize("where", ["X", "Y", "diag", "sparse"])
def test_chi2_kernels_reject_negative_data(kernel, where, histograms):
    X, Y = histograms
    bad = X.copy()
    bad[3, 2] = -0.5
    calls = {
        "X": lambda: kernel.pairwise(bad, Y),
        "Y": lambda: kernel.pairwise(Y, bad),
        "diag": lambda: kernel.diag(bad),
        "sparse": lambda: kernel.pairwise(sp.csr_matrix(bad)),
    }
    with pytest.raises(ValueError, match=r"chi2 kernel needs non-negative data.*-0\.5"):
        calls[where]()


def test_chunked_kernels_cross_chunk_boundaries(monkeypatch, histograms):
    # A tiny temporary budget forces one or two rows per chunk: the loops must tile K exactly.
    X, Y = histograms
    Xs = sp.csr_matrix(X)
    for budget in (1, 100, 1000):
        monkeypatch.setattr(dkpca.kernels._base, "_TEMP_BYTES", budget)
        np.testing.assert_allclose(AdditiveChi2().pairwise(X, Y), additive_chi2_kernel(X, Y),
                                   rtol=0, atol=1e-10)
        np.testing.assert_allclose(AdditiveChi2().pairwise(Xs, Y), additive_chi2_kernel(X, Y),
                                   rtol=0, atol=1e-10)
        np.testing.assert_allclose(Laplacian(0.3).pairwise(Xs, sp.csc_matrix(Y)),
                                   laplacian_kernel(X, Y, gamma=0.3), rtol=0, atol=1e-10)


# --- sparse blocks ------------------------------------------------------------------------------

SPARSE_KERNELS = [
    RBF(gamma=0.3), RBF(gamma=1e-6), Polynomial(3, 0.2, 1.5), Sigmoid(0.1, -0.5), Linear(),
    RBF(gamma=0.2) + Linear(), Laplacian(0.3), Cosine(), Chi2(0.7), AdditiveChi2(),
]
FORMATS = [sp.csr_matrix, sp.csr_array, sp.csc_matrix, sp.csc_array]


@pytest.fixture
def sparse_data():
    rng = np.random.default_rng(5)
    X = _histograms(rng, 25, 9)
    Y = _histograms(rng, 18, 9)
    return X, Y


def _same(actual, expected):
    assert isinstance(actual, np.ndarray) and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kernel", SPARSE_KERNELS, ids=repr)
def test_sparse_blocks_equal_dense(kernel, fmt, sparse_data):
    X, Y = sparse_data
    Xs, Ys = fmt(X), fmt(Y)
    expected = kernel.pairwise(X, Y)
    for A, B in [(Xs, Ys), (X, Ys), (Xs, Y), (Xs, sp.csc_matrix(Y)), (Xs, sp.csr_array(Y))]:
        _same(kernel.pairwise(A, B), expected)
        K, c = kernel.pairwise_offset(A, B)
        _same(K + c, expected)
    _same(kernel.pairwise(Xs), kernel.pairwise(X))
    _same(kernel.diag(Xs), kernel.diag(X))
    _same(kernel.diag(Xs), np.diag(kernel.pairwise(X)))


@pytest.mark.parametrize("kernel", SPARSE_KERNELS, ids=repr)
def test_sparse_float32_stays_float32(kernel, sparse_data):
    X, Y = (b.astype(np.float32) for b in sparse_data)
    K = kernel.pairwise(sp.csr_matrix(X), Y)
    assert K.dtype == np.float32 and kernel.diag(sp.csr_array(X)).dtype == np.float32
    np.testing.assert_allclose(K, kernel.pairwise(X, Y), rtol=1e-5, atol=1e-5)
    assert kernel.pairwise(sp.csr_matrix(X), Y.astype(float)).dtype == np.float64


def test_coo_blocks_are_accepted(sparse_data):
    X, Y = sparse_data
    _same(RBF(gamma=0.3).pairwise(sp.coo_matrix(X), sp.coo_array(Y)),
          rbf_kernel(X, Y, gamma=0.3))


@pytest.mark.parametrize(
    ("kernel", "reference"),
    [
        (RBF(gamma=0.05), lambda X, Y: rbf_kernel(X, Y, gamma=0.05)),
        (Polynomial(2, 1.0, 1.0), lambda X, Y: polynomial_kernel(X, Y, 2, 1.0, 1.0)),
        (Cosine(), cosine_similarity),
        (Linear(), linear_kernel),
    ],
    ids=lambda c: repr(c)[:12],
)
def test_sparse_blocks_are_not_densified(kernel, reference):
    # The dense form of these blocks is 2 × 320 MB; the kernels must work on the sparse data.
    rng = np.random.default_rng(6)
    d = 2_000_000
    shared = rng.random((40, 5))  # a few common features, so K is not trivial
    X, Y = (
        sp.hstack([shared[rows], sp.random(20, d - 5, density=2e-5, random_state=rng)],
                  format="csr")
        for rows in (slice(0, 20), slice(20, 40))
    )
    tracemalloc.start()
    try:
        K = kernel.pairwise(X, Y)
        diag = kernel.diag(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    # Reference: the same kernel on the few columns where X or Y is non-zero.
    used = np.union1d(X.indices, Y.indices)
    Xd, Yd = X[:, used].toarray(), Y[:, used].toarray()
    np.testing.assert_allclose(K, reference(Xd, Yd), rtol=1e-12)
    np.testing.assert_allclose(diag, np.diag(reference(Xd, Xd)), rtol=1e-12)
    assert np.ptp(K) > 0.01


# --- callable kernels ---------------------------------------------------------------------------


def block_intersection(X, Y, power=1.0):
    """Module level, so picklable: histogram intersection in the block convention."""
    X = X.toarray() if sp.issparse(X) else X
    Y = Y.toarray() if sp.issparse(Y) else Y
    return np.minimum(X[:, None, :], Y[None, :, :]).sum(axis=2) ** power


def pair_intersection(x, y, power=1.0):
    return np.minimum(x, y).sum() ** power


def _loop(function, X, Y, **params):
    return np.array([[function(x, y, **params) for y in Y] for x in X])


@pytest.mark.parametrize(
    "function",
    [block_intersection, pair_intersection, lambda x, y: np.minimum(x, y).sum()],
    ids=["block", "pair", "lambda"],
)
def test_callable_kernels_equal_the_explicit_loop(function, histograms):
    X, Y = histograms
    expected = _loop(pair_intersection, X, Y)
    kernel = get_kernel(function)
    assert isinstance(kernel, CallableKernel) and not kernel.positive_semidefinite
    np.testing.assert_allclose(kernel.pairwise(X, Y), expected, rtol=1e-14)
    np.testing.assert_allclose(kernel.pairwise(X), _loop(pair_intersection, X, X), rtol=1e-14)
    np.testing.assert_allclose(kernel.diag(X), X.sum(axis=1), rtol=1e-14)
    np.testing.assert_allclose(kernel.pairwise(X[:1], Y[:1]), expected[:1, :1], rtol=1e-14)
    np.testing.assert_allclose(kernel.pairwise(sp.csr_matrix(X), sp.csc_array(Y)), expected,
                               rtol=1e-14)
    assert kernel.pairwise(X[:0], Y).shape == (0, len(Y))


def test_callable_kernel_params_are_passed_and_nothing_else(histograms):
    X, Y = histograms
    for function in (block_intersection, pair_intersection):
        kernel = get_kernel(function, kernel_params={"power": 2.0}, gamma=0.5, degree=3,
                            coef0=1.0)
        assert kernel.kernel_params == {"power": 2.0}
        np.testing.assert_allclose(kernel.pairwise(X, Y),
                                   _loop(pair_intersection, X, Y, power=2.0), rtol=1e-14)
        np.testing.assert_allclose(kernel.diag(X), X.sum(axis=1) ** 2, rtol=1e-14)


def test_callable_conventions_and_what_they_receive(histograms):
    X, Y = histograms
    seen = []

    def block(A, B):
        seen.append((type(A), type(B)))
        return np.zeros((A.shape[0], B.shape[0]))

    CallableKernel(block).pairwise(sp.csr_matrix(X), Y)
    assert all(a is sp.csr_matrix and b is np.ndarray for a, b in seen)  # sparse stays sparse
    rows = []

    def pair(x, y):
        rows.append((x, y))
        return float(np.dot(x, y))

    K = CallableKernel(pair).pairwise(sp.csr_array(X[:4]), Y[:3])
    np.testing.assert_allclose(K, X[:4] @ Y[:3].T, rtol=1e-14)
    assert len(rows) == 1 + 1 + 12  # block probe, row probe, one call per pair
    assert all(isinstance(x, np.ndarray) and x.ndim == 1 for pair_ in rows[1:] for x in pair_)


def test_callable_diag_of_a_block_function_uses_bounded_chunks():
    X = np.random.default_rng(7).random((150, 4))
    shapes = []

    def block(A, B):
        shapes.append((A.shape[0], B.shape[0]))
        return A @ B.T

    np.testing.assert_allclose(CallableKernel(block).diag(X), (X * X).sum(axis=1), rtol=1e-14)
    assert max(a * b for a, b in shapes) <= 64 * 64


def test_callable_kernel_cannot_be_saved():
    kernel = CallableKernel(pair_intersection, power=2.0)
    with pytest.raises(ValueError, match="callable kernel cannot be saved.*register_kernel"):
        kernel.get_config()
    with pytest.raises(ValueError, match="callable kernel cannot be saved"):
        (RBF(gamma=1.0) + kernel).get_config()
    with pytest.raises(ValueError, match="callable kernel has no config"):
        kernel_from_config({"name": "callable", "configuration": {}})


def test_callable_kernel_equality_repr_and_pickle(histograms):
    X, Y = histograms
    kernel = CallableKernel(pair_intersection, power=2.0)
    assert repr(kernel) == "CallableKernel(pair_intersection, power=2.0)"
    assert kernel == CallableKernel(pair_intersection, power=2.0)
    assert hash(kernel) == hash(CallableKernel(pair_intersection, power=2.0))
    assert kernel != CallableKernel(pair_intersection, power=3.0)
    assert kernel != CallableKernel(block_intersection, power=2.0)
    assert kernel != RBF() and RBF() != kernel
    assert RBF() + kernel == RBF() + CallableKernel(pair_intersection, power=2.0)
    assert CallableKernel(block_intersection, w=np.ones(3)) == CallableKernel(
        block_intersection, w=np.ones(3)
    )
    rebuilt = pickle.loads(pickle.dumps(kernel))
    assert rebuilt == kernel
    np.testing.assert_allclose(rebuilt.pairwise(X, Y), kernel.pairwise(X, Y), rtol=0)


@pytest.mark.parametrize(
    ("function", "cause"),
    [
        (lambda x, y: "not a number", None),
        (lambda x, y: x + y, ValueError),  # broadcast error on blocks, a vector on rows
        (lambda x, y: 1 / 0, ZeroDivisionError),
    ],
    ids=["string", "vector", "raises"],
)
def test_broken_callable_explains_both_conventions(function, cause, histograms):
    X, Y = histograms
    with pytest.raises(ValueError, match=r"block function f\(X, Y.*per-pair function") as info:
        CallableKernel(function).pairwise(X, Y)
    if cause is not None:
        assert isinstance(info.value.__cause__, cause)
    with pytest.raises(ValueError, match="fits neither accepted convention"):
        CallableKernel(function).diag(X)


def test_block_callable_with_a_wrong_full_shape(histograms):
    X, Y = histograms
    with pytest.raises(ValueError, match=r"expected shape \(30, 20\)"):
        CallableKernel(lambda A, B: np.zeros((A.shape[0], 3))).pairwise(X, Y)


def test_get_kernel_callables_and_kernel_params():
    assert get_kernel(pair_intersection) == CallableKernel(pair_intersection)
    with pytest.raises(ValueError, match="kernel_params applies to callable kernels; set gamma"):
        get_kernel("rbf", kernel_params={"gamma": 1.0})
    with pytest.raises(ValueError, match="kernel_params applies to callable kernels"):
        get_kernel(Linear(), kernel_params={"a": 1})
    assert get_kernel("rbf", kernel_params={}, gamma=0.5) == RBF(gamma=0.5)
    with pytest.raises(TypeError, match="pass an instance"):
        get_kernel(RBF)
    with pytest.raises(TypeError, match="must be a callable"):
        CallableKernel(3)


def test_get_kernel_new_names():
    params = {"gamma": None, "degree": 3, "coef0": 1.0}
    assert get_kernel("laplacian", **params) == Laplacian()
    assert get_kernel("laplacian", gamma=0.5) == Laplacian(gamma=0.5)
    assert get_kernel("cosine", **params) == Cosine()
    assert get_kernel("chi2", **params) == Chi2(gamma=1.0)
    assert get_kernel("chi2", gamma=0.1) == Chi2(gamma=0.1)
    assert get_kernel("additive_chi2", gamma=0.5) == AdditiveChi2()


def _doubled(base: type[Kernel]) -> type[Kernel]:
    """A subclass of ``base`` whose kernel is twice ``base``'s, with an attribute of its own."""

    class Doubled(base):
        label = "base"

        def pairwise(self, X, Y=None):
            return 2.0 * super().pairwise(X, Y)

        def diag(self, X):
            return 2.0 * super().diag(X)

    return Doubled


@pytest.mark.parametrize(("base", "params"), [
    (RBF, {}), (Polynomial, {"degree": 2, "coef0": 0.5}), (Sigmoid, {"coef0": 0.5}),
    (Laplacian, {}),
], ids=lambda c: getattr(c, "__name__", ""))
def test_with_defaults_keeps_a_subclass_and_its_state(base, params):
    kernel = _doubled(base)(**params)
    kernel.label = "own"
    resolved = kernel.with_defaults(4)
    assert type(resolved) is type(kernel) and resolved.label == "own"
    assert resolved.gamma == 0.25 and kernel.gamma is None  # the original is left unresolved
    assert resolved == base(gamma=0.25, **params)  # the same configuration
    X = np.random.default_rng(0).normal(size=(6, 4))
    np.testing.assert_allclose(resolved.pairwise(X), 2 * base(gamma=0.25, **params).pairwise(X))


def test_with_defaults_of_a_sum_keeps_its_members_subclasses():
    total = _doubled(RBF)() + Linear()
    resolved = total.with_defaults(4)
    assert type(resolved.kernels[0]) is type(total.kernels[0])
    assert resolved.kernels[0].gamma == 0.25 and total.kernels[0].gamma is None


def test_kernel_pca_uses_a_subclassed_kernel():
    from dkpca import KernelPCA

    X = np.random.default_rng(0).normal(size=(50, 3))
    kernel = _doubled(RBF)(gamma=0.2)
    got = KernelPCA(3, kernel=kernel, solver="exact").fit(X)
    want = KernelPCA(3, kernel=RBF(gamma=0.2), solver="exact").fit(X)
    assert type(got.kernel_) is type(kernel)
    np.testing.assert_allclose(got.eigenvalues_, 2 * want.eigenvalues_, rtol=1e-10)


def _far_float64(n, d, offset, seed):
    """Unit-spread float64 rows around ``offset``, and the same rows less the offset (exactly:
    every entry is within a factor 2 of ``offset``, so the subtraction does not round)."""
    X = offset + np.random.default_rng(seed).normal(size=(n, d))
    return X, X - offset


def _rbf_reference(X, Y, gamma):
    """``exp(-gamma ||x - y||²)`` from explicit differences (no norm expansion)."""
    return np.exp(-gamma * ((X[:, None, :] - Y[None, :, :]) ** 2).sum(axis=2))


@pytest.mark.parametrize("offset", [1e5, 1e6])
def test_rbf_float64_far_from_the_origin_equals_a_centred_reference(offset):
    # The expansion |x|² - 2<x, y> + |y|² about the origin keeps ~1e-16 of |x|² ~ d offset²:
    # ~1e-5 absolute error at 1e6. Moved to a common centre, every pairing of blocks gives the
    # same function to float64 rounding.
    X, Xc = _far_float64(40, 50, offset, 0)
    Y, Yc = _far_float64(30, 50, offset, 1)
    kernel = RBF(sigma2=500.0)
    gamma = kernel.gamma
    for (A, Ac), (B, Bc) in [
        ((X, Xc), (X, Xc)),
        ((X, Xc), (Y, Yc)),
        ((Y, Yc), (X, Xc)),
        ((X[:7], Xc[:7]), (Y[3:5], Yc[3:5])),
        ((X[4:5], Xc[4:5]), (X[4:5], Xc[4:5])),
    ]:
        expected = _rbf_reference(Ac, Bc, gamma)
        np.testing.assert_allclose(kernel.pairwise(A, B), expected, rtol=1e-9, atol=0)
        K, c = kernel.pairwise_offset(A, B)
        np.testing.assert_allclose(K + c, expected, rtol=1e-9, atol=0)
    np.testing.assert_allclose(kernel.pairwise(X), _rbf_reference(Xc, Xc, gamma), rtol=1e-9)


def test_rbf_float64_near_the_origin_is_not_moved():
    # Data near the origin cost no copies: the blocks go to the product as given.
    from dkpca.kernels._dot import _moved_to_common_centre

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(20, 5)) + 1.0, rng.normal(size=(10, 5))
    moved_X, moved_Y, _, _ = _moved_to_common_centre(X, Y)
    assert moved_X is X and moved_Y is Y
    far_X, _, x_norms, _ = _moved_to_common_centre(X + 1e6, Y + 1e6)
    assert np.abs(far_X.mean(axis=0)).max() < 10  # moved near the origin
    np.testing.assert_allclose(x_norms, (far_X**2).sum(axis=1))


@pytest.mark.parametrize(
    ("kernel", "reference"),
    [
        (Linear(), linear_kernel),
        (Polynomial(degree=2, gamma=1e-6, coef0=1.0), lambda X, Y: polynomial_kernel(
            X, Y, degree=2, gamma=1e-6, coef0=1.0)),
        (Sigmoid(gamma=1e-7, coef0=0.0), lambda X, Y: sigmoid_kernel(X, Y, gamma=1e-7, coef0=0.0)),
        (Cosine(), cosine_similarity),
    ],
    ids=lambda c: repr(c)[:12],
)
def test_origin_dependent_kernels_are_not_moved(kernel, reference):
    # These kernels depend on the origin by definition: far data are taken as they are.
    X, _ = _far_float64(20, 5, 1e3, 0)
    Y, _ = _far_float64(10, 5, 1e3, 1)
    np.testing.assert_allclose(kernel.pairwise(X, Y), reference(X, Y), rtol=1e-12)


def test_rbf_kernel_pca_far_from_the_origin_equals_sklearn_on_centred_data():
    from sklearn.decomposition import KernelPCA as SklearnKernelPCA

    import dkpca

    X, Xc = _far_float64(40, 50, 1e6, 0)
    kp = dkpca.KernelPCA(2, kernel="rbf", sigma2=500.0).fit(X)
    reference = SklearnKernelPCA(2, kernel="rbf", gamma=1 / 1000.0, eigen_solver="dense")
    expected = reference.fit_transform(Xc)
    training = np.asarray(kp.eigenvectors_) * np.sqrt(kp.eigenvalues_)
    for scores in (np.asarray(kp.transform(X)), training):
        signs = np.sign((scores * expected).sum(axis=0))
        np.testing.assert_allclose(scores * signs, expected, atol=1e-9 * np.abs(expected).max())
    # The model's own training data are recognised as such.
    assert dkpca.loo_projections(kp, X).shape == (40, 2)
