"""Fixed-size landmark selection by quadratic Renyi entropy (FS and FS2)."""

import dask.array as da
import numpy as np
import pytest
from conftest import similarity

from dkpca import KernelPCA
from dkpca.kernels import RBF
from dkpca.options import FixedSize
from dkpca.solvers import select_fixed_size
from dkpca.solvers.fixed_size import parzen_gamma, renyi_entropy


@pytest.fixture(scope="module")
def two_densities():
    """20,000 points in a square with a dense core: entropy has something to find (d = 2)."""
    X = np.random.default_rng(0).uniform(-1, 1, size=(20_000, 2))
    X[:10_000] *= 0.3
    return X


def rule_of_thumb_gamma(X):
    return 1 / (2 * 0.1 * X.shape[1] * X.var(axis=0).mean())  # MDD eq. (20)


@pytest.mark.parametrize("selection", ["renyi", "renyi_kmeans"])
def test_entropy_trace_never_decreases_and_ends_at_the_landmarks_entropy(selection,
                                                                         two_densities):
    gamma = rule_of_thumb_gamma(two_densities)
    result = select_fixed_size(da.from_array(two_densities, chunks=3000), 60, selection,
                               rng=np.random.default_rng(1), gamma=gamma, tol=0, max_iter=8)
    trace = result.entropy_trace
    assert len(trace) == 9
    assert np.all(np.diff(trace) >= 0)
    assert trace[-1] > trace[0] + 0.05  # it did improve
    # The trace is the entropy of the set it reports, recomputed from scratch.
    assert trace[-1] == pytest.approx(renyi_entropy(RBF(gamma=gamma).pairwise(result.landmarks)),
                                      rel=1e-10)
    np.testing.assert_array_equal(result.landmarks, two_densities[result.index])
    assert len(np.unique(result.index)) == 60


def test_fs2_reaches_fs_entropy_in_fewer_passes(two_densities):
    X = da.from_array(two_densities, chunks=4000)
    gamma = rule_of_thumb_gamma(two_densities)
    fs = select_fixed_size(X, 50, "renyi", rng=np.random.default_rng(0), gamma=gamma, tol=0,
                           max_iter=20).entropy_trace
    fs2 = select_fixed_size(X, 50, "renyi_kmeans", rng=np.random.default_rng(0), gamma=gamma,
                            tol=0, max_iter=20).entropy_trace
    assert fs2[-1] >= fs[-1]
    passes_fs2 = int(np.argmax(fs2 >= fs[-1]))
    assert passes_fs2 < len(fs) - 1
    assert passes_fs2 <= 5  # k-means start and best-candidate swaps: a handful of passes


def test_selection_stops_on_relative_tolerance(two_densities):
    result = select_fixed_size(da.from_array(two_densities), 40, rng=np.random.default_rng(0),
                               gamma=rule_of_thumb_gamma(two_densities), tol=1e-2, max_iter=50)
    gains = np.diff(result.entropy_trace) / result.entropy_trace[:-1]
    assert len(result.entropy_trace) < 51
    assert gains[-1] < 1e-2 and np.all(gains[:-1] >= 1e-2)


def test_selection_is_reproducible_whatever_the_chunking(two_densities):
    a = select_fixed_size(da.from_array(two_densities, chunks=7000), 30,
                          rng=np.random.default_rng(5), max_iter=3)
    b = select_fixed_size(da.from_array(two_densities, chunks=1100), 30,
                          rng=np.random.default_rng(5), max_iter=3)
    np.testing.assert_array_equal(a.index, b.index)
    np.testing.assert_array_equal(a.entropy_trace, b.entropy_trace)


def test_default_parzen_window_is_scotts_rule(two_densities):
    result = select_fixed_size(da.from_array(two_densities), 30, rng=np.random.default_rng(0),
                               max_iter=1)
    # The default estimates the variance on a 10,000-row sample: close to the full data's.
    expected = parzen_gamma(two_densities.var(axis=0).mean(), 30, 2)
    assert result.gamma == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("selection", ["renyi", "renyi_kmeans"])
def test_fixed_size_kpca_tracks_exact_on_digits(selection, digits):
    exact = KernelPCA(3, gamma=1 / 64, solver="exact").fit(digits)
    model = KernelPCA(3, gamma=1 / 64, solver=FixedSize(n_landmarks=400, selection=selection),
                      random_state=0).fit(digits)
    assert np.all(similarity(model.eigenvectors_, exact.eigenvectors_) > 0.95)
    assert model.landmarks_.shape == (400, 64)
    assert np.all(np.diff(model.entropy_trace_) >= 0)
    assert model.n_iter_ == len(model.entropy_trace_)


def test_a_wide_parzen_window_picks_outlying_landmarks(digits):
    """The paper's choice, the model's own width, favours isolated points (module docstring)."""
    exact = KernelPCA(3, gamma=1 / 64, solver="exact").fit(digits)
    wide = KernelPCA(3, gamma=1 / 64, solver=FixedSize(n_landmarks=400, entropy_gamma=1 / 64),
                     random_state=0).fit(digits)
    default = KernelPCA(3, gamma=1 / 64, solver=FixedSize(n_landmarks=400),
                        random_state=0).fit(digits)
    centre = digits.mean(axis=0)
    spread = {name: np.linalg.norm(m.landmarks_ - centre, axis=1).mean()
              for name, m in (("wide", wide), ("default", default))}
    assert spread["wide"] > 1.1 * spread["default"]
    assert similarity(wide.eigenvectors_, exact.eigenvectors_)[0] < similarity(
        default.eigenvectors_, exact.eigenvectors_)[0]


@pytest.mark.distributed
def test_same_selection_on_a_distributed_client(two_densities, client):
    X = da.from_array(two_densities, chunks=2500)
    local = select_fixed_size(X, 30, rng=np.random.default_rng(3), max_iter=3)
    on_cluster = KernelPCA(3, solver=FixedSize(n_landmarks=30, max_iter=3),
                           random_state=3).fit(X)
    np.testing.assert_array_equal(on_cluster.landmarks_, local.landmarks)


@pytest.mark.parametrize("selection", ["renyi", "renyi_kmeans"])
def test_sparse_data_select_the_landmarks_of_the_dense(selection):
    """Sparse input used to crash (a 0-d object array, a sparse k-means sample)."""
    import scipy.sparse

    S = scipy.sparse.random(300, 30, density=0.2, format="csr", random_state=0)
    options = FixedSize(n_landmarks=40, selection=selection, max_iter=3)
    sparse = KernelPCA(3, kernel="rbf", gamma=1.0, solver=options, random_state=0).fit(S)
    dense = KernelPCA(3, kernel="rbf", gamma=1.0, solver=options, random_state=0).fit(S.toarray())
    assert scipy.sparse.issparse(sparse.landmarks_)
    np.testing.assert_array_equal(sparse.landmarks_.toarray(), dense.landmarks_)
    np.testing.assert_allclose(sparse.entropy_trace_, dense.entropy_trace_, rtol=1e-12)
    np.testing.assert_allclose(sparse.eigenvalues_, dense.eigenvalues_, rtol=1e-10)
    new = scipy.sparse.random(5, 30, density=0.2, format="csr", random_state=1)
    np.testing.assert_allclose(sparse.transform(new), dense.transform(new.toarray()), atol=1e-10)


def test_a_variance_fraction_beyond_the_landmarks_warns():
    X = np.random.default_rng(0).normal(size=(200, 3))
    with pytest.warns(UserWarning, match="fixed_size solver found .*n_landmarks=20 is too"):
        model = KernelPCA(0.9, gamma=0.5, solver=FixedSize(n_landmarks=20),
                          random_state=0).fit(X)
    assert model.explained_variance_ratio_.sum() < 0.9
