"""Pre-images and denoising: the fixed-point iteration, the learned pre-image, every solver."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA as SKPCA
from sklearn.decomposition import KernelPCA as SKKernelPCA

import dkpca
from dkpca import KernelPCA
from dkpca._fixed_point import _fixed_point_block, _weights
from dkpca.datasets import make_semicircles, make_square, make_two_rings
from dkpca.options import ICF, FixedPoint, FixedSize, Nystrom, Sketch, solver_name
from dkpca.preimage import fixed_point_preimage


@pytest.fixture(scope="module")
def semicircles():
    X, clean, _ = make_semicircles(300, random_state=0)
    return X, clean


def _mse(a, b):
    return float(((np.asarray(a) - np.asarray(b)) ** 2).mean())


def test_fixed_point_map_contracts_to_a_training_point():
    """With every component, a training point is the fixed point, and nearby starts contract."""
    X = np.random.default_rng(0).normal(size=(40, 2))
    kp = KernelPCA(kernel="rbf", sigma2=0.5, solver="exact").fit(X)
    assert kp.n_components_ >= 35
    basis = kp.basis_
    weights = _weights(basis, kp.transform(X[:5]))
    z = X[:5] + 0.05 * np.random.default_rng(1).normal(size=(5, 2))
    distances = [np.linalg.norm(z - X[:5], axis=1)]
    for _ in range(6):  # one step at a time
        z = _fixed_point_block(weights, X, z, basis.kernel.gamma, 0.0, 1).points
        distances.append(np.linalg.norm(z - X[:5], axis=1))
    distances = np.array(distances)
    assert (distances[1:] < 0.5 * distances[:-1] + 1e-12).all()  # a contraction, ratio < 1/2
    result = fixed_point_preimage(basis, kp.transform(X[:5]), X[:5] + 0.05)
    assert result.converged.all()
    np.testing.assert_allclose(result.points, X[:5], atol=1e-6)
    np.testing.assert_allclose(kp.denoise(X[:5]), X[:5], atol=1e-6)


@pytest.mark.parametrize("kernel, params", [("rbf", {"gamma": 0.5}),
                                            ("poly", {"gamma": 0.3, "degree": 2})])
def test_learned_preimage_matches_scikit_learn(semicircles, kernel, params):
    X, _ = semicircles
    ours = KernelPCA(5, kernel=kernel, solver="exact", fit_inverse_transform=True, alpha=0.1,
                     preimage="learned", **params).fit(X)
    ref = SKKernelPCA(5, kernel=kernel, eigen_solver="dense", fit_inverse_transform=True,
                      alpha=0.1, **params).fit(X)
    test = X[:50] + 0.1
    np.testing.assert_allclose(ours.denoise(test), ref.inverse_transform(ref.transform(test)),
                               rtol=1e-6, atol=1e-8)
    # Scores' signs may differ; inverse_transform of each library's own scores agrees.
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(test)),
                               ref.inverse_transform(ref.transform(test)), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("maker, n", [(make_semicircles, 500), (make_square, 1000),
                                      (make_two_rings, 1200)])
def test_denoising_lowers_the_error_to_the_clean_data(maker, n):
    X, clean, _ = maker(n, random_state=0)
    choice = dkpca.select_model(X, n_draws=10, n_train=min(300, n // 2), random_state=0)
    kp = choice.to_kpca(random_state=0).fit(X)
    denoised = kp.denoise(X)
    # Measured: 0.89 (semicircles), 0.88 (square) and under 0.8 (rings) of the noisy error.
    assert _mse(denoised, clean) < 0.95 * _mse(X, clean)


def test_kernel_pca_denoising_beats_linear_pca_on_digits():
    """scikit-learn's digits in [0, 1], noise σ = 0.25, 32 components each."""
    X = load_digits().data / 16.0
    rng = np.random.default_rng(0)
    order = rng.permutation(len(X))
    train, test = order[:1000], order[1000:]
    noisy = X + 0.25 * rng.standard_normal(X.shape)
    linear = SKPCA(32).fit(noisy[train])
    linear_mse = _mse(linear.inverse_transform(linear.transform(noisy[test])), X[test])
    kp = KernelPCA(32, kernel="rbf", sigma2=5.0).fit(noisy[train])
    kernel_mse = _mse(kp.denoise(noisy[test]), X[test])
    assert kernel_mse < 0.75 * linear_mse  # measured: 0.021 against 0.037
    assert dkpca.PCA(32).fit(noisy[train]).n_components_ == 32


@pytest.mark.parametrize("solver", [
    "randomized",
    Nystrom(n_landmarks=150),
    FixedSize(n_landmarks=150),
    ICF(max_rank=150),
    Sketch(dim=150),
], ids=solver_name)
def test_every_solver_denoises(semicircles, solver):
    X, clean = semicircles
    kp = KernelPCA(8, kernel="rbf", sigma2=2.0, solver=solver, random_state=0).fit(X)
    assert _mse(kp.denoise(X), clean) < 0.8 * _mse(X, clean)


def test_nystrom_on_every_point_gives_the_exact_preimages(semicircles):
    """The landmark basis's feature-space mean (mean_coef) is the training mean."""
    X, _ = semicircles
    exact = KernelPCA(6, kernel="rbf", sigma2=2.0, solver="exact").fit(X)
    nystrom = KernelPCA(6, kernel="rbf", sigma2=2.0, solver=Nystrom(n_landmarks=len(X)),
                        random_state=0).fit(X)
    assert nystrom.basis_.mean_coef is not None
    np.testing.assert_allclose(nystrom.denoise(X[:40]), exact.denoise(X[:40]), atol=1e-6)
    Z = exact.transform(X[:40])
    signs = np.sign((nystrom.transform(X[:40]) * Z).sum(axis=0))
    np.testing.assert_allclose(nystrom.inverse_transform(Z * signs),
                               exact.inverse_transform(Z), atol=1e-6)


def test_dask_input_gives_lazy_output_equal_to_numpy(semicircles):
    X, _ = semicircles
    kp = KernelPCA(8, kernel="rbf", sigma2=2.0, fit_inverse_transform=True).fit(X)
    lazy = kp.denoise(da.from_array(X, chunks=70))
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == (70, 70, 70, 70, 20)
    np.testing.assert_allclose(lazy.compute(), kp.denoise(X), rtol=1e-12)
    Z = kp.transform(X)
    for method in ("fixed_point", "learned"):
        kp.set_params(preimage=method)
        np.testing.assert_allclose(kp.inverse_transform(da.from_array(Z, chunks=100)).compute(),
                                   kp.inverse_transform(Z), rtol=1e-10)


def test_inverse_transform_of_training_scores_lands_near_the_points(semicircles):
    X, _ = semicircles
    kp = KernelPCA(20, kernel="rbf", sigma2=1.0).fit(X)
    back = kp.inverse_transform(kp.transform(X))
    assert _mse(back, X) < 0.5 * _mse(X.mean(axis=0), X)


def test_a_vanishing_denominator_restarts_then_is_reported():
    B = np.array([[-1.0, 0.0], [1.0, 0.0]])
    # Σ γ_i k(z, b_i) = 0 on the symmetry line x = 0: the point restarts from the linear
    # pre-image, off the line, and converges there.
    result = _fixed_point_block(np.array([[1.0, -1.0]]), B, np.array([[0.0, 0.3]]), 0.5,
                                1e-6, 50)
    assert result.converged.all() and abs(result.points[0, 0]) > 0.5
    # Zero weights vanish everywhere: after the restart the point is given up and reported.
    result = _fixed_point_block(np.zeros((1, 2)), B, np.array([[0.0, 0.3]]), 0.5, 1e-6, 50)
    assert not result.converged.any() and np.isfinite(result.points).all()
    assert result.n_iter == 50


def test_errors(semicircles):
    X, _ = semicircles
    poly = KernelPCA(3, kernel="poly").fit(X)
    with pytest.raises(ValueError, match="fit_inverse_transform=True"):
        poly.denoise(X)
    with pytest.raises(ValueError, match="RBF kernel"):
        poly.set_params(preimage="fixed_point").denoise(X)
    rbf = KernelPCA(3, kernel="rbf").fit(X)
    with pytest.raises(ValueError, match="fit_inverse_transform=True"):
        rbf.set_params(preimage="learned").inverse_transform(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="3 components"):
        rbf.set_params(preimage="auto").inverse_transform(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="features"):
        rbf.denoise(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="alpha"):
        KernelPCA(alpha=0).fit(X)


def test_save_and_load_keep_the_preimages(semicircles, tmp_path):
    X, _ = semicircles
    for solver in ("exact", Nystrom(n_landmarks=100)):
        kp = KernelPCA(6, kernel="rbf", sigma2=2.0, solver=solver,
                       fit_inverse_transform=True, random_state=0).fit(X)
        dkpca.save(kp, tmp_path / f"{solver_name(solver)}.zarr")
        loaded = dkpca.load(tmp_path / f"{solver_name(solver)}.zarr")
        np.testing.assert_allclose(loaded.denoise(X[:30]), kp.denoise(X[:30]))
        loaded.set_params(preimage="learned")
        kp.set_params(preimage="learned")
        np.testing.assert_allclose(loaded.denoise(X[:30]), kp.denoise(X[:30]))


def test_a_landmark_model_from_format_1_refuses_preimages(semicircles, tmp_path):
    import zarr

    X, _ = semicircles
    kp = KernelPCA(4, kernel="rbf", solver=Nystrom(n_landmarks=50), random_state=0).fit(X)
    path = tmp_path / "old.zarr"
    dkpca.save(kp, path)
    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs["dkpca"], format_version=1)
    del meta["attributes"]["basis_"]["fields"]["mean_coef"]
    del meta["checksums"]  # format 1 recorded none
    group.attrs["dkpca"] = meta
    old = dkpca.load(path)
    np.testing.assert_allclose(old.transform(X[:5]), kp.transform(X[:5]))
    with pytest.raises(ValueError, match="refit"):
        old.denoise(X[:5])


def test_unconverged_preimages_are_counted_once_not_per_chunk(caplog):
    import logging

    import dask

    X, _, _ = make_semicircles(300, random_state=0)
    model = KernelPCA(8, kernel="rbf", sigma2=2.0, preimage=FixedPoint(max_iter=1)).fit(X)
    denoised, missed = model._denoise_counted(da.from_array(X, chunks=50))  # 6 chunks
    points, n_missed = dask.compute(denoised, missed)
    assert points.shape == X.shape and 0 < n_missed <= 300
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        again = model.denoise(X)
    np.testing.assert_allclose(again, points)
    warnings = [r.getMessage() for r in caplog.records if "did not converge" in r.getMessage()]
    assert warnings == [(f"KernelPCA: {n_missed} of 300 pre-images did not converge in 1 "
                         f"iterations (they keep their last iterate)")]


def _ridge_on_the_basis(model, N, alpha):
    """Independent reference: scikit-learn's kernel ridge from the basis points' own scores."""
    from sklearn.kernel_ridge import KernelRidge

    B = model.landmarks_
    B = np.asarray(B.toarray() if hasattr(B, "toarray") else B, dtype=np.float64)
    ridge = KernelRidge(alpha=alpha, kernel="rbf", gamma=model.gamma_).fit(model.transform(B), B)
    return ridge.predict(model.transform(N))


@pytest.mark.parametrize("solver", [
    ICF(max_rank=120, tol=1e-12),
    Nystrom(landmarks="reversed"),
], ids=["icf_full_rank", "nystrom_reversed_landmarks"])
def test_learned_preimage_of_a_landmark_basis_of_n_rows_matches_scikit_learn(solver):
    """Landmarks that are every training point, in another order, are still landmarks.

    The basis is as large as the training set, so it used to be taken for it and paired with
    the training scores in the wrong order (errors of 2.7).
    """
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3))
    N = X[:10] + 0.05 * rng.normal(size=(10, 3))
    if isinstance(solver, Nystrom):
        solver = Nystrom(landmarks=X[::-1].copy())
    model = KernelPCA(6, kernel="rbf", gamma=2.0, solver=solver, fit_inverse_transform=True,
                      alpha=0.01, random_state=0).fit(X)
    assert model.landmarks_.shape[0] == len(X)
    ref = SKKernelPCA(6, kernel="rbf", gamma=2.0, eigen_solver="dense",
                      fit_inverse_transform=True, alpha=0.01).fit(X)
    np.testing.assert_allclose(model.denoise(N), ref.inverse_transform(ref.transform(N)),
                               atol=1e-7)


@pytest.mark.parametrize("case", ["kmeans_default", "kmeans_n", "more_than_n"])
def test_learned_preimage_regresses_on_the_landmarks_however_many(case):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3))
    N = X[:10] + 0.05 * rng.normal(size=(10, 3))
    solver = {"kmeans_default": Nystrom(sampling="kmeans"),
              "kmeans_n": Nystrom(n_landmarks=len(X), sampling="kmeans"),
              "more_than_n": Nystrom(landmarks=np.vstack([X, X[:5] + 0.1]))}[case]
    model = KernelPCA(6, kernel="rbf", gamma=0.5, solver=solver, fit_inverse_transform=True,
                      alpha=0.01, random_state=0).fit(X)
    np.testing.assert_allclose(model.inverse_transform(model.transform(N)),
                               _ridge_on_the_basis(model, N, 0.01), atol=1e-8)


@pytest.mark.parametrize("solver", ["nystrom", "fixed_size"])
def test_partial_fit_learns_the_preimage_on_the_landmarks(solver):
    """A first batch of at most 1,000 rows with the default n_landmarks used to crash."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    model = KernelPCA(4, kernel="rbf", gamma=0.5, solver=solver, fit_inverse_transform=True,
                      alpha=0.1, random_state=0)
    for batch in np.array_split(X, 2):
        model.partial_fit(batch)
    np.testing.assert_allclose(model.denoise(X[:8]), _ridge_on_the_basis(model, X[:8], 0.1),
                               atol=1e-8)


@pytest.fixture(scope="module")
def small_rbf_model():
    X = np.random.default_rng(0).normal(size=(30, 2))
    return X, KernelPCA(3, kernel="rbf", sigma2=0.5, solver="exact").fit(X)


@pytest.mark.parametrize("options, message", [
    ({"tol": -1.0}, r"invalid tol=-1.0; expected a float in \(0, inf\)"),
    ({"tol": 0.0}, r"invalid tol=0.0; expected a float in \(0, inf\)"),
    ({"tol": np.nan}, r"invalid tol=nan"),
    ({"max_iter": 0}, r"invalid max_iter=0; expected an int in \[1, inf\]"),
    ({"max_iter": 2.5}, r"invalid max_iter=2.5"),
    ({"device": "gpu"}, r"invalid device='gpu'; expected one of 'cpu', 'cuda'"),
])
def test_fixed_point_preimage_refuses_bad_options(small_rbf_model, options, message):
    # It validated nothing: tol=-1 ran every iteration and reported no point converged.
    X, kp = small_rbf_model
    with pytest.raises(ValueError, match=f"^fixed_point_preimage: {message}"):
        fixed_point_preimage(kp.basis_, kp.transform(X[:5]), X[:5], **options)
    if "device" not in options:  # the same rule, and words, as FixedPoint's
        with pytest.raises(ValueError, match=message.replace("invalid ", "invalid FixedPoint ")):
            FixedPoint(**options).validated("KernelPCA")


@pytest.mark.parametrize("scores_rows, scores_cols, start_shape, message", [
    (5, 3, (1, 2), r"start has shape \(1, 2\); expected \(5, 2\)"),
    (5, 3, (5, 1), r"start has shape \(5, 1\); expected \(5, 2\)"),
    (5, 2, (5, 2), r"scores has shape \(5, 2\); expected \(n_points, 3\)"),
    (5, 4, None, r"scores has shape \(5, 4\); expected \(n_points, 3\)"),
    (None, 3, None, r"scores has shape \(3,\); expected \(n_points, 3\)"),
])
def test_fixed_point_preimage_refuses_mismatched_shapes(small_rbf_model, scores_rows,
                                                        scores_cols, start_shape, message):
    # These gave an IndexError or numpy's matmul errors.
    _, kp = small_rbf_model
    scores = np.ones(scores_cols) if scores_rows is None else np.ones((scores_rows, scores_cols))
    start = None if start_shape is None else np.zeros(start_shape)
    with pytest.raises(ValueError, match=f"^fixed_point_preimage: {message}"):
        fixed_point_preimage(kp.basis_, scores, start)


@pytest.mark.parametrize("name", ["scores", "start"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_fixed_point_preimage_refuses_non_finite_input(small_rbf_model, name, bad):
    X, kp = small_rbf_model
    arrays = {"scores": np.asarray(kp.transform(X[:5])), "start": X[:5].copy()}
    arrays[name][2, 0] = bad
    with pytest.raises(ValueError, match=f"{name} contains NaN or infinity"):
        fixed_point_preimage(kp.basis_, arrays["scores"], arrays["start"])


def test_fixed_point_preimage_checked_input_gives_the_same_points(small_rbf_model):
    # Validation changes nothing for good input (lists are taken as before): the points equal
    # the iteration's own on the same weights.
    X, kp = small_rbf_model
    scores = np.asarray(kp.transform(X[:5]))
    want = _fixed_point_block(_weights(kp.basis_, scores), X, X[:5].copy(),
                              kp.basis_.kernel.gamma, 1e-6, 300)
    got = fixed_point_preimage(kp.basis_, scores.tolist(), X[:5].tolist())
    np.testing.assert_allclose(got.points, want.points, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got.converged, want.converged)


@pytest.mark.parametrize("solver", ["exact", Sketch(dim=20)], ids=solver_name)
def test_learned_preimage_regresses_on_the_scores_transform_gives(solver):
    # The sketch's eigenvectors_ * sqrt(eigenvalues_) are not transform's scores (14 % of
    # the largest apart): trained on them, the pre-image made denoising worse than none.
    X, _, _ = make_semicircles(600, random_state=0)
    test, clean, _ = make_semicircles(300, random_state=1)
    kp = KernelPCA(8, sigma2=2.0, solver=solver, random_state=0, fit_inverse_transform=True,
                   alpha=0.01).fit(X)
    scores = kp.transform(X)
    np.testing.assert_allclose(kp.X_transformed_fit_, scores, rtol=0,
                               atol=1e-9 * np.abs(scores).max())
    assert _mse(kp.denoise(test), clean) < _mse(test, clean)


def test_learned_preimage_tells_rounding_from_an_indefinite_kernel():
    from dkpca.kernels import RBF
    from dkpca.preimage import LearnedPreimage

    # Repeated rows: k(T, T) is singular, its lowest eigenvalue rounding below 0 (-1e-15).
    T = np.repeat(np.random.default_rng(0).normal(size=(5, 2)), 3, axis=0)
    lowest = np.linalg.eigvalsh(RBF(gamma=1.0).pairwise(T))[0]
    assert -1e-13 < lowest < 1e-13
    with pytest.raises(np.linalg.LinAlgError, match="too small against rounding") as err:
        LearnedPreimage(RBF(gamma=1.0), alpha=1e-18).fit(T, T)
    assert "not positive semi-definite" not in str(err.value)
    for alpha in (0.0, -1.0):
        with pytest.raises(ValueError, match=rf"LearnedPreimage: invalid alpha={alpha}"):
            LearnedPreimage(RBF(gamma=1.0), alpha=alpha).fit(T, T)


def test_a_vanishing_denominator_at_the_linear_preimage_restarts_elsewhere():
    # Without a start the iteration begins at the linear pre-image: restarting there again
    # left 4 of these 5 points unconverged. The best pre-image from any training point is
    # the reference for where they end.
    X = np.random.default_rng(0).normal(size=(150, 3))
    kp = KernelPCA(4, gamma=0.5, solver="exact").fit(X)
    scores = 50 * kp.transform(X[:5])
    result = fixed_point_preimage(kp.basis_, scores)
    assert result.converged.all()
    starts = X[::5]
    tried = fixed_point_preimage(kp.basis_, np.repeat(scores, len(starts), axis=0),
                                 np.tile(starts, (len(scores), 1)))

    def objective(points, scores):  # ||φ(z) - P φ||² less the constant ||P φ||²
        weights = _weights(kp.basis_, scores)
        return 1 - 2 * (weights * kp.kernel_.pairwise(points, X)).sum(axis=1)

    best = objective(tried.points, np.repeat(scores, len(starts), axis=0)).reshape(5, -1)
    np.testing.assert_allclose(objective(result.points, scores), best.min(axis=1),
                               rtol=1e-6)
