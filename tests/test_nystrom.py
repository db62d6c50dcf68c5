"""Nyström kernel PCA: landmarks, samplers, the feature-map PCA and the eigen-extension."""

import dask.array as da
import numpy as np
import pytest
from conftest import centred_eigenvalues, match_signs, similarity
from sklearn.decomposition import PCA as SklearnPCA

from dkpca import KernelPCA
from dkpca.kernels import RBF, Polynomial
from dkpca.options import Nystrom
from dkpca.solvers import SAMPLINGS
from dkpca.solvers._landmarks import sampling_probabilities
from dkpca.solvers.nystrom import inverse_sqrt


@pytest.fixture(scope="module")
def exact(digits):
    return KernelPCA(10, kernel="rbf", gamma=1 / 64, solver="exact").fit(digits)


def test_all_points_as_landmarks_is_exact_kernel_pca(digits, exact):
    full = KernelPCA(5, gamma=1 / 64, solver=Nystrom(n_landmarks=len(digits))).fit(digits)
    np.testing.assert_allclose(full.eigenvalues_, exact.eigenvalues_[:5], rtol=1e-10)
    np.testing.assert_allclose(match_signs(full.eigenvectors_, exact.eigenvectors_[:, :5]),
                               exact.eigenvectors_[:, :5], atol=1e-8)
    new = digits[:20] * 0.9
    expected = exact.transform(new)[:, :5]
    np.testing.assert_allclose(match_signs(full.transform(new), expected), expected, atol=1e-8)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_top_components_match_exact_at_m_400(sampling, digits, exact):
    model = KernelPCA(5, gamma=1 / 64, solver=Nystrom(n_landmarks=400, sampling=sampling),
                      random_state=0).fit(digits)
    assert np.all(similarity(model.eigenvectors_, exact.eigenvectors_[:, :5]) > 0.95)
    V = model.eigenvectors_
    np.testing.assert_allclose(V.T @ V, np.eye(5), atol=1e-10)  # orthonormal
    np.testing.assert_allclose(V.sum(axis=0), 0, atol=1e-10)  # centred on all n points
    # Nyström underestimates: K̃ <= K in the PSD order, so each λ̃ <= λ.
    assert np.all(model.eigenvalues_ <= exact.eigenvalues_[:5] * (1 + 1e-10))
    assert model.landmarks_.shape == (400, 64)
    assert model.landmarks_ is model.basis_.basis  # derived, not stored (or saved) twice
    with pytest.raises(AttributeError, match="nystrom, fixed_size and icf solvers, not 'exact'"):
        _ = exact.landmarks_


def test_feature_map_pca_matches_a_numpy_reference(moons):
    kernel = RBF(gamma=2.0)
    model = KernelPCA(3, kernel=kernel, solver=Nystrom(n_landmarks=50),
                      random_state=1).fit(moons)
    L = model.landmarks_
    features = kernel.pairwise(moons, L) @ inverse_sqrt(kernel.pairwise(L))
    reference = SklearnPCA(3, svd_solver="full").fit(features)
    np.testing.assert_allclose(model.eigenvalues_,
                               reference.explained_variance_ * (len(moons) - 1), rtol=1e-8)
    new = moons[:15] + 0.05
    expected = reference.transform(kernel.pairwise(new, L) @ inverse_sqrt(kernel.pairwise(L)))
    np.testing.assert_allclose(match_signs(model.transform(new), expected), expected,
                               atol=1e-8)


def test_eigen_extension_follows_the_tutorial(digits, exact):
    model = KernelPCA(3, gamma=1 / 64,
                      solver=Nystrom(n_landmarks=1797, method="extension")).fit(digits)
    # With every point a landmark, eqs. (62)-(63) give exact kernel PCA.
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_[:3], rtol=1e-10)
    np.testing.assert_allclose(match_signs(model.eigenvectors_, exact.eigenvectors_[:, :3]),
                               exact.eigenvectors_[:, :3], atol=1e-8)
    sub = KernelPCA(3, gamma=1 / 64, solver=Nystrom(n_landmarks=600, method="extension"),
                    random_state=0).fit(digits)
    norms = np.linalg.norm(sub.eigenvectors_, axis=0)
    np.testing.assert_allclose(norms, 1.0, atol=0.15)  # sqrt(m/n) scaling (DESIGN.md)


def test_sampling_probabilities(digits):
    X = da.from_array(digits[:300], chunks=(70, -1))
    poly = Polynomial(degree=2, gamma=0.1, coef0=1.0)
    diag = np.diag(poly.pairwise(digits[:300]))
    np.testing.assert_allclose(sampling_probabilities(poly, X, "diagonal", block_bytes=2**16),
                               diag**2 / np.sum(diag**2), rtol=1e-10)
    K = poly.pairwise(digits[:300])
    np.testing.assert_allclose(
        sampling_probabilities(poly, X, "column_norm", block_bytes=2**16),
        (K**2).sum(axis=1) / (K**2).sum(), rtol=1e-10,
    )
    assert sampling_probabilities(poly, X, "uniform", block_bytes=2**16) is None


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_same_landmarks_and_model_whatever_the_chunking(sampling, digits):
    params = {"n_components": 3, "gamma": 1 / 64,
              "solver": Nystrom(n_landmarks=60, sampling=sampling), "random_state": 5}
    a = KernelPCA(**params).fit(digits)
    b = KernelPCA(**params).fit(da.from_array(digits, chunks=(250, -1)))
    np.testing.assert_array_equal(a.landmarks_, b.landmarks_)
    np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-10)
    assert isinstance(b.eigenvectors_, da.Array)  # lazy input: n x k stays lazy
    np.testing.assert_allclose(b.eigenvectors_.compute(), a.eigenvectors_, atol=1e-10)
    scores = b.fit_transform(da.from_array(digits, chunks=(250, -1)))
    np.testing.assert_allclose(scores.compute(), a.eigenvectors_ * np.sqrt(a.eigenvalues_),
                               atol=1e-8)


def test_nystrom_settings_are_checked(digits):
    with pytest.raises(ValueError, match="n_components=50 exceeds n_landmarks=40"):
        KernelPCA(50, solver=Nystrom(n_landmarks=40)).fit(digits)
    with pytest.raises(ValueError, match="n_landmarks=2000 exceeds the 1797 samples"):
        KernelPCA(5, solver=Nystrom(n_landmarks=2000)).fit(digits)
    with pytest.raises(ValueError, match="invalid Nystrom sampling='random'"):
        KernelPCA(5, solver=Nystrom(sampling="random")).fit(digits)


def test_indefinite_sigmoid_kernel_gets_no_spurious_component():
    """Tiny positive eigenvalues of an indefinite K_LL are noise: dropping them keeps order."""
    from sklearn.datasets import load_digits

    from dkpca.kernels import Sigmoid

    X = load_digits().data
    X = X - X.mean(axis=0)
    X /= np.sqrt((X**2).sum(axis=1).mean() / 64)
    kernel = Sigmoid(gamma=1.03 / 64, coef0=0.0)
    exact = KernelPCA(6, kernel=kernel, solver="exact").fit(X)
    model = KernelPCA(6, kernel=kernel, solver=Nystrom(n_landmarks=400, sampling="column_norm"),
                      random_state=0).fit(X)
    assert np.all(similarity(model.eigenvectors_, exact.eigenvectors_) > 0.99)
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, rtol=0.05)


@pytest.mark.parametrize("solver", ["nystrom", "fixed_size"])
@pytest.mark.parametrize(("n", "d", "gamma", "seed"),
                         [(200, 3, 0.5, 0), (200, 3, 0.5, 1), (200, 3, 0.1, 0), (600, 3, 2.0, 1)])
def test_float32_landmark_kernels_with_tiny_eigenvalues(solver, n, d, gamma, seed):
    """Every point a landmark, in few dimensions: K_LL's eigenvalues reach far below float32's
    rounding. Those directions stay out of the feature map (they made a spurious leading
    component, 188 against 21.75, at the first case); the float32 fit equals the float64 one."""
    X = np.random.default_rng(seed).normal(size=(n, d))
    params = {"n_components": 5, "gamma": gamma, "solver": solver, "random_state": 0}
    double = KernelPCA(**params).fit(X)
    single = KernelPCA(**params).fit(X.astype(np.float32))
    np.testing.assert_allclose(single.eigenvalues_, double.eigenvalues_, rtol=1e-5)
    Z, Z64 = single.transform(X.astype(np.float32)), double.transform(X)
    np.testing.assert_allclose(match_signs(Z, Z64), Z64, atol=1e-4 * np.abs(Z64).max())


def test_float32_data_keeps_float64_accuracy_in_the_moments(digits):
    """float32 products around a shift: no cancellation in the centred scatter."""
    params = {"n_components": 5, "gamma": 1 / 64, "solver": Nystrom(n_landmarks=300),
              "random_state": 2}
    single = KernelPCA(**params).fit(digits.astype(np.float32))
    double = KernelPCA(**params).fit(digits)
    np.testing.assert_allclose(single.eigenvalues_, double.eigenvalues_, rtol=1e-4)
    assert np.all(similarity(single.eigenvectors_, double.eigenvectors_) > 0.9999)


@pytest.mark.parametrize("kernel, params, positive", [
    ("sigmoid", {"gamma": 0.5, "coef0": -1.0}, False),
    ("poly", {"degree": 3, "coef0": -1.0}, False),
    ("additive_chi2", {}, True),
])
def test_a_landmark_kernel_without_positive_part_is_named_as_such(kernel, params, positive):
    """Such a fit used to give zero eigenvalues and the false "data do not vary" warning."""
    X = np.random.default_rng(18).normal(size=(300, 3))
    X = np.abs(X) if positive else X
    with pytest.raises(ValueError, match="no positive part.*not positive semi-definite.*'exact'"):
        KernelPCA(3, kernel=kernel, solver=Nystrom(n_landmarks=300), **params).fit(X)


def test_an_indefinite_kernel_with_a_positive_part_still_fits():
    """The sigmoid kernel with its defaults: every point a landmark, close to the exact spectrum.

    Close, not equal: the feature map keeps only K_LL's positive part (1e-5 here).
    """
    from sklearn.metrics.pairwise import sigmoid_kernel

    X = np.random.default_rng(18).normal(size=(300, 3))
    model = KernelPCA(3, kernel="sigmoid", solver=Nystrom(n_landmarks=300)).fit(X)
    np.testing.assert_allclose(model.eigenvalues_,
                               centred_eigenvalues(sigmoid_kernel(X, gamma=1 / 3), 3),
                               rtol=1e-4)


def test_the_warning_names_the_count_asked_for():
    """A feature map of rank 20 (20 distinct points) used to report 20 requested, not 25."""
    base = np.random.default_rng(9).normal(size=(20, 3))
    X = np.repeat(base, 10, axis=0)
    with pytest.warns(UserWarning, match="only 19 of the 25 requested components"):
        KernelPCA(25, kernel="rbf", gamma=0.5, solver=Nystrom(n_landmarks=50),
                  remove_zero_eig=True, random_state=0).fit(X)


def test_an_indefinite_cut_below_the_count_warns():
    """Every point a landmark: the positive eigenvalues below the most negative one's
    magnitude are real components, which the feature map drops; the fit says so."""
    X = np.random.default_rng(0).normal(size=(300, 3))
    kernel = Polynomial(degree=2, gamma=0.5, coef0=-1.0)  # three large negative eigenvalues
    exact = KernelPCA(3, kernel=kernel, solver="exact").fit(X)
    with pytest.warns(UserWarning, match="not positive semi-definite.*drops .* smaller "
                                         "positive ones, fewer than n_components=3"):
        model = KernelPCA(3, kernel=kernel, solver=Nystrom(n_landmarks=300)).fit(X)
    assert np.count_nonzero(model.eigenvalues_) < np.count_nonzero(exact.eigenvalues_)


@pytest.mark.parametrize(("fraction", "warns"), [(0.9, True), (0.3, False)])
def test_a_variance_fraction_beyond_the_landmarks_warns(fraction, warns):
    X = np.random.default_rng(0).normal(size=(200, 3))
    exact = KernelPCA(fraction, gamma=0.5, solver="exact").fit(X)
    assert exact.explained_variance_ratio_.sum() >= fraction  # the data allow it
    params = {"gamma": 0.5, "solver": Nystrom(n_landmarks=20), "random_state": 0}
    if warns:
        with pytest.warns(UserWarning, match="nystrom solver found .*n_landmarks=20 is too"):
            model = KernelPCA(fraction, **params).fit(X)
        assert model.explained_variance_ratio_.sum() < fraction
    else:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = KernelPCA(fraction, **params).fit(X)
        assert model.explained_variance_ratio_.sum() >= fraction
