"""Leave-one-out projections: what a training point's projection would be if it were new.

Small-sample PCA and kernel PCA overfit: training projections have more variance than test
projections (variance inflation, the LOO paper §2–3). The leave-one-out projection of ``x_n``
(its projection on a model fitted without it) behaves like a test projection, so it measures
the inflation and calibrates the cure (:class:`~dkpca.generalization.Renormalizer`).

- ``method="exact"``: ``N`` refits on the ``N - 1``-point subsets, run as independent Dask
  tasks; every refit's components are matched to the full-sample ones (order by the assignment
  that maximises ``|correlation|`` of the two models' projections of all points, then sign), so
  the returned columns are comparable with the full-sample scores. A :class:`~dkpca.KernelPCA`
  whose refits would use the exact solver is refitted from one evaluation of the ``N × N``
  kernel (``dkpca.generalization._kernel_folds``): the folds solve their eigenproblems on it
  together, a stack at a time, the same numbers as refits without the refits' two kernel
  evaluations each. A :class:`~dkpca.PCA` whose refits would use an exact solver is refitted
  the same way from its Gram matrix ``X Xᵀ`` (the linear kernel; kernel PCA's scores there
  are PCA's). Any other estimator is cloned and refitted whole, one task per point.
- ``method="approximate"``: one Gram-matrix inverse. The squared distance of ``x_n`` to the span
  of the other points is ``1 / (G⁻¹)_nn`` (``G = X Xᵀ``), and the residual itself is
  ``(G⁻¹ X)_n / (G⁻¹)_nn``. Kernel PCA with an RBF kernel ``exp(-r²/c)``: the full-sample
  projection times ``exp(-||x_n⊥||² / c)`` (the lost orthogonal part); linear PCA: eq. (1), the
  projection of ``x_n`` without its orthogonal part on the full-sample eigenvectors. When
  ``N`` exceeds the rank of the data, every point lies in the span of the others and the
  approximation returns the full-sample projections.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
import scipy.linalg
import scipy.optimize
from sklearn.base import clone

from dkpca._typing import ArrayLike, RandomStateLike
from dkpca._validation import check_is_fitted, check_random_state
from dkpca.blocked import compute, scheduler_threads
from dkpca.linalg import single_threaded_blas

from ._kernel_folds import KernelFolds, kernel_folds

__all__ = ["LoocvDecision", "loo_projections", "loocv_renormalization", "orthogonal_residuals"]

logger = logging.getLogger(__name__)

METHODS = ("exact", "approximate")

#: Tasks per scheduler thread for folds that share one kernel (``_kernel_folds``): enough
#: for balance, few enough that the scheduler's cost per task stays small beside the folds.
FOLD_TASKS_PER_THREAD = 4


def orthogonal_residuals(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's component orthogonal to the span of the other rows, and its squared norm.

    Returns ``(R, d2)`` with ``R[n] = x_n⊥`` and ``d2[n] = ||x_n⊥||² = 1 / (G⁻¹)_nn`` from one
    inverse of ``G = X Xᵀ``; zeros when ``G`` is singular (more points than dimensions).

    Examples
    --------
    >>> X = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    >>> R, d2 = orthogonal_residuals(X)
    >>> R.round(6).tolist(), d2.round(6).tolist()
    ([[0.5, -0.5, 0.0], [0.0, 1.0, 0.0]], [0.5, 1.0])
    """
    X = np.asarray(X, dtype=np.float64)
    G = X @ X.T
    try:
        factor = scipy.linalg.cho_factor(G)
        inverse = scipy.linalg.cho_solve(factor, np.eye(len(G)))
    except scipy.linalg.LinAlgError:
        logger.info("leave-one-out: the Gram matrix is singular (N > rank); no orthogonal parts")
        return np.zeros_like(X), np.zeros(len(X))
    diagonal = np.diag(inverse)
    if not np.all(diagonal > 0) or np.linalg.cond(G) > 1e12:
        logger.info("leave-one-out: the Gram matrix is near singular; no orthogonal parts")
        return np.zeros_like(X), np.zeros(len(X))
    return (inverse @ X) / diagonal[:, None], 1.0 / diagonal


def _match(full: np.ndarray, refit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column order and signs that align ``refit``'s components with ``full``'s."""
    a = full - full.mean(axis=0)
    b = refit - refit.mean(axis=0)
    corr = (a.T @ b) / np.outer(np.linalg.norm(a, axis=0), np.linalg.norm(b, axis=0))
    rows, cols = scipy.optimize.linear_sum_assignment(-np.abs(np.nan_to_num(corr)))
    order = cols[np.argsort(rows)]
    signs = np.sign(corr[np.arange(len(order)), order])
    return order, np.where(signs == 0, 1.0, signs)


def _fixed_components(estimator: Any, k: int) -> Any:
    """Return an unfitted copy that keeps exactly ``k`` components in every refit.

    A variance fraction or an eigenvalue threshold could keep a different number on ``N - 1``
    points, and the refits must be comparable with the full model component by component.
    """
    template = clone(estimator)
    params = template.get_params()
    if "n_components" in params:
        fixed: dict[str, Any] = {"n_components": k}
        if "min_relative_eigenvalue" in params:
            fixed["min_relative_eigenvalue"] = None
        template.set_params(**fixed)
    return template


def _loo_task(estimator: Any, X: np.ndarray, full_scores: np.ndarray, n: int,
              seed: np.random.SeedSequence) -> np.ndarray:
    """Refit without row ``n``; return its aligned projection ``(k,)``."""
    model = clone(estimator)
    if "random_state" in model.get_params():
        model.set_params(random_state=int(seed.generate_state(1)[0]))
    keep = np.ones(len(X), dtype=bool)
    keep[n] = False
    with dask.config.set(scheduler="sync"):  # a task runs its refit in place
        model.fit(X[keep])
        scores = np.asarray(model.transform(X))
    return _matched_row(scores, full_scores, n)


def _kernel_folds_task(folds: KernelFolds, full_scores: np.ndarray,
                       points: np.ndarray) -> np.ndarray:
    """Refit without each row of ``points`` from the shared kernel; their aligned projections."""
    # one BLAS limit for the task: the folds' many small eigenproblems would each set one
    with single_threaded_blas():
        return np.stack([_matched_row(scores, full_scores, n)
                         for n, scores in zip(points, folds.fold_scores(points), strict=True)])


def _matched_row(scores: np.ndarray, full_scores: np.ndarray, n: int) -> np.ndarray:
    """Row ``n`` of a refit's ``scores``, its components matched to ``full_scores``'."""
    k = full_scores.shape[1]
    if scores.shape[1] < k:
        raise ValueError(f"a leave-one-out refit found {scores.shape[1]} components, fewer than "
                         f"the full model's {k}; fix n_components")
    order, signs = _match(full_scores, scores[:, :k] if scores.shape[1] == k else scores)
    return scores[n, order[:k]] * signs[:k]


def _approximate(estimator: Any, X: np.ndarray, full_scores: np.ndarray) -> np.ndarray:
    from dkpca.kernels import RBF

    residuals, d2 = orthogonal_residuals(X)
    kernel = getattr(estimator, "kernel_", None)
    if kernel is not None:
        if not isinstance(kernel, RBF):
            raise ValueError(f"the approximate leave-one-out projection is for RBF kernels (and "
                             f"linear PCA), not {kernel!r}; use method='exact'")
        return full_scores * np.exp(-d2 / kernel.c)[:, None]
    if hasattr(estimator, "components_"):  # linear PCA, eq. (1)
        return np.asarray(estimator.transform(X - residuals))
    raise TypeError(f"no approximate leave-one-out projection for {type(estimator).__name__}")


def loo_projections(
    estimator: Any, X: ArrayLike, method: str = "exact", *,
    random_state: RandomStateLike = None,
) -> np.ndarray:
    """Leave-one-out projections of the training points of a fitted ``estimator``.

    Parameters
    ----------
    estimator : KernelPCA or PCA, fitted on ``X``
        (or any scikit-learn transformer for ``method="exact"``).
    X : (N, D) array-like
        The training data (in memory: the setting is ``N`` small, ``D`` large).
    method : {"exact", "approximate"}, default="exact"
        ``"exact"``: ``N`` refits run as parallel Dask tasks (exact kernel PCA: from one
        kernel matrix, several folds a task); ``"approximate"``: one Gram inverse (RBF kernel
        PCA or linear PCA).
    random_state : int, Generator or None
        Seeds the refits' own randomness (one ``SeedSequence`` child per refit).

    Returns
    -------
    (N, k) array
        Row ``n``: the projection of ``x_n`` on the model without it, with components aligned
        (order and sign) to the full-sample model's.

    References
    ----------
    T. J. Abrahamsen and L. K. Hansen, "A cure for variance inflation in high dimensional
    kernel principal component analysis", Journal of Machine Learning Research 12,
    2027–2044, 2011 (the "LOO paper").

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca import KernelPCA
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(40, 500))
    >>> kp = KernelPCA(2, kernel=RBF(c=500.0)).fit(X)
    >>> exact = loo_projections(kp, X)
    >>> train = kp.transform(X)
    >>> bool((exact.std(axis=0) < train.std(axis=0)).all())  # variance inflation
    True
    """
    if method not in METHODS:
        raise ValueError(f"loo_projections: method must be one of {METHODS}, got {method!r}")
    check_is_fitted(estimator, "n_features_in_")
    from dkpca.io import as_array

    data = as_array(X)
    X = np.asarray(compute(data)[0] if hasattr(data, "dask") else data, dtype=np.float64)
    if X.shape[1] != estimator.n_features_in_ or X.shape[0] < 3:
        raise ValueError(f"loo_projections: X must be the training data, at least 3 x "
                         f"{estimator.n_features_in_}; got {X.shape}")
    full_scores = np.asarray(estimator.transform(X), dtype=np.float64)
    _check_training_data(estimator, X, full_scores)
    if method == "approximate":
        return _approximate(estimator, X, full_scores)
    template = _fixed_components(estimator, full_scores.shape[1])
    shared_scores = dask.delayed(full_scores)
    folds = kernel_folds(template, X)
    if folds is not None:  # a fold takes milliseconds: a task runs several
        shared_folds = dask.delayed(folds)
        groups = np.array_split(np.arange(len(X)),
                                min(len(X), FOLD_TASKS_PER_THREAD * scheduler_threads()))
        tasks = [dask.delayed(_kernel_folds_task, pure=True)(shared_folds, shared_scores, points)
                 for points in groups]
        return np.concatenate(compute(*tasks))
    seeds = check_random_state(random_state).spawn(len(X))
    shared_X, shared_estimator = dask.delayed(X), dask.delayed(template)
    tasks = [dask.delayed(_loo_task, pure=True)(shared_estimator, shared_X, shared_scores, n,
                                                seed)
             for n, seed in enumerate(seeds)]
    logger.info("leave-one-out: %d refits of %s", len(tasks), type(estimator).__name__)
    return np.stack(compute(*tasks))


def _check_training_data(estimator: Any, X: np.ndarray, scores: np.ndarray) -> None:
    """Refuse ``X`` unless it holds the rows ``estimator`` was fitted on (in any order).

    Leave-one-out projections of other data are numbers with no meaning. The fitted model
    records enough to tell, at no extra cost: the training scores of kernel PCA
    (``eigenvectors_ * sqrt(eigenvalues_)``, which ``transform`` of the training rows
    reproduces; compared column by column as sorted values, since the order of the rows does
    not change anyone's leave-one-out projection), the mean and count of linear PCA.
    """
    basis = getattr(estimator, "basis_", None)
    expected = getattr(estimator, "n_samples_", getattr(basis, "n_samples", len(X)))
    problem = f"it has {len(X)} rows, the training data {expected}" if len(X) != expected else None
    vectors = getattr(estimator, "eigenvectors_", None)
    if problem is None and vectors is not None and basis is not None:
        (vectors,) = compute(vectors) if hasattr(vectors, "dask") else (vectors,)
        training = np.asarray(vectors) * np.sqrt(np.maximum(estimator.eigenvalues_, 0.0))
        scale = max(float(np.abs(training).max()), np.finfo(float).tiny)
        gap = np.abs(np.sort(training, axis=0) - np.sort(scores, axis=0)).max()
        if gap > 1e-4 * scale:  # float32 tiles agree to ~1e-7
            problem = "its projections differ from the training data's"
    mean = getattr(estimator, "mean_", None)
    if problem is None and mean is not None and basis is None:
        scale = max(float(np.abs(X).max()), np.finfo(float).tiny)
        if np.abs(X.mean(axis=0) - mean).max() > 1e-8 * scale:
            problem = "its mean differs from the training data's"
    if problem is not None:
        raise ValueError(f"loo_projections: X must be the data {type(estimator).__name__} was "
                         f"fitted on, but {problem}; pass the training data "
                         "(for new data, use transform)")


@dataclass(frozen=True)
class LoocvDecision:
    """Outcome of :func:`loocv_renormalization`.

    Attributes
    ----------
    renormalize : bool
        Whether the renormalised leave-one-out error beats the plain one.
    plain_error, renormalized_error : float
        Leave-one-out classification errors with plain and histogram-equalised LOO projections.
    """

    renormalize: bool
    plain_error: float
    renormalized_error: float


def loocv_renormalization(
    train_scores: np.ndarray, loo_scores: np.ndarray, y: np.ndarray, classifier: Any = None,
) -> LoocvDecision:
    """Decide as the LOO paper's §4.2: renormalise test projections only where it helps.

    For every training point ``n`` the classifier (default linear discriminant analysis) is
    trained on the other points' training projections and labels and predicts the point from
    its leave-one-out projection, plain and after histogram equalisation of all LOO
    projections to the training histogram. Renormalisation is advised when the second error
    is lower.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 60)
    >>> train = np.c_[y + 0.3 * rng.normal(size=60), rng.normal(size=60)]
    >>> loo = 0.2 * train  # shrunk, as inflated training projections leave their LOO ones
    >>> loocv_renormalization(train, loo, y).renormalize
    True
    """
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    from .renormalize import Renormalizer

    train_scores, loo_scores = np.asarray(train_scores), np.asarray(loo_scores)
    y = np.asarray(y)
    if not train_scores.shape == loo_scores.shape or len(y) != len(train_scores):
        raise ValueError(f"loocv_renormalization: train_scores {train_scores.shape}, "
                         f"loo_scores {loo_scores.shape} and y {y.shape} must match")
    equalised = Renormalizer("histogram").fit(train_scores).transform(loo_scores)
    base = classifier if classifier is not None else LinearDiscriminantAnalysis()
    plain = renormalized = 0
    for n in range(len(y)):
        keep = np.arange(len(y)) != n
        model = clone(base).fit(train_scores[keep], y[keep])
        plain += int(model.predict(loo_scores[n : n + 1])[0] != y[n])
        renormalized += int(model.predict(equalised[n : n + 1])[0] != y[n])
    return LoocvDecision(renormalize=renormalized < plain, plain_error=plain / len(y),
                         renormalized_error=renormalized / len(y))
