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
- ``method="approximate"``: one eigendecomposition of the centred Gram matrix. The squared
  distance of ``x_n`` to the affine hull of the other points is ``1 / (G⁺)_nn``
  (``G = X_c X_cᵀ``, ``X_c`` the centred data), and the residual itself is
  ``(G⁺ X_c)_n / (G⁺)_nn`` (:func:`orthogonal_residuals`; the paper's linear span, on
  centred data, becomes the affine hull, which does not move with the data). Kernel PCA
  with an RBF kernel ``exp(-r²/c)``: the full-sample projection times
  ``exp(-||x_n⊥||² / c)`` (the lost orthogonal part); linear PCA: eq. (1), the projection of
  ``x_n`` without its orthogonal part on the full-sample eigenvectors. A point in the affine
  hull of the others (a duplicate row; every point when ``N > D + 1``) has no orthogonal
  part and keeps its full-sample projection, with a warning that names it; the other points
  keep their correction.

A refit on ``N - 1`` points, centred, has at most ``N - 2`` components with non-zero variance,
so a model that keeps more (``KernelPCA()`` and ``PCA()`` with their default
``n_components=None`` keep ``N - 1`` or ``min(N, D)``) has components no refit can estimate:
``loo_projections`` refuses it, naming the largest ``n_components`` that works, rather than
return columns with no leave-one-out meaning. The same holds for any refit that finds fewer
components with non-zero variance than the model keeps (a point that alone spans a direction).
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

from dkpca._scattered import shared
from dkpca._typing import ArrayLike, RandomStateLike
from dkpca._validation import check_is_fitted, check_random_state
from dkpca.blocked import compute, scheduler_threads
from dkpca.linalg import single_threaded_blas
from dkpca.solvers._components import ZERO_RATIO

from ._kernel_folds import KernelFolds, kernel_folds
from ._residuals import orthogonal_residuals

__all__ = ["LoocvDecision", "loo_projections", "loocv_renormalization", "orthogonal_residuals"]

logger = logging.getLogger(__name__)

METHODS = ("exact", "approximate")

#: Tasks per scheduler thread for folds that share one kernel (``_kernel_folds``): enough
#: for balance, few enough that the scheduler's cost per task stays small beside the folds.
FOLD_TASKS_PER_THREAD = 4

def _match(full: np.ndarray, refit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column order and signs that align ``refit``'s components with ``full``'s."""
    a = full - full.mean(axis=0)
    b = refit - refit.mean(axis=0)
    norms = np.outer(np.linalg.norm(a, axis=0), np.linalg.norm(b, axis=0))
    corr = np.divide(a.T @ b, norms, out=np.zeros_like(norms), where=norms > 0)
    rows, cols = scipy.optimize.linear_sum_assignment(-np.abs(corr))
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


def _precomputed(estimator: Any) -> bool:
    """Whether ``estimator`` takes a precomputed kernel matrix in place of the data."""
    kernel = estimator.get_params().get("kernel") if hasattr(estimator, "get_params") else None
    return isinstance(kernel, str) and kernel == "precomputed"


def _loo_task(estimator: Any, X: np.ndarray, full_scores: np.ndarray, n: int,
              seed: np.random.SeedSequence) -> np.ndarray:
    """Refit without row ``n``; return its aligned projection ``(k,)``.

    For a precomputed kernel ``X`` is ``K``: the refit takes ``K`` without row and column
    ``n``, and projects every point by its kernel row on the ``N - 1`` points it keeps.
    """
    model = clone(estimator)
    if "random_state" in model.get_params():
        model.set_params(random_state=int(seed.generate_state(1)[0]))
    keep = np.ones(len(X), dtype=bool)
    keep[n] = False
    with dask.config.set(scheduler="sync"):  # a task runs its refit in place
        if _precomputed(model):
            model.fit(X[np.ix_(keep, keep)])
            scores = np.asarray(model.transform(X[:, keep]))
        else:
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
    """Row ``n`` of a refit's ``scores``, its components matched to ``full_scores``'.

    Only the refit's components with variance over its own points are candidates: a refit
    returns a column of zeros, or (linear PCA) an arbitrary completion of its basis, for a
    direction its ``N - 1`` points do not span, and neither is a leave-one-out projection.
    """
    k = full_scores.shape[1]
    spread = np.delete(scores, n, axis=0).var(axis=0)
    live = np.flatnonzero(spread > ZERO_RATIO * max(float(spread.max(initial=0.0)),
                                                    np.finfo(np.float64).tiny))
    if live.size < k:
        raise ValueError(f"loo_projections: the refit without row {n} has {live.size} "
                         f"components with non-zero variance, fewer than the model's {k} (row "
                         f"{n} alone spans a direction of the model); fit the model with "
                         f"n_components <= {live.size}")
    order, signs = _match(full_scores, scores[:, live])
    return scores[n, live[order]] * signs


def _approximate(estimator: Any, X: np.ndarray, full_scores: np.ndarray) -> np.ndarray:
    from dkpca.kernels import RBF

    kernel = getattr(estimator, "kernel_", None)
    if _precomputed(estimator):
        raise ValueError("loo_projections: method='approximate' needs the data in input space "
                         "(each point's distance to the affine hull of the others), which a model "
                         "fitted on a precomputed kernel matrix does not have; use "
                         "method='exact', which refits from the kernel matrix")
    residuals, d2 = orthogonal_residuals(X)
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
        For ``KernelPCA(kernel="precomputed")``: the ``(N, N)`` training kernel matrix.
    method : {"exact", "approximate"}, default="exact"
        ``"exact"``: ``N`` refits run as parallel Dask tasks (exact kernel PCA: from one
        kernel matrix, several folds a task; a precomputed kernel: from the given matrix);
        ``"approximate"``: one Gram inverse (RBF kernel PCA or linear PCA, on input-space
        data).
    random_state : int, Generator or None
        Seeds the refits' own randomness (one ``SeedSequence`` child per refit).

    Returns
    -------
    (N, k) array
        Row ``n``: the projection of ``x_n`` on the model without it, with components aligned
        (order and sign) to the full-sample model's. Its dtype is that of
        ``estimator.transform(X)`` (float32 data stay float32); the work is done in float64.

    Raises
    ------
    ValueError
        When the model keeps more than ``N - 2`` components (``method="exact"``): a refit on
        ``N - 1`` centred points has at most ``N - 2`` with non-zero variance, so the others
        have no leave-one-out projection. The defaults ``KernelPCA()`` (every non-zero
        component, ``N - 1`` for most data) and ``PCA()`` (``min(N, D)``) keep more; fit with
        ``n_components <= N - 2``. Likewise when a refit finds fewer components with
        non-zero variance than the model keeps, or the model keeps components with no
        variance.

    Warns
    -----
    UserWarning
        ``method="approximate"``: when rows lie in the affine hull of the other rows
        (duplicates, or ``N > D + 1``); those rows keep their full-sample projections, the
        others their correction (:func:`orthogonal_residuals`).

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
    given = np.asarray(compute(data)[0] if hasattr(data, "dask") else data)
    X = given.astype(np.float64)
    if X.ndim != 2 or X.shape[1] != estimator.n_features_in_ or X.shape[0] < 3:
        raise ValueError(f"loo_projections: X must be the training data, at least 3 x "
                         f"{estimator.n_features_in_}; got {X.shape}")
    transformed = np.asarray(estimator.transform(given))  # its dtype is the result's
    dtype = transformed.dtype if transformed.dtype.kind == "f" else np.dtype(np.float64)
    full_scores = transformed.astype(np.float64)
    _check_training_data(estimator, X, full_scores)
    if method == "approximate":
        return _approximate(estimator, X, full_scores).astype(dtype, copy=False)
    _check_component_count(estimator, full_scores)
    template = _fixed_components(estimator, full_scores.shape[1])
    shared_scores = shared(full_scores)
    folds = kernel_folds(template, X)
    if folds is not None:  # a fold takes milliseconds: a task runs several
        shared_folds = shared(folds)
        groups = np.array_split(np.arange(len(X)),
                                min(len(X), FOLD_TASKS_PER_THREAD * scheduler_threads()))
        tasks = [dask.delayed(_kernel_folds_task, pure=True)(shared_folds, shared_scores, points)
                 for points in groups]
        return np.concatenate(compute(*tasks)).astype(dtype, copy=False)
    seeds = check_random_state(random_state).spawn(len(X))
    shared_X, shared_estimator = shared(X), shared(template)
    tasks = [dask.delayed(_loo_task, pure=True)(shared_estimator, shared_X, shared_scores, n,
                                                seed)
             for n, seed in enumerate(seeds)]
    logger.info("leave-one-out: %d refits of %s", len(tasks), type(estimator).__name__)
    return np.stack(compute(*tasks)).astype(dtype, copy=False)


def _check_component_count(estimator: Any, full_scores: np.ndarray) -> None:
    """Refuse a model whose components the ``N - 1``-point refits cannot all estimate.

    A centred refit on ``N - 1`` points has at most ``N - 2`` components with non-zero
    variance, so dkpca's models may keep at most that many; and a component of the model with
    no variance has no direction for a refit's to match. (Other transformers need not centre:
    their refits are checked one by one, :func:`_matched_row`.)
    """
    from dkpca.decomposition import KernelPCA
    from dkpca.linear import PCA

    N, k = full_scores.shape
    name = type(estimator).__name__
    requested = estimator.get_params().get("n_components")
    kept = (f"n_components=None, the default, keeps all {k}" if requested is None
            else f"n_components={requested!r} keeps {k}")
    if isinstance(estimator, KernelPCA | PCA) and k > N - 2:
        raise ValueError(
            f"loo_projections: {name} keeps {k} components ({kept}), but a refit on the "
            f"N - 1 = {N - 1} points without one has at most N - 2 = {N - 2} with non-zero "
            f"variance (centring takes one), so "
            f"{f'component {k} has' if k == N - 1 else f'components {N - 1} to {k} have'} no "
            f"leave-one-out projection; fit the model with n_components <= {N - 2}")
    variance = getattr(estimator, "explained_variance_", None)
    variance = (np.asarray(variance, dtype=np.float64) if variance is not None
                and np.shape(variance) == (k,) else full_scores.var(axis=0))
    empty = np.flatnonzero(~(variance > ZERO_RATIO * max(float(variance.max(initial=0.0)),
                                                         np.finfo(np.float64).tiny)))
    if empty.size:
        raise ValueError(
            f"loo_projections: components {(empty + 1).tolist()} of the {name} ({kept}) have "
            f"no variance on the training data, so they have no leave-one-out projection; fit "
            f"the model with n_components <= {int(empty[0])}")


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

    Parameters
    ----------
    train_scores : array-like of shape (n, q)
        The training projections, finite, ``n >= 2``.
    loo_scores : array-like of shape (n, q)
        The leave-one-out projections of the same points (:func:`loo_projections`), finite,
        row ``i`` the projection of training point ``i``.
    y : array-like of shape (n,)
        The class labels of the training points.
    classifier : scikit-learn classifier, optional
        An unfitted estimator with ``fit`` and ``predict`` that :func:`sklearn.base.clone`
        can copy (it has ``get_params``): it is cloned, never fitted itself, once per
        training point. Default ``LinearDiscriminantAnalysis()``, the paper's choice.

    Returns
    -------
    LoocvDecision

    Raises
    ------
    ValueError
        If ``train_scores`` or ``loo_scores`` is not a 2-D array of finite numbers (the
        message names which), or the shapes of the two and the length of ``y`` differ.
    TypeError
        If ``classifier`` cannot be cloned by scikit-learn.

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

    from .renormalize import Renormalizer, _check_scores

    # checked here under their own names: the Renormalizer below would call loo_scores "scores"
    train_scores = _check_scores(train_scores, "train_scores")
    loo_scores = _check_scores(loo_scores, "loo_scores")
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
