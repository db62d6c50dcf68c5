"""Approx-KPCA (KernelPCA(solver="sketch")) against exact kernel PCA on digits."""

import dask.array as da
import numpy as np
import pytest
from conftest import similarity

from dkpca import KernelPCA
from dkpca.options import Sketch


@pytest.fixture(scope="module")
def exact(digits):
    return KernelPCA(10, kernel="rbf", gamma=1 / 64, solver="exact").fit(digits)


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
def test_every_top_component_matches_exact_at_q_400(sketch, digits, exact):
    """Default (single-pass Nyström estimate for a PSD kernel): every draw, every component."""
    for seed in range(10):
        approx = KernelPCA(5, kernel="rbf", gamma=1 / 64, solver=Sketch(kind=sketch, dim=400),
                           random_state=seed).fit(digits)
        assert np.all(similarity(approx.eigenvectors_, exact.eigenvectors_[:, :5]) > 0.95)
        np.testing.assert_allclose(approx.eigenvalues_, exact.eigenvalues_[:5], rtol=0.05)
        # The Nyström approximation is dominated by K_c: its eigenvalues are never larger.
        assert np.all(approx.eigenvalues_ <= exact.eigenvalues_[:5] * (1 + 1e-10))


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
def test_tutorial_estimate_tracks_exact_on_average_at_q_400(sketch, digits, exact):
    """The tutorial's Alg. 6 and its measure (Fig. 8): mean similarity over repeats.

    Digits' leading eigenvalues are close (λ2/λ1 = 0.97), and that estimate's O(1/sqrt(q))
    perturbation of K_c² mixes such pairs, so single components of a single draw can fall
    below 0.9.
    """
    sims, diffs = [], []
    for seed in range(5):
        approx = KernelPCA(5, kernel="rbf", gamma=1 / 64,
                           solver=Sketch(kind=sketch, dim=400, method="covariance"),
                           random_state=seed).fit(digits)
        sims.append(similarity(approx.eigenvectors_, exact.eigenvectors_[:, :5]))
        diffs.append(np.abs(approx.eigenvalues_ / exact.eigenvalues_[:5] - 1))
        V = approx.eigenvectors_
        np.testing.assert_allclose(V.T @ V, np.eye(5), atol=1e-10)
        np.testing.assert_allclose(V.sum(axis=0), 0, atol=1e-10)
    assert np.mean(sims) > 0.85  # Gaussian ~0.93, hashing ~0.88 here; exact would be 1
    assert np.mean(diffs) < 0.1


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
def test_refinement_makes_components_and_eigenvalues_exact_on_the_subspace(
    sketch, digits, exact
):
    approx = KernelPCA(5, kernel="rbf", gamma=1 / 64,
                       solver=Sketch(kind=sketch, dim=400, refine=True),
                       random_state=0).fit(digits)
    assert np.all(similarity(approx.eigenvectors_, exact.eigenvectors_[:, :5]) > 0.99)
    np.testing.assert_allclose(approx.eigenvalues_, exact.eigenvalues_[:5], rtol=1e-3)
    assert approx.n_iter_ == 2
    # Ritz values never exceed the true eigenvalues (Cauchy interlacing).
    assert np.all(approx.eigenvalues_ <= exact.eigenvalues_[:5] * (1 + 1e-12))


@pytest.mark.parametrize("method", ["nystrom", "covariance"])
def test_eigenvalue_error_falls_as_q_grows(method, digits, exact):
    def error(q):
        diffs = []
        for seed in range(3):
            approx = KernelPCA(5, gamma=1 / 64, solver=Sketch(dim=q, method=method),
                               random_state=seed).fit(digits)
            diffs.append(np.abs(approx.eigenvalues_ / exact.eigenvalues_[:5] - 1).mean())
        return np.mean(diffs)

    assert error(50) > error(200) > error(800)


def test_nystrom_estimate_is_exact_when_the_sketch_spans_the_data(digits):
    X = digits[:150]
    exact = KernelPCA(10, gamma=1 / 64, solver="exact").fit(X)
    # A Gaussian sketch with q = n spans every centred vector (hashing may leave columns empty).
    approx = KernelPCA(10, gamma=1 / 64, solver=Sketch(dim=150, method="nystrom"),
                       random_state=0).fit(X)
    np.testing.assert_allclose(approx.eigenvalues_, exact.eigenvalues_, rtol=1e-8)
    assert np.all(similarity(approx.eigenvectors_, exact.eigenvectors_) > 1 - 1e-8)


@pytest.mark.parametrize(("kernel", "expected"), [("rbf", "nystrom"), ("sigmoid", "covariance")])
def test_auto_sketch_method_follows_positive_semidefiniteness(kernel, expected, digits):
    params = {"kernel": kernel, "gamma": 1 / 64, "coef0": 0.0, "random_state": 3}
    auto = KernelPCA(4, solver=Sketch(dim=100), **params).fit(digits)
    chosen = KernelPCA(4, solver=Sketch(dim=100, method=expected), **params).fit(digits)
    unchosen = {"nystrom": "covariance", "covariance": "nystrom"}[expected]
    other = KernelPCA(4, solver=Sketch(dim=100, method=unchosen), **params).fit(digits)
    np.testing.assert_array_equal(auto.eigenvalues_, chosen.eigenvalues_)
    assert not np.allclose(auto.eigenvalues_, other.eigenvalues_)


def test_transform_is_consistent_with_the_training_scores(digits):
    approx = KernelPCA(3, gamma=1 / 64, solver=Sketch(dim=300), random_state=1)
    scores = approx.fit_transform(digits)
    projected = approx.transform(digits)
    # Training scores are v·sqrt(λ); projections K_c v / sqrt(λ) agree to the sketch's accuracy.
    assert np.all(similarity(projected, scores) > 0.99)


def test_reproducible_whatever_the_chunking(digits):
    a = KernelPCA(3, gamma=1 / 64, solver=Sketch(dim=100), random_state=7).fit(digits)
    b = KernelPCA(3, gamma=1 / 64, solver=Sketch(dim=100), random_state=7).fit(
        da.from_array(digits, chunks=(400, -1))
    )
    np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(b.eigenvectors_, a.eigenvectors_, atol=1e-8)


def test_sketch_settings_are_checked(digits):
    with pytest.raises(ValueError, match="n_components=50 exceeds Sketch dim=40"):
        KernelPCA(50, solver=Sketch(dim=40)).fit(digits)
    with pytest.raises(ValueError, match="multiple of n_hashes=3"):
        KernelPCA(5, solver=Sketch(kind="hashing", dim=100, n_hashes=3)).fit(digits)
    with pytest.raises(ValueError, match="invalid Sketch kind='fourier'"):
        KernelPCA(5, solver=Sketch(kind="fourier")).fit(digits)


def test_the_width_asked_for_beyond_the_kernels_rank():
    """The sketch's decomposition stops at the kernel's rank (3 here): the other components
    asked for are zero columns with eigenvalue 0, as for the other solvers (they returned 3
    columns); remove_zero_eig drops them."""
    X = np.random.default_rng(0).normal(size=(150, 3))
    model = KernelPCA(6, kernel="linear", solver="sketch", random_state=0).fit(X)
    Z = np.asarray(model.transform(X))
    assert Z.shape == (150, 6) and model.n_components_ == 6
    assert model.eigenvectors_.shape == (150, 6)
    np.testing.assert_array_equal(model.eigenvalues_[3:], 0.0)
    np.testing.assert_array_equal(Z[:, 3:], 0.0)
    assert (model.eigenvalues_[:3] > 0).all() and (np.abs(Z[:, :3]).max(axis=0) > 0).all()
    assert len(model.get_feature_names_out()) == 6
    with pytest.warns(UserWarning, match="only 3 of the 6 requested"):
        dropped = KernelPCA(6, kernel="linear", solver="sketch", remove_zero_eig=True,
                            random_state=0).fit(X)
    assert np.asarray(dropped.transform(X)).shape == (150, 3)


def test_sketch_warns_when_it_keeps_fewer_components_than_asked():
    # 20 distinct points: the sketch's decomposition stops at the centred kernel's rank, 19,
    # below the 25 asked for; remove_zero_eig=True keeps 19 and says so, as the exact solver does.
    X = np.repeat(np.random.default_rng(9).normal(size=(20, 3)), 10, axis=0)
    for solver in (Sketch(dim=60), "exact"):
        with pytest.warns(UserWarning, match="only 19 of the 25 requested"):
            kp = KernelPCA(25, solver=solver, gamma=0.5, remove_zero_eig=True,
                           random_state=0).fit(X)
        assert kp.n_components_ == 19


def test_covariance_sketch_of_an_indefinite_kernel_keeps_its_positive_part():
    """sqrt of the eigenvalues of K_c² is |λ|: the most negative pairs came first (294 where
    the top is 196); the sketch's own sign estimate drops them."""
    from dkpca.kernels import Polynomial

    X = np.random.default_rng(0).normal(size=(300, 3))
    kernel = Polynomial(degree=2, gamma=0.5, coef0=-1.0)  # three large negative eigenvalues
    H = np.eye(300) - 1 / 300
    K_c = H @ kernel.pairwise(X) @ H
    top = np.linalg.eigvalsh(K_c)[::-1][:3]
    model = KernelPCA(3, kernel=kernel, solver=Sketch(dim=300), random_state=0).fit(X)
    V = model.eigenvectors_
    assert np.all(np.einsum("ij,ij->j", V, K_c @ V) > 0)  # positive Rayleigh quotients
    np.testing.assert_allclose(model.eigenvalues_, top, rtol=0.1)  # the sketch's accuracy


def test_a_variance_fraction_beyond_the_sketch_warns():
    X = np.random.default_rng(0).normal(size=(200, 3))
    with pytest.warns(UserWarning, match="sketch solver found explain .* not more than "
                                         "n_components=0.9.*Sketch dim=20 is too small"):
        model = KernelPCA(0.9, gamma=0.5, solver=Sketch(dim=20), random_state=0).fit(X)
    assert model.explained_variance_ratio_.sum() < 0.9


def test_a_hashing_dim_that_n_hashes_does_not_divide_names_the_estimator():
    X = np.random.default_rng(0).normal(size=(100, 3))
    with pytest.raises(ValueError, match=r"^KernelPCA: Sketch\(.*multiple of n_hashes=2"):
        KernelPCA(3, solver=Sketch(kind="hashing", dim=21, n_hashes=2)).fit(X)
