import json

import numpy as np
import pytest
from sklearn.metrics.pairwise import (
    linear_kernel,
    polynomial_kernel,
    rbf_kernel,
    sigmoid_kernel,
)

from dkpca.kernels import (
    RBF,
    Kernel,
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
     RBF(sigma2=2.0) + Linear()],
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
        (lambda: get_kernel("laplacian"), "unknown kernel 'laplacian'"),
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
