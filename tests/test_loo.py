"""Leave-one-out projections, the LOOCV decision, and the cure on the LOO paper's data."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from dkpca import PCA, KernelPCA
from dkpca.datasets import make_signal_in_noise, make_unbalanced_semicircles
from dkpca.generalization import (
    Renormalizer,
    _kernel_folds,
    loo_projections,
    loocv_renormalization,
    orthogonal_residuals,
)
from dkpca.generalization._kernel_folds import kernel_folds
from dkpca.kernels import RBF
from dkpca.options import Nystrom
from dkpca.solvers import centred_top_eigh


@pytest.fixture(scope="module")
def four_signals():
    X, _ = make_signal_in_noise(50, 2000, random_state=0)
    return X


def _brute_force(make, X):
    """A serial loop of refits, aligned to the full model by |correlation| and sign."""
    full = make().fit(X)
    reference = full.transform(X)
    out = np.empty_like(reference)
    for n in range(len(X)):
        keep = np.arange(len(X)) != n
        refit = make().fit(X[keep])
        scores = refit.transform(X)
        corr = np.corrcoef(reference.T, scores.T)[: reference.shape[1], reference.shape[1]:]
        for j in range(reference.shape[1]):
            i = int(np.argmax(np.abs(corr[j])))
            out[n, j] = np.sign(corr[j, i]) * scores[n, i]
    return full, out


@pytest.mark.parametrize("make", [lambda: KernelPCA(3, kernel=RBF(c=30.0), solver="exact"),
                                  lambda: PCA(3)])
def test_exact_loo_equals_a_serial_loop_of_refits(make):
    X, _ = make_signal_in_noise(25, 300, strengths=(2.0, 1.4, 1.0), noise=0.1,
                                random_state=1)  # distinct components: alignment is clear
    full, expected = _brute_force(make, X)
    np.testing.assert_allclose(loo_projections(full, X), expected, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("n_points", [25, 60])
def test_exact_kernel_pca_folds_from_one_kernel_equal_refits(n_points):
    """25 points: each fold runs the dense eigh; 60: block Krylov from the full eigenvectors."""
    X, _ = make_signal_in_noise(n_points, 300, strengths=(2.0, 1.4, 1.0), noise=0.1,
                                random_state=1)

    def make():
        return KernelPCA(3, kernel=RBF(c=30.0))

    full, expected = _brute_force(make, X)
    folds = kernel_folds(make(), X)
    assert (folds.start is None) == (n_points == 25)
    np.testing.assert_allclose(loo_projections(full, X), expected, rtol=1e-8, atol=1e-10)


def test_a_fold_whose_krylov_iteration_stalls_is_solved_densely(monkeypatch):
    X, _ = make_signal_in_noise(60, 300, strengths=(2.0, 1.4, 1.0), noise=0.1, random_state=1)
    kp = KernelPCA(3, kernel=RBF(c=30.0)).fit(X)
    krylov = loo_projections(kp, X)
    monkeypatch.setattr(_kernel_folds, "FOLD_MAX_PASSES", 1)
    dense = loo_projections(kp, X)
    np.testing.assert_allclose(dense, krylov, rtol=1e-8, atol=1e-10)


def _dense_fold(folds, n):
    """Fold ``n``'s eigenpairs by the exact solver's dense eigh: the reference."""
    keep = np.arange(len(folds.K)) != n
    fold_sums = folds.row_sums[keep] - folds.K[keep, n]
    return centred_top_eigh(folds.K[np.ix_(keep, keep)], fold_sums, folds.rule)[:2]


@pytest.mark.parametrize("kernel, k", [(RBF(c=30.0), 3), ("linear", 2)],
                         ids=["rbf", "linear-rank-3"])
def test_folds_iterating_together_find_each_folds_own_eigenpairs(monkeypatch, kernel, k):
    """Every fold of a stack against its own dense eigh, while folds leave the stack.

    The linear kernel of 3-dimensional data has rank 3: its folds end on an invariant space.
    """
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 3)) * [3.0, 2.0, 1.0] if kernel == "linear" else \
        make_signal_in_noise(120, 300, strengths=(2.0, 1.4, 1.0), noise=0.1, random_state=1)[0]
    folds = kernel_folds(KernelPCA(k, kernel=kernel), X)
    held = []
    products = _kernel_folds._centred_products
    monkeypatch.setattr(_kernel_folds, "_centred_products",
                        lambda K, blocks, left_out: (held.append(len(blocks)),
                                                     products(K, blocks, left_out))[1])
    points = np.arange(0, 120, 4)
    found = _kernel_folds._krylov_folds(folds.K, folds.start, points, k)
    assert all(pairs is not None for pairs in found)
    if kernel != "linear":
        assert held[0] == len(points) > held[-1] > 0  # folds converge at different passes
    for n, (values, vectors) in zip(points, found, strict=True):
        want_values, want_vectors = _dense_fold(folds, n)
        np.testing.assert_allclose(values, want_values[:k], rtol=1e-10)
        assert vectors[n].tolist() == [0.0] * k
        overlap = np.abs(np.delete(vectors, n, axis=0).T @ want_vectors[:, :k])
        np.testing.assert_allclose(np.diag(overlap), 1.0, atol=1e-9)


def test_folds_give_the_same_scores_in_stacks_of_any_size(monkeypatch):
    X, _ = make_signal_in_noise(80, 300, strengths=(2.0, 1.4, 1.0), noise=0.1, random_state=2)
    folds = kernel_folds(KernelPCA(3, kernel=RBF(c=30.0)), X)
    points = [5, 17, 40, 79]
    together = folds.fold_scores(points)
    monkeypatch.setattr(_kernel_folds, "FOLD_BATCH_BYTES", 1)  # one fold a stack
    for n, scores in zip(points, together, strict=True):
        np.testing.assert_allclose(np.abs(folds.scores(n)), np.abs(scores), atol=1e-11)


def test_shared_kernel_arrays_are_aligned_when_unpickled():
    """A worker may unpickle an array at any byte; numpy then multiplies without BLAS."""
    X = np.random.default_rng(0).normal(size=(40, 5))
    folds = kernel_folds(KernelPCA(3), X)
    raw = np.empty(folds.K.nbytes + 1, dtype=np.uint8)[1:]  # one byte off: misaligned
    misaligned = raw.view(np.float64).reshape(folds.K.shape)
    misaligned[...] = folds.K
    assert not misaligned.flags.aligned
    restored = _kernel_folds.KernelFolds.__new__(_kernel_folds.KernelFolds)
    restored.__setstate__({**vars(folds), "K": misaligned})
    assert restored.K.flags.aligned
    np.testing.assert_array_equal(restored.scores(3), folds.scores(3))


@pytest.mark.parametrize("model", [KernelPCA(3, solver="randomized"),
                                   PCA(3, solver="randomized"), PCA(3, solver="sketch"),
                                   PCA(6), PCA(3, memory_budget=8 * 40 * 40 - 1),
                                   type("MyKernelPCA", (KernelPCA,), {})(3),
                                   type("MyPCA", (PCA,), {})(3)],
                         ids=["randomized", "pca-randomized", "pca-sketch",
                              "pca-beyond-the-rank", "pca-gram-over-budget", "subclass",
                              "pca-subclass"])
def test_only_exact_refits_share_one_kernel(model):
    """PCA(6) of 5 features: the sixth component has no variance, and refits complete it.

    A tall PCA's refits use the covariance solver: its Gram matrix must fit the budget.
    """
    X = np.random.default_rng(0).normal(size=(40, 5))
    assert kernel_folds(model, X) is None
    assert kernel_folds(KernelPCA(3), X) is not None
    assert kernel_folds(PCA(3), X) is not None


@pytest.mark.parametrize("n_points", [25, 60])
@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_linear_pca_folds_from_the_gram_matrix_equal_refits(n_points, whiten, offset):
    """25 points: dense folds; 60: Krylov. Wide data (gram solver) and tall (covariance);
    far from the origin too (the Gram matrix of the raw rows would lose the spectrum)."""
    X, _ = make_signal_in_noise(n_points, 300, strengths=(2.0, 1.4, 1.0), noise=0.1,
                                random_state=1)
    X = X + offset
    for data in (X, X[:, :8]):
        full, expected = _brute_force(lambda: PCA(3, whiten=whiten), data)
        assert kernel_folds(PCA(3, whiten=whiten), data) is not None
        # at 1e6 the rows themselves are rounded to about 1e-10: so are their scores
        np.testing.assert_allclose(loo_projections(full, data), expected, rtol=1e-8,
                                   atol=1e-10 if offset == 0.0 else 1e-8)


def test_refits_keep_the_full_models_number_of_components(four_signals):
    """A variance fraction could keep one component fewer on N - 1 points."""
    X = four_signals[:40, :300]
    kp = KernelPCA(0.85, kernel=RBF(c=30.0)).fit(X)
    loo = loo_projections(kp, X)
    assert loo.shape == (40, kp.n_components_) and np.isfinite(loo).all()


def test_approximate_loo_tracks_exact_loo_on_the_four_signal_model(four_signals):
    """The LOO paper's Fig. 4: correlation > 0.9 per component (0.98 and above here)."""
    X = four_signals
    kp = KernelPCA(4, kernel=RBF(c=170.0)).fit(X)  # c near the median squared distance
    exact = loo_projections(kp, X)
    approximate = loo_projections(kp, X, "approximate")
    for j in range(4):
        assert np.corrcoef(exact[:, j], approximate[:, j])[0, 1] > 0.9
    train = kp.transform(X)
    assert (exact.std(axis=0) < 0.5 * train.std(axis=0)).all()  # the inflation
    assert (approximate.std(axis=0) < train.std(axis=0)).all()


def test_approximate_linear_loo_is_eq_1(four_signals):
    X = four_signals
    pca = PCA(4).fit(X)
    exact = loo_projections(pca, X)
    approximate = loo_projections(pca, X, "approximate")
    for j in range(4):
        assert np.corrcoef(exact[:, j], approximate[:, j])[0, 1] > 0.9
    residuals, _ = orthogonal_residuals(X)
    np.testing.assert_allclose(approximate, pca.transform(X - residuals))


def _affine_residual(X: np.ndarray, n: int) -> np.ndarray:
    """``x_n`` minus its least-squares nearest point in the affine hull of the other rows."""
    others = np.delete(X, n, axis=0)
    base, directions = others[0], (others[1:] - others[0]).T
    coef, *_ = np.linalg.lstsq(directions, X[n] - base, rcond=None)
    return X[n] - base - directions @ coef


def test_orthogonal_residuals_match_least_squares():
    X = np.random.default_rng(2).normal(size=(12, 40))
    R, d2 = orthogonal_residuals(X)
    for n in range(12):
        residual = _affine_residual(X, n)
        np.testing.assert_allclose(R[n], residual, atol=1e-10)
        assert d2[n] == pytest.approx(residual @ residual, rel=1e-10)
    wide = np.random.default_rng(3).normal(size=(30, 5))  # N > D + 1: every point in the hull
    with pytest.warns(UserWarning, match=r"30 of the 30 rows .*\(N = 30 rows > D \+ 1 = 6\)"):
        R, d2 = orthogonal_residuals(wide)
    assert not d2.any() and not R.any()


def test_a_duplicate_row_zeroes_only_its_own_correction():
    """One repeated row used to switch the correction off for every row (cho_factor failed)."""
    X = np.random.default_rng(0).normal(size=(20, 60))
    X = np.r_[X, X[:1]]
    with pytest.warns(UserWarning, match=r"2 of the 21 rows \(\[0, 20\]\) lie in the affine"):
        R, d2 = orthogonal_residuals(X)
    assert d2[0] == d2[20] == 0.0 and not R[[0, 20]].any()
    for n in range(1, 20):
        residual = _affine_residual(X, n)
        np.testing.assert_allclose(R[n], residual, atol=1e-9)
        assert d2[n] == pytest.approx(residual @ residual, rel=1e-9)
    kp = KernelPCA(2, kernel=RBF(c=120.0)).fit(X)
    with pytest.warns(UserWarning, match="affine hull"):
        approximate = loo_projections(kp, X, "approximate")
    train = kp.transform(X)
    expected = train * np.exp(-np.array([_affine_residual(X, n) @ _affine_residual(X, n)
                                         for n in range(21)]) / 120.0)[:, None]
    expected[[0, 20]] = train[[0, 20]]
    np.testing.assert_allclose(approximate, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("offset", [3e4, 3e5])
def test_approximate_loo_does_not_move_with_the_data(four_signals, offset):
    """Far from the origin the uncentred Gram matrix was near singular: no correction at all."""
    X = four_signals[:30, :400]
    R, d2 = orthogonal_residuals(X)
    R_far, d2_far = orthogonal_residuals(X + offset)
    np.testing.assert_allclose(d2_far, d2, rtol=1e-6)
    np.testing.assert_allclose(R_far, R, atol=1e-6 * np.abs(R).max())
    near, far = PCA(3).fit(X), PCA(3).fit(X + offset)
    np.testing.assert_allclose(np.abs(loo_projections(far, X + offset, "approximate")),
                               np.abs(loo_projections(near, X, "approximate")), rtol=1e-5)


@pytest.mark.parametrize("method", ["exact", "approximate"])
@pytest.mark.parametrize("make", [lambda: KernelPCA(2, kernel=RBF(c=50.0)), lambda: PCA(2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loo_projections_have_the_dtype_of_transform(four_signals, method, make, dtype):
    X = four_signals[:15, :40].astype(dtype)
    model = make().fit(X)
    loo = loo_projections(model, X, method)
    assert loo.dtype == model.transform(X).dtype == dtype


@pytest.mark.distributed
def test_same_loo_on_threads_and_on_a_distributed_client(client, four_signals):
    X = four_signals[:30, :300]
    kp = KernelPCA(3, kernel=RBF(c=30.0)).fit(X)
    distributed = loo_projections(kp, X)
    with dask.config.set(scheduler="threads"):
        threaded = loo_projections(kp, X)
    np.testing.assert_array_equal(distributed, threaded)


def test_the_cure_on_unbalanced_semicircles_in_1000_dimensions():
    """The LOO paper's Fig. 6: train error 0.002, test 0.4 (the minority rate), cured 0.002.

    Its "SNR 10" is not defined; a per-dimension variance ratio of 500 (the total noise
    variance equal to the signal's) and a kernel scale of 1/20 of the median squared distance
    reproduce its three error rates.
    """
    X, t = make_unbalanced_semicircles(1000, 1000, snr=500, random_state=0)
    train, test = slice(0, 500), slice(500, 1000)
    d2 = np.sum((X[train][:, None] - X[train][None]) ** 2, axis=-1)
    c = 0.05 * np.median(d2[np.triu_indices(500, 1)])
    kp = KernelPCA(5, kernel=RBF(c=c)).fit(X[train])
    f_train, f_test = kp.transform(X[train]), kp.transform(X[test])
    lda = LinearDiscriminantAnalysis().fit(f_train, t[train])
    assert 1 - lda.score(f_train, t[train]) < 0.02
    plain_error = 1 - lda.score(f_test, t[test])
    minority = min(np.mean(t[test]), 1 - np.mean(t[test]))
    assert plain_error > 0.9 * minority and minority > 0.3
    cured = Renormalizer("histogram").fit(f_train).transform(f_test)
    assert 1 - lda.score(cured, t[test]) < 0.06
    # The LOOCV decision agrees: renormalising the LOO projections beats the plain ones.
    loo = loo_projections(kp, X[train], "approximate")
    decision = loocv_renormalization(f_train, loo, t[train])
    assert decision.renormalize and decision.renormalized_error < decision.plain_error


def test_errors(four_signals):
    X = four_signals[:20, :50]
    with pytest.raises(ValueError, match="method"):
        loo_projections(PCA(2).fit(X), X, "bootstrap")
    with pytest.raises(ValueError, match="training data"):
        loo_projections(PCA(2).fit(X), X[:, :10])
    with pytest.raises(ValueError, match="RBF"):
        loo_projections(KernelPCA(2, kernel="poly").fit(X), X, "approximate")
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        loo_projections(PCA(2), X)
    with pytest.raises(ValueError, match="must match"):
        loocv_renormalization(np.zeros((5, 2)), np.zeros((4, 2)), np.zeros(5))


@pytest.mark.parametrize("method", ["exact", "approximate"])
@pytest.mark.parametrize("model", ["KernelPCA", "Nystrom", "PCA"])
@pytest.mark.filterwarnings("ignore:leave-one-out.*affine hull:UserWarning")  # N > D + 1
def test_data_other_than_the_training_set_is_refused(method, model):
    rng = np.random.default_rng(0)
    X, other = rng.normal(size=(60, 8)), rng.normal(size=(60, 8))
    estimator = {"KernelPCA": KernelPCA(2, kernel=RBF(c=16.0)),
                 "Nystrom": KernelPCA(2, kernel=RBF(c=16.0), solver=Nystrom(n_landmarks=30)),
                 "PCA": PCA(2)}[model].fit(X)
    with pytest.raises(ValueError, match="it has 20 rows, the training data 60"):
        loo_projections(estimator, other[:20], method)
    with pytest.raises(ValueError, match=f"must be the data {type(estimator).__name__} was fitted on"):
        loo_projections(estimator, other, method)
    if model == "Nystrom":
        return  # its refits sample their landmarks by row: another order, other landmarks
    # The training rows in another order are the training data: each row's projection follows.
    order = rng.permutation(60)
    np.testing.assert_allclose(loo_projections(estimator, X[order], method),
                               loo_projections(estimator, X, method)[order], atol=1e-8)


# --- components a refit on N - 1 points cannot have; precomputed kernels -----------------------

def _rbf(X: np.ndarray, c: float) -> np.ndarray:
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / c)


def _assert_equal_up_to_column_signs(got: np.ndarray, expected: np.ndarray,
                                     atol: float) -> None:
    """The full model's eigenvector signs are a convention: compare column by column."""
    signs = np.where((got * expected).sum(axis=0) < 0, -1.0, 1.0)
    np.testing.assert_allclose(got, expected * signs, atol=atol)


def _literal_loo(K: np.ndarray, k: int) -> np.ndarray:
    """Leave-one-out projections by literal refits: eigh of each fold's centred kernel.

    Fold ``n`` centres ``K`` without row and column ``n``, keeps its top ``k`` eigenpairs and
    projects every point by its centred kernel row on the fold's points; the fold's components
    are assigned to the full model's by largest total ``|correlation|`` of the ``N`` points'
    projections, then signed.
    """
    import scipy.optimize

    def fit_and_project(rows: np.ndarray, keep: np.ndarray) -> np.ndarray:
        fold = K[np.ix_(keep, keep)]
        m = len(fold)
        H = np.eye(m) - 1.0 / m
        values, vectors = np.linalg.eigh(H @ fold @ H)
        values, vectors = values[::-1][:k], vectors[:, ::-1][:, :k]
        cross = K[np.ix_(rows, keep)]
        centred = (cross - cross.mean(axis=1, keepdims=True) - fold.mean(axis=0)
                   + fold.mean())
        return centred @ vectors / np.sqrt(values)

    N = len(K)
    everyone = np.arange(N)
    full = fit_and_project(everyone, np.ones(N, dtype=bool))
    out = np.empty((N, k))
    for n in range(N):
        keep = everyone != n
        scores = fit_and_project(everyone, keep)
        corr = np.corrcoef(full.T, scores.T)[:k, k:]
        rows, cols = scipy.optimize.linear_sum_assignment(-np.abs(corr))
        out[n, rows] = np.sign(corr[rows, cols]) * scores[n, cols]
    return out


@pytest.mark.parametrize("N, k", [(12, 10), (12, 3), (3, 1)])
def test_exact_loo_with_up_to_n_minus_2_components_equals_literal_refits(N, k):
    """``N - 2`` is the most a centred ``N - 1``-point refit has with non-zero variance."""
    X = np.random.default_rng(3).normal(size=(N, 6))
    model = KernelPCA(k, kernel=RBF(c=12.0)).fit(X)
    got = loo_projections(model, X)
    assert np.isfinite(got).all()
    _assert_equal_up_to_column_signs(got, _literal_loo(_rbf(X, 12.0), k), atol=1e-9)


@pytest.mark.parametrize("make, n_features", [
    (lambda N: KernelPCA(kernel="rbf"), 6),  # the default keeps all N - 1
    (lambda N: KernelPCA(N - 1, kernel="rbf"), 6),
    (lambda N: KernelPCA(2, kernel="rbf"), 6),  # N = 3 below: k = 2 > N - 2
    (lambda N: PCA(), 100),  # the default keeps min(N, D) = N
    (lambda N: PCA(N - 1), 100),  # refits completed their basis with arbitrary directions
    (lambda N: type("MyKernelPCA", (KernelPCA,), {})(N - 1, kernel="rbf"), 6),  # whole refits
], ids=["kpca-default", "kpca-n-1", "kpca-n3-k2", "pca-default", "pca-n-1", "subclass"])
def test_more_components_than_a_refit_can_have_are_refused(make, n_features):
    """Before: NaN columns, components in the wrong column, or arbitrary numbers, silently."""
    N = 3 if n_features == 6 and make(20).n_components == 2 else 20
    X = np.random.default_rng(1).normal(size=(N, n_features))
    with pytest.raises(ValueError, match=f"fit the model with n_components <= {N - 2}"):
        loo_projections(make(N).fit(X), X)
    fitted = make(N).set_params(n_components=N - 2).fit(X)
    assert np.isfinite(loo_projections(fitted, X)).all()


def test_a_refit_without_a_direction_is_refused():
    """Row 0 alone leaves the plane of the others: its refit has two components, not three."""
    rng = np.random.default_rng(0)
    X = np.zeros((8, 3))
    X[:, :2] = rng.normal(size=(8, 2))
    X[0, 2] = 5.0
    for model in (KernelPCA(3, kernel="linear"), PCA(3)):
        with pytest.raises(ValueError, match="refit without row 0 has 2 components"):
            loo_projections(model.fit(X), X)
    flat = X.copy()
    flat[0, 2] = 0.0  # now PCA's third component has no variance at all
    with pytest.raises(ValueError, match=r"components \[3\] of the PCA"):
        loo_projections(PCA(3).fit(flat), flat)


@pytest.mark.parametrize("make", [
    lambda: KernelPCA(2, kernel="precomputed"),  # the folds of one kernel matrix: K itself
    lambda: type("MyKernelPCA", (KernelPCA,), {})(2, kernel="precomputed"),  # whole refits
    lambda: __import__("sklearn.decomposition").decomposition.KernelPCA(2, kernel="precomputed"),
], ids=["folds", "whole-refits", "sklearn"])
def test_exact_loo_from_a_precomputed_kernel_equals_the_explicit_kernels(make):
    X = np.random.default_rng(0).normal(size=(30, 50))
    K = _rbf(X, 100.0)
    got = loo_projections(make().fit(K), K)
    explicit = loo_projections(KernelPCA(2, kernel=RBF(c=100.0)).fit(X), X)
    np.testing.assert_allclose(got, explicit, atol=1e-10)
    _assert_equal_up_to_column_signs(got, _literal_loo(K, 2), atol=1e-10)


def test_precomputed_folds_share_the_given_matrix():
    X = np.random.default_rng(0).normal(size=(40, 5))
    K = _rbf(X, 10.0)
    folds = kernel_folds(KernelPCA(3, kernel="precomputed"), K)
    np.testing.assert_array_equal(folds.K, K)
    assert kernel_folds(KernelPCA(3, kernel="precomputed", solver="randomized"), K) is None


def test_approximate_loo_of_a_precomputed_kernel_says_why_not():
    X = np.random.default_rng(0).normal(size=(30, 50))
    K = _rbf(X, 100.0)
    with pytest.raises(ValueError, match="needs the data in input space.*use method='exact'"):
        loo_projections(KernelPCA(2, kernel="precomputed").fit(K), K, "approximate")


@pytest.mark.parametrize("argument", ["train_scores", "loo_scores"])
def test_loocv_renormalization_names_the_non_finite_argument(argument):
    # loo_scores was checked by the Renormalizer inside, which called it "scores"
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 20)
    scores = {"train_scores": rng.normal(size=(20, 2)), "loo_scores": rng.normal(size=(20, 2))}
    scores[argument][3, 1] = np.nan
    with pytest.raises(ValueError, match=f"^{argument} contains NaN"):
        loocv_renormalization(**scores, y=y)


def test_loocv_renormalization_documents_its_parameters():
    import inspect

    from numpydoc.docscrape import FunctionDoc

    documented = [p.name for p in FunctionDoc(loocv_renormalization)["Parameters"]]
    assert documented == list(inspect.signature(loocv_renormalization).parameters)


def test_loocv_renormalization_clones_the_classifier():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 30)
    train = np.c_[y + 0.3 * rng.normal(size=30), rng.normal(size=30)]
    classifier = LinearDiscriminantAnalysis()
    assert loocv_renormalization(train, 0.2 * train, y, classifier) == \
        loocv_renormalization(train, 0.2 * train, y)
    assert not hasattr(classifier, "classes_")  # cloned, never fitted itself
