"""Pre-images: points of the input space whose feature-space image matches a projection.

A fitted :class:`~dkpca.solvers.KernelBasis` reconstructs a point's feature-space image from its
scores ``β`` as ``P φ(x) = Σ_i γ_i φ(b_i)`` over the basis points ``b_i``, with
``γ = coef β + c_μ`` (``c_μ``, the mean's coefficients, carries the centring). Two ways back:

- :func:`fixed_point_preimage` (RBF kernels; Mika et al. 1999, the MDD paper's §II): minimise
  ``||φ(z) - P φ(x)||²`` by iterating ``z ← Σ γ_i k(z, b_i) b_i / Σ γ_i k(z, b_i)`` from a start
  (the noisy point itself when denoising), vectorised over a block of points, blockwise over
  dask chunks. A vanishing denominator restarts the point once from the linear pre-image
  ``Σ γ_i b_i / Σ γ_i`` (from the basis point of largest ``γ_i`` when the iteration started at
  the linear pre-image); points still failing, or not converged after ``max_iter``, are kept at
  their last iterate, and counted once for the whole computation: a warning when the result is
  computed here (in-memory input), the summary line of ``dkpca denoise``; lazy results leave
  the count to ``_denoise_counted``.
- :class:`LearnedPreimage` (any kernel; Bakır et al. 2004, scikit-learn's
  ``fit_inverse_transform``): kernel ridge regression from training scores to training points,
  ``x(β) = k(β, T) (K_T + α I)⁻¹ X``, evaluated blockwise.

:class:`PreimageMixin` gives ``KernelPCA`` its ``inverse_transform`` and ``denoise``. The
fixed-point iteration lives in :mod:`dkpca._fixed_point`; its public names are re-exported here.
"""

from __future__ import annotations

import logging
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse
from sklearn.exceptions import NotFittedError

from dkpca._fixed_point import (
    PreimageResult,
    _rbf,
    fixed_point_blocks,
    fixed_point_preimage,
    unconverged_message,
)
from dkpca._validation import Interval, validate_params
from dkpca.blocked import compute, kernel_product
from dkpca.io import is_sparse
from dkpca.kernels import RBF, Kernel
from dkpca.options import preimage_options, solver_name

__all__ = ["LearnedPreimage", "PreimageResult", "fixed_point_preimage"]

logger = logging.getLogger(__name__)

#: Training points the learned pre-image regresses on at most (an ``r × r`` solve).
MAX_LEARNED_SAMPLES = 5000

#: Solvers whose basis is the training data itself, row for row (the others keep landmarks).
TRAINING_BASIS_SOLVERS = ("exact", "randomized", "sketch")

#: Of those, the solvers whose ``eigenvectors_ * sqrt(eigenvalues_)`` are not the scores
#: ``transform`` gives the training rows: the sketch's eigenvectors are those of the sketched
#: kernel (14 % of the largest score apart with ``Sketch(dim=20)``), so the learned pre-image
#: would be trained on scores it is never asked to invert; its rows are projected instead.
PROJECTED_SOLVERS = ("sketch",)


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
        """Solve the ridge system on ``scores`` (``r × k``) → ``X`` (``r × d``).

        Raises
        ------
        ValueError
            ``alpha`` is not a real number above 0 (as ``KernelPCA``'s ``alpha``).
        numpy.linalg.LinAlgError
            ``k(T, T) + α I`` is singular or not positive definite: a kernel that is not
            positive semi-definite (sigmoid) or ``alpha`` too small for rounding. The message
            says which, and how large ``alpha`` must be.
        """
        validate_params({"alpha": self.alpha},
                        {"alpha": [Interval("real", 0, None, closed="neither")]},
                        "LearnedPreimage")
        T = np.asarray(scores, dtype=np.float64)
        K = self.kernel.pairwise(T).astype(np.float64)
        K.flat[:: T.shape[0] + 1] += self.alpha
        try:
            dual_coef = scipy.linalg.solve(K, np.asarray(X, dtype=np.float64),
                                           assume_a="pos", overwrite_a=True)
        except np.linalg.LinAlgError as error:
            raise np.linalg.LinAlgError(self._singular_message(T, error)) from error
        self.dual_coef_ = dual_coef
        self.scores_ = T
        return self

    def _singular_message(self, T: np.ndarray, error: Exception) -> str:
        """Say why ``k(T, T) + α I`` could not be solved, and which ``alpha`` would do."""
        # Only on failure: one more r × r eigenproblem (its lowest eigenvalue) is affordable.
        K = self.kernel.pairwise(T).astype(np.float64)
        lowest = float(scipy.linalg.eigh(K, eigvals_only=True, subset_by_index=[0, 0])[0])
        # An eigenvalue this close to 0 is rounding, not indefiniteness: eigh's backward
        # error is about n eps ||K|| (a PSD kernel with repeated rows gives -1e-15).
        rounding = len(T) * np.finfo(np.float64).eps * float(np.abs(K).max(initial=0.0))
        if lowest + self.alpha <= 0 and lowest < -rounding:
            cause = (f"the kernel {self.kernel!r} is not positive semi-definite on the "
                     f"training scores (lowest eigenvalue {lowest:.3g}); raise alpha above "
                     f"{-lowest:.3g}, or use a positive semi-definite kernel")
        else:
            cause = (f"alpha={self.alpha!r} is too small against rounding in k(T, T) "
                     f"(lowest eigenvalue {lowest:.3g}, within rounding of 0: "
                     f"{rounding:.3g}); raise alpha well above {max(rounding, -lowest):.3g}")
        return (f"the learned pre-image's ridge system k(T, T) + alpha*I ({len(T)} x {len(T)}) "
                f"is singular or not positive definite with alpha={self.alpha!r}: {cause} "
                f"(scipy: {error})")

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
    (``training_scores``), so no kernel block is evaluated again, or, when
    ``training_scores`` is ``None`` (:data:`PROJECTED_SOLVERS`), projected. Otherwise
    (landmarks, k-means centroids, ICF pivots: points of their own, in their own order,
    however many there are) the basis points are projected.

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
        if training_scores is not None and len(training_scores) != B.shape[0]:
            raise ValueError(  # an internal inconsistency, not the user's
                "the learned pre-image pairs the training rows with their scores; got "
                f"{B.shape[0]} rows and {len(training_scores)} scores")
        rows = slice(None)
        if B.shape[0] > MAX_LEARNED_SAMPLES:
            rows = np.sort(rng.choice(B.shape[0], MAX_LEARNED_SAMPLES, replace=False))
        if training_scores is None:  # the rows' scores as transform gives them
            (points,) = compute(B[rows])
            points = _dense(points)
            (scores,) = compute(basis.transform(da.from_array(points, chunks=(len(points), -1))))
        else:
            points, scores = compute(B[rows], training_scores[rows])  # a no-op for numpy
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
        paired = training_basis and self.solver_ not in PROJECTED_SOLVERS
        vectors = getattr(self, "eigenvectors_", None) if paired else None
        training_scores = None if vectors is None else vectors * np.sqrt(self.eigenvalues_)
        points, scores = learned_training_set(self.basis_, training_scores, rng,
                                              training_basis=training_basis)
        try:
            learned = LearnedPreimage(self.kernel_, self.alpha).fit(scores, points)
        except np.linalg.LinAlgError as error:
            raise np.linalg.LinAlgError(f"{type(self).__name__}: {error}") from error
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
