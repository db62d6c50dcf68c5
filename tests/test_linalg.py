import numpy as np
import pytest
import scipy.linalg
from threadpoolctl import threadpool_limits

from dkpca.linalg import block_krylov_eigh, crossproduct, flip_signs, top_eigh


def _spd(n, decay, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Q * decay ** np.arange(n)) @ Q.T


def test_top_eigh_matches_scipy():
    A = _spd(50, 0.9)
    w, V = top_eigh(A, 5)
    ref_w, ref_V = scipy.linalg.eigh(A)
    np.testing.assert_allclose(w, ref_w[::-1][:5], rtol=1e-12)
    np.testing.assert_allclose(np.abs(V), np.abs(ref_V[:, ::-1][:, :5]), atol=1e-10)
    w_all, _ = top_eigh(A)
    assert len(w_all) == 50 and np.all(np.diff(w_all) <= 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("blas_threads", [1, None])
def test_crossproduct_matches_gemm(dtype, order, blas_threads):
    A = np.asarray(np.random.default_rng(0).normal(size=(300, 40)) * 10, dtype=dtype, order=order)
    with threadpool_limits(limits=blas_threads, user_api="blas"):
        G = crossproduct(A)
    expected = A.astype(np.float64).T @ A.astype(np.float64)
    assert G.dtype == A.dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(G, G.T, rtol=tol, atol=tol * np.abs(G).max())
    np.testing.assert_allclose(G, expected, rtol=tol, atol=tol * np.abs(expected).max())


def test_flip_signs_makes_largest_entry_positive():
    V = flip_signs(np.array([[0.1, 2.0], [-3.0, -0.5]]))
    assert V[1, 0] == 3.0 and V[0, 1] == 2.0


@pytest.mark.parametrize("decay", [0.5, 0.9, 0.99])
def test_block_krylov_converges_to_eigh(decay, global_random_seed):
    A = _spd(300, decay, seed=global_random_seed)
    start = np.random.default_rng(global_random_seed).normal(size=(300, 15))
    res = block_krylov_eigh(lambda V: A @ V, start, 5, tol=1e-10, max_iter=20)
    ref_w, ref_V = scipy.linalg.eigh(A)
    assert res.converged and res.residual <= 1e-10
    np.testing.assert_allclose(res.eigenvalues, ref_w[::-1][:5], rtol=1e-9)
    overlap = np.abs(np.sum(res.eigenvectors * ref_V[:, ::-1][:, :5], axis=0))
    np.testing.assert_allclose(overlap, 1.0, atol=1e-8)


def test_block_krylov_residual_bounds_the_error():
    A = _spd(400, 0.98)
    start = np.random.default_rng(0).normal(size=(400, 8))
    res = block_krylov_eigh(lambda V: A @ V, start, 3, tol=1e-3, max_iter=50)
    exact = np.sort(np.linalg.eigvalsh(A))[::-1][:3]
    # Ritz values lie below the eigenvalues, within residual² / gap of them.
    assert np.all(res.eigenvalues <= exact + 1e-12)
    gap = exact[2] - np.sort(np.linalg.eigvalsh(A))[::-1][3]
    assert np.all(exact - res.eigenvalues <= (res.residual * exact[0]) ** 2 / gap * 10)


def test_block_krylov_stops_on_invariant_subspace():
    A = np.diag(np.r_[np.arange(10.0, 0, -1), np.zeros(90)])
    start = np.random.default_rng(0).normal(size=(100, 4))
    res = block_krylov_eigh(lambda V: A @ V, start, 3, tol=1e-14, max_iter=50)
    assert res.converged and res.n_passes < 50
    np.testing.assert_allclose(res.eigenvalues, [10.0, 9.0, 8.0], rtol=1e-10)


def test_block_krylov_reports_non_convergence():
    A = _spd(200, 0.999)
    start = np.random.default_rng(0).normal(size=(200, 6))
    res = block_krylov_eigh(lambda V: A @ V, start, 3, tol=1e-12, max_iter=2)
    assert not res.converged and res.n_passes == 2 and res.residual > 1e-12


def test_block_krylov_rejects_bad_k():
    with pytest.raises(ValueError, match="need 1 <= k"):
        block_krylov_eigh(lambda V: V, np.ones((5, 2)), 3)


def test_block_krylov_long_runs_stay_orthonormal():
    # A flat spectrum, a wide block and many passes: without reorthogonalising the normalised
    # new directions, the basis loses orthogonality and ghost Ritz values appear above λ₁.
    rng = np.random.default_rng(0)
    n = 1500
    X = rng.normal(size=(n, 300))
    sq = (X**2).sum(1)
    A = np.exp(-(sq[:, None] + sq[None, :] - 2 * X @ X.T.copy()) / 600)
    A -= A.mean(0)
    A -= A.mean(1)[:, None]
    start = rng.normal(size=(n, 60))
    res = block_krylov_eigh(lambda V: A @ V, start, 10, tol=1e-14, max_iter=20)
    exact = np.sort(np.linalg.eigvalsh(A))[::-1][:10]
    assert np.all(res.eigenvalues <= exact * (1 + 1e-10))
    np.testing.assert_allclose(res.eigenvalues, exact, rtol=1e-8)
    np.testing.assert_allclose(res.eigenvectors.T @ res.eigenvectors, np.eye(10), atol=1e-10)


def test_thick_restarts_bound_the_basis_and_converge():
    A = _spd(600, 0.995)
    start = np.random.default_rng(0).normal(size=(600, 12))
    widths = []

    def product(V):
        widths.append(V.shape[1])
        return A @ V

    res = block_krylov_eigh(product, start, 4, tol=1e-9, max_iter=200, max_basis=48)
    full = block_krylov_eigh(lambda V: A @ V, start, 4, tol=1e-9, max_iter=200)
    exact = np.sort(np.linalg.eigvalsh(A))[::-1][:4]
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, exact, rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(res.eigenvectors * full.eigenvectors, axis=0)), 1.0,
                               atol=1e-8)
    # Restarts happened (more passes than the basis could hold) and no block grew past b.
    assert res.n_passes * 12 > 48 and max(widths) <= 12
    assert res.n_passes >= full.n_passes


def test_max_basis_must_hold_two_blocks():
    with pytest.raises(ValueError, match="at least twice the block width"):
        block_krylov_eigh(lambda V: V, np.ones((50, 4)), 2, max_basis=6)


@pytest.mark.parametrize("max_basis", [None, 24], ids=["growing", "restarted"])
def test_block_krylov_runs_where_its_start_block_is(monkeypatch, max_basis):
    # On the CuPy stand-in (numpy behind CuPy's strictness) every step stays on the "device":
    # a numpy-only call would raise. The eigenpairs equal the host iteration's.
    import sys

    import _cupy_standin

    monkeypatch.setitem(sys.modules, "cupy", _cupy_standin)
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(300, 300)))
    A = (Q * 0.9 ** np.arange(300)) @ Q.T
    start = rng.normal(size=(300, 8))
    options = {"tol": 1e-10, "max_iter": 40, "max_basis": max_basis}
    want = block_krylov_eigh(lambda V: A @ V, start, 4, **options)
    A_device = _cupy_standin.asarray(A)
    got = block_krylov_eigh(lambda V: A_device @ V, _cupy_standin.asarray(start), 4, **options)
    assert isinstance(got.eigenvectors, _cupy_standin.ndarray)
    assert got.converged and want.converged
    np.testing.assert_allclose(got.eigenvalues.get(), want.eigenvalues, rtol=1e-10)
    np.testing.assert_allclose(np.abs(got.eigenvectors.get().T @ want.eigenvectors),
                               np.eye(4), atol=1e-8)
