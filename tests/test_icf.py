"""Incomplete Cholesky factorisation (ICF) and kernel PCA on its pivots."""

import dask.array as da
import numpy as np
import pytest
from conftest import centred_eigenvalues, match_signs, similarity

from dkpca import KernelPCA
from dkpca.kernels import RBF
from dkpca.options import ICF
from dkpca.solvers import incomplete_cholesky


def dense_pivoted_cholesky(K, diagonal, max_rank):
    """Reference: the textbook greedy pivoted Cholesky on the whole matrix.

    ``diagonal`` is the kernel's exact diagonal (``np.diag(K)`` of an RBF matrix from the GEMM
    expansion is 1 only up to rounding, which would decide the first pivot among ties).
    """
    residual = diagonal.copy()
    G, pivots = np.zeros((len(K), 0)), []
    for _ in range(max_rank):
        p = int(np.argmax(residual))
        g = (K[:, p] - G @ G[p]) / np.sqrt(residual[p])
        G = np.column_stack([G, g])
        residual -= g**2
        pivots.append(p)
    return G, pivots


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=3, size=(6, 3))
    return centres[rng.integers(6, size=400)] + rng.normal(size=(400, 3))


@pytest.mark.parametrize(("chunks", "pool_size"), [(400, 256), (37, 5), (10, 64)])
def test_factor_matches_dense_pivoted_cholesky(blobs, chunks, pool_size):
    kernel = RBF(gamma=0.3)
    icf = incomplete_cholesky(kernel, da.from_array(blobs, chunks=chunks), tol=0.0, max_rank=60,
                              pool_size=pool_size)
    G_ref, pivots = dense_pivoted_cholesky(kernel.pairwise(blobs), kernel.diag(blobs), 60)
    np.testing.assert_array_equal(icf.index, pivots)
    np.testing.assert_allclose(icf.rows(blobs), G_ref, atol=1e-8)
    # Several pivots per pass (small pools need more passes, never one per pivot).
    assert icf.n_passes < 60


def test_residual_trace_is_below_tol_and_rank_grows_as_tol_falls(blobs):
    kernel = RBF(gamma=0.3)
    K = kernel.pairwise(blobs)
    ranks = []
    for tol in (40.0, 4.0, 0.4, 0.04):
        icf = incomplete_cholesky(kernel, da.from_array(blobs, chunks=100), tol=tol,
                                  max_rank=400)
        G = icf.rows(blobs)
        residual = np.trace(K - G @ G.T)
        assert residual < tol
        assert icf.trace_history[-1] >= residual - 1e-9  # exact, or an upper bound
        ranks.append(icf.rank)
    assert ranks == sorted(ranks) and len(set(ranks)) == 4


def test_max_rank_limits_the_pivots(blobs):
    icf = incomplete_cholesky(RBF(gamma=0.3), da.from_array(blobs), tol=0.0, max_rank=17)
    assert icf.rank == 17


def test_equations_16_to_19_agree_with_eigh_of_the_centred_factor(blobs):
    kernel = RBF(gamma=0.3)
    icf = incomplete_cholesky(kernel, da.from_array(blobs, chunks=100), tol=1.0, max_rank=400)
    G = icf.rows(blobs)
    n = len(G)
    M_c = np.eye(n) - 1 / n
    reference, vectors = np.linalg.eigh(M_c @ G @ G.T @ M_c)
    reference, vectors = reference[::-1][:5], vectors[:, ::-1][:, :5]
    # Eqs. (16)-(19) as printed: SVD of G, then (U^T M_c U) Λ² ρ = λ ρ, α ∝ M_c U Λ² ρ.
    U, s, _ = np.linalg.svd(G, full_matrices=False)
    values, rho = np.linalg.eig(U.T @ M_c @ U @ np.diag(s**2))
    order = np.argsort(-values.real)[:5]
    values, rho = values.real[order], rho.real[:, order]
    np.testing.assert_allclose(values, reference, rtol=1e-9)
    alpha = M_c @ U @ np.diag(s**2) @ rho
    alpha /= np.linalg.norm(alpha, axis=0)
    np.testing.assert_allclose(np.abs(np.sum(alpha * vectors, axis=0)), 1, atol=1e-8)
    # The solver (feature PCA on the pivots, L^-T as the feature map) gives the same.
    model = KernelPCA(5, kernel=kernel, solver=ICF(tol=1.0, max_rank=400)).fit(
        da.from_array(blobs, chunks=100))
    np.testing.assert_array_equal(model.landmarks_, icf.pivots)
    np.testing.assert_allclose(model.eigenvalues_, reference, rtol=1e-8)
    np.testing.assert_allclose(match_signs(model.eigenvectors_, vectors), vectors, atol=1e-6)


def test_vanishing_tol_gives_exact_kpca(blobs):
    exact = KernelPCA(6, gamma=0.3, solver="exact").fit(blobs)
    model = KernelPCA(6, gamma=0.3, solver=ICF(tol=1e-9, max_rank=400)).fit(blobs)
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, rtol=1e-6)
    assert np.all(similarity(model.eigenvectors_, exact.eigenvectors_) > 1 - 1e-6)
    assert model.residual_trace_[-1] < 1e-9


def test_icf_kpca_tracks_exact_on_digits(digits):
    exact = KernelPCA(3, gamma=1 / 64, solver="exact").fit(digits)
    model = KernelPCA(3, gamma=1 / 64, solver=ICF(max_rank=400)).fit(digits)
    assert model.landmarks_.shape == (400, 64)
    assert np.all(similarity(model.eigenvectors_, exact.eigenvectors_) > 0.95)
    assert np.all(np.diff(model.residual_trace_) < 0)


def test_too_many_components_for_the_rank_is_an_error(blobs):
    with pytest.raises(ValueError, match="n_components=20 exceeds the ICF rank=5"):
        KernelPCA(20, gamma=0.3, solver=ICF(max_rank=5)).fit(blobs)


def test_components_beyond_the_kernels_own_rank_are_zero_columns():
    """A rank-3 kernel (linear, 3 features) stops the factorisation at its tolerance: the
    other components asked for are zero columns, as for every other solver; only a rank
    capped by max_rank is refused (above)."""
    X = np.random.default_rng(0).normal(size=(150, 3))
    model = KernelPCA(6, kernel="linear", solver=ICF(tol=1e-10)).fit(X)
    exact = KernelPCA(6, kernel="linear", solver="exact").fit(X)
    Z = np.asarray(model.transform(X))
    assert Z.shape == (150, 6) and model.landmarks_.shape[0] == 3
    np.testing.assert_array_equal(Z[:, 3:], 0.0)
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, atol=1e-8)


@pytest.mark.distributed
def test_same_pivots_on_a_distributed_client(blobs, client):
    X = da.from_array(blobs, chunks=50)
    local = incomplete_cholesky(RBF(gamma=0.3), X, tol=0.5, max_rank=400)
    on_cluster = KernelPCA(4, gamma=0.3, solver=ICF(tol=0.5)).fit(X)
    np.testing.assert_array_equal(on_cluster.landmarks_, local.pivots)


@pytest.mark.parametrize("kernel, params, positive", [
    ("sigmoid", {}, False),
    ("poly", {"degree": 3, "coef0": -1.0}, False),
    ("additive_chi2", {}, True),
])
def test_icf_refuses_a_kernel_that_is_not_positive_semidefinite(kernel, params, positive):
    """It used to factorise them as if PSD: eigenvalues of 1212 against the exact 52."""
    X = np.random.default_rng(18).normal(size=(300, 3))
    X = np.abs(X) if positive else X
    with pytest.raises(ValueError, match="needs a positive semi-definite kernel.*'exact'"):
        KernelPCA(3, kernel=kernel, solver=ICF(max_rank=300), **params).fit(X)


def test_icf_checks_a_precomputed_matrix_on_the_data():
    """A precomputed matrix cannot declare itself PSD: the residuals show it is not."""
    from sklearn.metrics.pairwise import rbf_kernel, sigmoid_kernel

    X = np.random.default_rng(18).normal(size=(200, 3))
    with pytest.raises(ValueError, match="not positive semi-definite on these data"):
        KernelPCA(3, kernel="precomputed", solver=ICF(max_rank=200)).fit(sigmoid_kernel(X))
    K = rbf_kernel(X, gamma=0.5)  # a PSD matrix still fits, as exactly as the exact solver
    model = KernelPCA(3, kernel="precomputed", solver=ICF(max_rank=200, tol=1e-12)).fit(K)
    np.testing.assert_allclose(model.eigenvalues_, centred_eigenvalues(K, 3), rtol=1e-8)


@pytest.mark.parametrize("tol", [1e-4, 1e-6, 1e-9])
def test_icf_on_float32_data_stops_at_float32_rounding(tol):
    """Pivots below float32 rounding used to give spurious leading components (232 vs 30)."""
    from sklearn.metrics.pairwise import rbf_kernel

    X = np.random.default_rng(12).normal(size=(300, 3))
    model = KernelPCA(4, kernel="rbf", gamma=0.5, solver=ICF(max_rank=300, tol=tol)).fit(
        X.astype(np.float32))
    np.testing.assert_allclose(model.eigenvalues_,
                               centred_eigenvalues(rbf_kernel(X, gamma=0.5), 4), rtol=1e-4)


@pytest.mark.parametrize("data, kernel, solver, message", [
    ("normal", "rbf", ICF(tol=1000.0), r"ICF\(tol=1000.0\) is at least the kernel matrix's trace"),
    ("small", "linear", ICF(tol=0.01), r"at least the kernel matrix's trace"),
    ("zeros", "linear", "icf", r"diagonal k\(x, x\) is 0 on every row"),
])
def test_icf_without_a_pivot_says_why(data, kernel, solver, message):
    """No pivot used to crash with ZeroDivisionError in the Nyström pass."""
    X = np.random.default_rng(0).normal(size=(200, 3))
    X = {"normal": X, "small": 1e-3 * X, "zeros": np.zeros((50, 3))}[data]
    with pytest.raises(ValueError, match=message):
        KernelPCA(2, kernel=kernel, solver=solver).fit(X)


def test_a_rank_stopped_by_tol_below_the_count_is_an_error():
    """It padded the count with zero columns although the kernel has more components."""
    X = np.random.default_rng(0).normal(size=(200, 3))
    exact = KernelPCA(8, gamma=0.05, solver="exact").fit(X)
    assert np.all(exact.eigenvalues_ > 0)
    with pytest.raises(ValueError, match=r"n_components=8 exceeds the ICF rank=\d+ .*"
                                         r"ICF\(tol=30.0\).*lower tol"):
        KernelPCA(8, gamma=0.05, solver=ICF(tol=30.0)).fit(X)


def test_a_variance_fraction_beyond_the_icf_rank_warns():
    X = np.random.default_rng(0).normal(size=(200, 3))
    with pytest.warns(UserWarning, match=r"icf solver found .*ICF\(max_rank=20\)"):
        model = KernelPCA(0.9, gamma=0.5, solver=ICF(max_rank=20)).fit(X)
    assert model.explained_variance_ratio_.sum() < 0.9
