"""Pre-images: points of the input space whose feature-space image matches a projection.

A fitted :class:`~dkpca.solvers.KernelBasis` reconstructs a point's feature-space image from its
scores ``β`` as ``P φ(x) = Σ_i γ_i φ(b_i)`` over the basis points ``b_i``, with
``γ = coef β + c_μ`` (``c_μ``, the mean's coefficients, carries the centring). Two ways back:

- :func:`fixed_point_preimage` (RBF kernels; Mika et al. 1999, the MDD paper's §II): minimise
  ``||φ(z) - P φ(x)||²`` by iterating ``z ← Σ γ_i k(z, b_i) b_i / Σ γ_i k(z, b_i)`` from a start
  (the noisy point itself when denoising), vectorised over a block of points, blockwise over
  dask chunks. A vanishing denominator restarts the point once from the linear pre-image
  ``Σ γ_i b_i / Σ γ_i``; points still failing, or not converged after ``max_iter``, are kept at
  their last iterate, and counted once for the whole computation: a warning when the result is
  computed here (in-memory input), the summary line of ``dkpca denoise``; lazy results leave
  the count to ``_denoise_counted``.
- :class:`LearnedPreimage` (any kernel; Bakır et al. 2004, scikit-learn's
  ``fit_inverse_transform``): kernel ridge regression from training scores to training points,
  ``x(β) = k(β, T) (K_T + α I)⁻¹ X``, evaluated blockwise.

:class:`PreimageMixin` gives ``KernelPCA`` its ``inverse_transform`` and ``denoise``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse
from sklearn.exceptions import NotFittedError

from dkpca._device import array_module, astype, namespace_dtype, to_device, to_host
from dkpca.blocked import compute, kernel_device, kernel_product
from dkpca.io import is_sparse
from dkpca.kernels import RBF, Kernel
from dkpca.kernels._base import _squared_norms
from dkpca.options import preimage_options, solver_name

__all__ = ["LearnedPreimage", "PreimageResult", "fixed_point_preimage"]

logger = logging.getLogger(__name__)

#: A denominator below this share of ``Σ |γ_i k(z, b_i)|`` counts as vanished.
DENOMINATOR_FLOOR = 1e-10

#: Training points the learned pre-image regresses on at most (an ``r × r`` solve).
MAX_LEARNED_SAMPLES = 5000

#: Solvers whose basis is the training data itself, row for row (the others keep landmarks).
TRAINING_BASIS_SOLVERS = ("exact", "randomized", "sketch")


@dataclass(frozen=True)
class PreimageResult:
    """Outcome of :func:`fixed_point_preimage` on in-memory points.

    Attributes
    ----------
    points : (p, d) array
    converged : (p,) bool array
    n_iter : int
        Iterations of the slowest converged point (``max_iter`` when some did not converge).
    """

    points: np.ndarray
    converged: np.ndarray
    n_iter: int


def _weights(basis: Any, scores: np.ndarray) -> np.ndarray:
    """``Γ = scores coefᵀ + c_μ``: each point's reconstruction over the basis points."""
    gamma = scores @ basis.coef.T
    gamma += basis.mean_weights()
    return gamma


def _linear_preimage(weights: np.ndarray, B: np.ndarray) -> np.ndarray:
    xp = array_module(weights, B)
    total = xp.sum(weights, axis=1, keepdims=True)
    safe = xp.where(xp.abs(total) > DENOMINATOR_FLOOR, total, 1.0)
    return (weights @ B) / safe


def _within(rows: Any, selected: Any) -> Any:
    """Return the mask of the points ``selected`` among those of the mask ``rows``."""
    xp = array_module(rows)
    full = xp.zeros(rows.shape, dtype=rows.dtype)
    full[rows] = selected
    return full


def _fixed_point_block(
    weights: np.ndarray, B: np.ndarray, start: np.ndarray | None, gamma: float, tol: float,
    max_iter: int,
) -> PreimageResult:
    """Run the iteration for one block of points (``weights``: ``p × m``).

    On the library of ``weights`` and ``B`` (numpy, CuPy on a GPU, or another written to the
    array API standard: points are picked by boolean masks alone, which it allows); the result
    is on the host. Points that converged or gave up drop out of the later iterations.
    """
    xp = array_module(weights, B)
    z = (_linear_preimage(weights, B) if start is None
         else astype(start, xp.float64, copy=True))
    p = z.shape[0]
    boolean = namespace_dtype(xp, np.bool_)
    active = xp.ones(p, dtype=boolean)
    converged = xp.zeros(p, dtype=boolean)
    restarted = xp.zeros(p, dtype=boolean)
    step_tol = float(tol / np.sqrt(2.0 * gamma))  # relative to the kernel's length scale σ
    b_norms = _squared_norms(B)
    last = 0
    for iteration in range(1, max_iter + 1):
        if not bool(xp.any(active)):
            break
        rows = active
        zi = z[rows]
        d2 = xp.reshape(_squared_norms(zi), (-1, 1)) - 2.0 * (zi @ B.T) + b_norms
        W = xp.exp(-gamma * xp.maximum(d2, 0.0)) * weights[rows]
        denominator = xp.sum(W, axis=1)
        vanished = xp.abs(denominator) <= DENOMINATOR_FLOOR * xp.sum(xp.abs(W), axis=1)
        vanished |= ~xp.isfinite(denominator)
        if bool(xp.any(vanished)):  # restart once from the linear pre-image, then give up
            before = restarted[rows]
            again = _within(rows, vanished & ~before)
            z[again] = _linear_preimage(weights[again], B)
            restarted |= again
            active = active & ~_within(rows, vanished & before)
        ok = ~vanished
        new = (W[ok] @ B) / xp.reshape(denominator[ok], (-1, 1))
        moved = xp.sqrt(xp.sum((new - zi[ok]) ** 2, axis=1))
        stepped = _within(rows, ok)
        z[stepped] = new
        done = _within(stepped, moved <= step_tol)
        converged |= done
        active = active & ~done
        if bool(xp.any(done)):
            last = iteration
    n_iter = max_iter if not bool(xp.all(converged)) else last
    return PreimageResult(points=to_host(z), converged=to_host(converged), n_iter=n_iter)


def fixed_point_preimage(
    basis: Any, scores: np.ndarray, start: np.ndarray | None = None, *, tol: float = 1e-6,
    max_iter: int = 300, device: str = "cpu",
) -> PreimageResult:
    """Pre-images of in-memory ``scores`` on an RBF kernel basis by the fixed-point iteration.

    Parameters
    ----------
    basis : KernelBasis
        With an RBF kernel and its basis points in memory.
    scores : (p, k) array
    start : (p, d) array, optional
        Where each point's iteration starts (the noisy points, to denoise them); default the
        linear pre-image ``Σ γ_i b_i / Σ γ_i``.
    tol : float, default=1e-6
        A point has converged when a step moves it less than ``tol`` times the kernel's length
        scale ``σ``.
    max_iter : int, default=300
    device : {"cpu", "cuda"}, default="cpu"
        Where the iteration runs: on ``"cuda"`` the basis points, the weights and the starts
        are copied to the GPU; the pre-images come back to the host.

    Examples
    --------
    A training point projected on all components is its own pre-image:

    >>> import numpy as np
    >>> from dkpca import KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(30, 2))
    >>> kp = KernelPCA(kernel="rbf", sigma2=0.5).fit(X)
    >>> result = fixed_point_preimage(kp.basis_, kp.transform(X[:1]), X[:1] + 0.01)
    >>> bool(result.converged.all()), bool(np.allclose(result.points, X[:1], atol=1e-5))
    (True, True)
    """
    kernel = _rbf(basis.kernel)
    B = to_device(np.asarray(basis.basis, dtype=np.float64), device)
    weights = to_device(_weights(basis, np.asarray(scores, dtype=np.float64)), device)
    start = None if start is None else to_device(np.asarray(start, dtype=np.float64), device)
    return _fixed_point_block(weights, B, start, kernel.gamma, tol, max_iter)


def _rbf(kernel: Kernel) -> RBF:
    if not isinstance(kernel, RBF):
        raise ValueError(  # noqa: TRY004 - a parameter choice, like scikit-learn's
            f"the fixed-point pre-image needs an RBF kernel, not {kernel!r}; use "
            f"preimage='learned' with fit_inverse_transform=True"
        )
    return kernel


def _fixed_point_task(basis, scores, start, tol, max_iter, dtype, device):
    result = fixed_point_preimage(basis, scores, start, tol=tol, max_iter=max_iter,
                                  device=device)
    return result.points.astype(dtype, copy=False), int((~result.converged).sum())


def fixed_point_blocks(
    basis: Any, scores: da.Array, start: da.Array | None, *, tol: float, max_iter: int,
    dtype: np.dtype,
) -> tuple[da.Array, da.Array]:
    """:func:`fixed_point_preimage` lazily, one task per row chunk of ``scores``.

    Returns the pre-images and the number of points that did not converge (a lazy scalar);
    computed together, the pre-images are computed once. The tasks iterate on the device of
    the ``dkpca.device`` setting.
    """
    device = kernel_device(basis.kernel, basis.basis)
    shared = dask.delayed(basis, pure=True)
    score_blocks = scores.rechunk({1: -1}).to_delayed().ravel()
    start_blocks = (start.rechunk({0: scores.chunks[0], 1: -1}).to_delayed().ravel()
                    if start is not None else [None] * len(score_blocks))
    d = basis.basis.shape[1]
    tasks = [dask.delayed(_fixed_point_task, pure=True)(shared, s, x, tol, max_iter, dtype,
                                                        device)
             for s, x in zip(score_blocks, start_blocks, strict=True)]
    # named functions, not task[0]: dask's array optimisation would take a getitem for a slice
    points = da.concatenate([
        da.from_delayed(dask.delayed(_points, pure=True)(task), shape=(rows, d), dtype=dtype)
        for task, rows in zip(tasks, scores.chunks[0], strict=True)
    ], axis=0)
    missed = da.concatenate([da.from_delayed(dask.delayed(_missed, pure=True)(task), shape=(1,),
                                             dtype=np.int64) for task in tasks])
    return points, missed.sum()


def _points(result: tuple[np.ndarray, int]) -> np.ndarray:
    return result[0]


def _missed(result: tuple[np.ndarray, int]) -> np.ndarray:
    return np.array([result[1]], dtype=np.int64)


def unconverged_message(missed: int, total: int, max_iter: int) -> str | None:
    """Say, once for a whole computation, how many fixed-point pre-images did not converge.

    ``None`` when all converged.

    Examples
    --------
    >>> unconverged_message(0, 100, 300) is None
    True
    >>> unconverged_message(3, 100, 300)
    '3 of 100 pre-images did not converge in 300 iterations (they keep their last iterate)'
    """
    if not missed:
        return None
    return (f"{missed} of {total} pre-images did not converge in {max_iter} iterations "
            f"(they keep their last iterate)")


class LearnedPreimage:
    """Kernel ridge regression from scores to input points (any kernel).

    Fitted on training scores ``T`` and points ``X``: ``dual = (k(T, T) + α I)⁻¹ X``; a pre-image
    is ``k(β, T) dual``, evaluated blockwise over dask chunks. With the model's own kernel this
    is scikit-learn's ``KernelPCA.inverse_transform``.

    Examples
    --------
    >>> from dkpca.kernels import RBF
    >>> T = np.linspace(0, 1, 20)[:, None]
    >>> learned = LearnedPreimage(RBF(gamma=10.0), alpha=1e-6).fit(T, np.sin(T))
    >>> float(np.abs(learned.predict(T) - np.sin(T)).max()) < 1e-3
    True
    """

    def __init__(self, kernel: Kernel, alpha: float = 1.0) -> None:
        self.kernel = kernel
        self.alpha = alpha

    def fit(self, scores: np.ndarray, X: np.ndarray) -> LearnedPreimage:
        """Solve the ridge system on ``scores`` (``r × k``) → ``X`` (``r × d``)."""
        T = np.asarray(scores, dtype=np.float64)
        K = self.kernel.pairwise(T).astype(np.float64)
        K.flat[:: T.shape[0] + 1] += self.alpha
        self.dual_coef_ = scipy.linalg.solve(K, np.asarray(X, dtype=np.float64),
                                             assume_a="pos", overwrite_a=True)
        self.scores_ = T
        return self

    def predict(self, scores: np.ndarray | da.Array) -> np.ndarray | da.Array:
        """Pre-images of ``scores``: lazy for dask input, numpy otherwise."""
        if isinstance(scores, da.Array):
            return kernel_product(self.kernel, scores.rechunk({1: -1}), self.scores_,
                                  self.dual_coef_)
        return self.kernel.pairwise(np.asarray(scores, dtype=np.float64), self.scores_) \
            @ self.dual_coef_


def learned_training_set(
    basis: Any, training_scores: np.ndarray | da.Array | None, rng: np.random.Generator, *,
    training_basis: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Points (and their scores) the learned pre-image regresses on.

    ``training_basis`` says whether the basis points *are* the training rows, in order (exact,
    randomized and sketch solvers): then they are uniformly subsampled to
    :data:`MAX_LEARNED_SAMPLES` (an ``r × r`` solve) and paired with their scores from the fit
    (``training_scores``), so no kernel block is evaluated again. Otherwise (landmarks,
    k-means centroids, ICF pivots: points of their own, in their own order, however many
    there are) the basis points are projected.

    Examples
    --------
    >>> from dkpca import KernelPCA
    >>> from dkpca.options import Nystrom
    >>> X = np.random.default_rng(0).normal(size=(40, 2))
    >>> kp = KernelPCA(2, solver=Nystrom(landmarks=X[::-1])).fit(X)
    >>> points, scores = learned_training_set(kp.basis_, None, np.random.default_rng(0),
    ...                                       training_basis=False)
    >>> bool(np.allclose(points, X[::-1])), bool(np.allclose(scores, kp.transform(X[::-1])))
    (True, True)
    """
    B = basis.basis
    if not training_basis:
        (points,) = compute(B) if isinstance(B, da.Array) else (B,)
        points = _dense(points)
        (scores,) = compute(basis.transform(da.from_array(points, chunks=(len(points), -1))))
    else:
        if training_scores is None or len(training_scores) != B.shape[0]:
            raise ValueError(  # an internal inconsistency, not the user's
                "the learned pre-image pairs the training rows with their scores; got "
                f"{B.shape[0]} rows and "
                f"{'no' if training_scores is None else len(training_scores)} scores")
        rows = slice(None)
        if B.shape[0] > MAX_LEARNED_SAMPLES:
            rows = np.sort(rng.choice(B.shape[0], MAX_LEARNED_SAMPLES, replace=False))
        points, scores = B[rows], training_scores[rows]
        points, scores = compute(points, scores)  # a no-op for numpy
    return np.asarray(_dense(points), dtype=np.float64), np.asarray(scores, dtype=np.float64)


def _dense(points: Any) -> np.ndarray:
    # The learned pre-image's points: at most MAX_LEARNED_SAMPLES rows, so dense is fine.
    return points.toarray() if scipy.sparse.issparse(points) else points


class PreimageMixin:
    """``inverse_transform`` and ``denoise`` for an estimator with a fitted ``basis_``.

    The estimator provides the parameters ``preimage`` (a name, or
    :class:`~dkpca.options.FixedPoint` with its stopping rule), ``fit_inverse_transform`` and
    ``alpha``, the fitted ``solver_`` (whether the basis is the training data, see
    :data:`TRAINING_BASIS_SOLVERS`), and, when ``fit_inverse_transform`` was set, the fitted
    ``dual_coef_`` and ``X_transformed_fit_`` (scikit-learn's names).

    References
    ----------
    S. Mika, B. Schölkopf, A. Smola, K.-R. Müller, M. Scholz and G. Rätsch, "Kernel PCA and
    de-noising in feature spaces", Advances in Neural Information Processing Systems 11, 1999.

    G. H. Bakır, J. Weston and B. Schölkopf, "Learning to find pre-images", Advances in
    Neural Information Processing Systems 16, 2004.
    """

    def _fit_preimage(self, rng: np.random.Generator) -> None:
        """Learn the kernel ridge pre-image at the end of ``fit``."""
        if not self.fit_inverse_transform:
            return
        # Decided by the solver, not by the basis's size: landmarks (even n of them) are points
        # of their own, projected; after partial_fit no training rows are kept, and a landmark
        # basis needs none.
        training_basis = self.solver_ in TRAINING_BASIS_SOLVERS
        vectors = getattr(self, "eigenvectors_", None) if training_basis else None
        training_scores = None if vectors is None else vectors * np.sqrt(self.eigenvalues_)
        points, scores = learned_training_set(self.basis_, training_scores, rng,
                                              training_basis=training_basis)
        learned = LearnedPreimage(self.kernel_, self.alpha).fit(scores, points)
        self.dual_coef_, self.X_transformed_fit_ = learned.dual_coef_, learned.scores_

    def _preimage_method(self) -> str:
        from dkpca._validation import check_is_fitted

        check_is_fitted(self, "basis_")
        owner = type(self).__name__
        if self.kernel_.name == "precomputed":
            raise ValueError(f"{owner}: pre-images need an input space, which a model fitted on "
                             f"a precomputed kernel does not have.")
        dense = not is_sparse(self.basis_.basis)
        method = solver_name(self.preimage)
        if method == "auto":  # what the user fitted, else the iteration where it applies
            fixed_point = isinstance(self.kernel_, RBF) and dense and not self.fit_inverse_transform
            method = "fixed_point" if fixed_point else "learned"
        if method == "learned" and not hasattr(self, "dual_coef_"):
            # NotFittedError is a ValueError: what is missing is a fitted part of the model.
            raise NotFittedError(
                f"{owner}: the learned pre-image needs fit_inverse_transform=True"
                + ("" if isinstance(self.kernel_, RBF) and dense else
                   f" (the fixed-point pre-image is for RBF kernels on dense data, not "
                   f"{self.kernel_!r}{'' if dense else ' on sparse data'})")
            )
        if method == "fixed_point" and not dense:
            raise ValueError(f"{owner}: the fixed-point pre-image needs dense training data; "
                             f"fit with fit_inverse_transform=True for learned pre-images.")
        if method == "fixed_point":
            _rbf(self.kernel_)
            self.basis_.mean_weights()  # fails early for a model saved without them
        return method

    def _preimages(
        self, scores: da.Array, start: da.Array | None, dtype: np.dtype
    ) -> tuple[da.Array, da.Array | None]:
        """Lazy pre-images, and the lazy count of those that did not converge (fixed point)."""
        if self._preimage_method() == "learned":
            learned = LearnedPreimage(self.kernel_, self.alpha)
            learned.dual_coef_, learned.scores_ = self.dual_coef_, self.X_transformed_fit_
            return learned.predict(scores).astype(dtype, copy=False), None
        basis = self.basis_.in_memory()
        rule = preimage_options(self.preimage)
        return fixed_point_blocks(basis, scores, start, tol=rule.tol, max_iter=rule.max_iter,
                                  dtype=dtype)

    def _like_input(self, preimages: da.Array, missed: da.Array | None, original: Any) -> Any:
        """Compute the pre-images for in-memory input, reporting non-convergence once.

        Lazy pre-images leave the count to whoever computes them: :meth:`_denoise_counted`.
        """
        from dkpca._estimator import like_input
        from dkpca.io import is_lazy

        if is_lazy(original) or missed is None:
            return like_input(preimages, original)
        points, n_missed = compute(preimages, missed)
        message = unconverged_message(int(n_missed), points.shape[0],
                                      preimage_options(self.preimage).max_iter)
        if message:
            logger.warning("%s: %s", type(self).__name__, message)
        return points

    def _denoise_counted(self, X: Any) -> tuple[da.Array, da.Array | None]:
        """Return the lazy :meth:`denoise` of ``X``, and its lazy count of unconverged points.

        The count (``None`` for learned pre-images) is computed with the pre-images, and
        reported once by whoever computes them.
        """
        from dkpca._estimator import check_features
        from dkpca.io import as_dask

        self._preimage_method()
        Xd = as_dask(X, accept_sparse=True)
        check_features(Xd, self.n_features_in_, type(self).__name__)
        return self._preimages(self.basis_.transform(Xd), Xd, Xd.dtype)

    def inverse_transform(self, Z: Any) -> np.ndarray | da.Array:
        """Map scores back to the input space (pre-images).

        ``preimage="fixed_point"`` (the default for RBF kernels) starts each point at the linear
        pre-image ``Σ γ_i b_i / Σ γ_i``; ``"learned"`` uses the kernel ridge regression fitted
        with ``fit_inverse_transform=True`` (any kernel). Dask input gives lazy output.

        Parameters
        ----------
        Z : (n_samples, n_components) array-like or dask array

        Returns
        -------
        X : (n_samples, n_features_in) array
        """
        from dkpca.io import as_dask

        method = self._preimage_method()
        Zd = as_dask(Z, name="Z")
        if Zd.shape[1] != self.n_components_:
            raise ValueError(f"Z has {Zd.shape[1]} columns, but {type(self).__name__} has "
                             f"{self.n_components_} components.")
        logger.info("%s: %s pre-images of %d points", type(self).__name__, method, Zd.shape[0])
        return self._like_input(*self._preimages(Zd, None, Zd.dtype), Z)

    def denoise(self, X: Any) -> np.ndarray | da.Array:
        """Project ``X`` on the components and map it back: ``inverse_transform(transform(X))``.

        The fixed-point iteration starts at each point itself (Mika et al.), which finds the
        pre-image nearest the noisy point. Dask input gives lazy output.

        Parameters
        ----------
        X : (n_samples, n_features_in) array-like, dask array, DataArray or Zarr path

        Returns
        -------
        X_denoised : (n_samples, n_features_in) array

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca import KernelPCA
        >>> from dkpca.datasets import make_semicircles
        >>> X, clean, _ = make_semicircles(300, random_state=0)
        >>> kp = KernelPCA(8, kernel="rbf", sigma2=2.0).fit(X)
        >>> before, after = ((X - clean) ** 2).mean(), ((kp.denoise(X) - clean) ** 2).mean()
        >>> bool(after < before)
        True
        """
        return self._like_input(*self._denoise_counted(X), X)
