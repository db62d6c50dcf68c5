"""The estimators: :class:`KernelPCA` and linear :class:`PCA`, with scikit-learn's API."""

from __future__ import annotations

import logging
from typing import Any

import dask
import dask.array as da
import numpy as np
import psutil
from dask.utils import parse_bytes
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from ._typing import ArrayLike, RandomStateLike
from ._validation import (
    InstanceOf,
    Interval,
    Options,
    check_is_fitted,
    check_n_components,
    check_random_state,
    validate_params,
)
from .blocked import center_kernel_inplace, compute, tree_sum
from .io import as_array, as_dask, is_lazy
from .kernels import Kernel, get_kernel
from .linalg import flip_signs, top_eigh
from .solvers import (
    SAMPLINGS,
    ComponentRule,
    KernelBasis,
    Sketch,
    fit_exact,
    fit_nystrom,
    fit_pca_sketch,
    fit_randomized,
    fit_sketch,
    select_landmarks,
)

__all__ = ["PCA", "KernelPCA"]

logger = logging.getLogger(__name__)

#: Below this many samples ``solver="auto"`` always decomposes the kernel exactly.
EXACT_MAX_SAMPLES = 2000


def _bytes(value: int | str, name: str, owner: str) -> int:
    try:
        size = parse_bytes(value) if isinstance(value, str) else int(value)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{owner}: {name}={value!r} is not a size (e.g. '128MiB')") from err
    if size <= 0:
        raise ValueError(f"{owner}: {name} must be positive, got {value!r}")
    return size


def _check_samples(X: da.Array, owner: str) -> None:
    if X.shape[0] < 2:
        raise ValueError(
            f"{owner} needs at least 2 samples, got {X.shape[0]} (X has shape {X.shape})."
        )


def _check_features(X: da.Array, n_features: int, owner: str) -> None:
    if X.shape[1] != n_features:
        raise ValueError(
            f"X has {X.shape[1]} features, but {owner} was fitted with {n_features} features."
        )


def _like_input(result: da.Array, original: Any) -> np.ndarray | da.Array:
    """Lazy output for lazy input (dask, Zarr); computed numpy output otherwise."""
    if is_lazy(original):
        return result
    (value,) = compute(result)
    return value


_SIZE = [Interval("int", 1, None), InstanceOf(str, "a size string such as '128MiB'")]
_N_COMPONENTS = [Interval("int", 1, None), Interval("real", 0, 1, closed="neither"), None]


class KernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel principal component analysis on dask, for data larger than memory.

    The kernel matrix is evaluated in tiles across the active dask scheduler (a
    ``distributed.Client`` when one exists, else local threads) and is never held whole unless
    it fits in ``max_memory``.

    Parameters
    ----------
    n_components : int, float or None, default=None
        An int keeps that many components; a float in (0, 1) keeps the fewest components that
        explain that fraction of the variance; ``None`` keeps every component with a positive
        eigenvalue (exact solver only).
    kernel : {"rbf", "poly", "sigmoid", "linear"} or Kernel, default="rbf"
        A name, or a :mod:`dkpca.kernels` object (which may be a sum, ``RBF() + Linear()``).
    gamma : float, optional
        Kernel coefficient of rbf, poly and sigmoid; ``None`` means ``1 / n_features``.
    sigma2 : float, optional
        RBF width in ``exp(-||x - y||² / (2 sigma2))``; an alternative to ``gamma``.
    degree : int, default=3
        Degree of the polynomial kernel.
    coef0 : float, default=1
        Independent term of the poly and sigmoid kernels.
    solver : {"auto", "exact", "randomized", "sketch", "nystrom"}, default="auto"
        ``"exact"`` gathers the kernel and calls LAPACK; ``"randomized"`` runs a block Krylov
        iteration on the kernel operator (cached in memory when it fits, re-evaluated tile by
        tile when it does not); ``"sketch"`` is approx-KPCA (tutorial Alg. 6): one pass
        sketches the centred kernel map to ``sketch_dim`` dimensions, then a
        ``sketch_dim × sketch_dim`` eigenproblem; ``"nystrom"`` approximates the kernel
        through ``n_landmarks`` landmarks and runs a one-pass PCA of their feature map
        (out of core: only ``m × m`` objects are gathered). ``"auto"`` takes ``"exact"`` for at most
        2,000 samples, when ``n_components`` is ``None`` or above a fifth of the samples, and
        ``"randomized"`` otherwise.
    min_relative_eigenvalue : float, optional
        Drop components whose eigenvalue is below this fraction of the first.
    n_oversamples : int, default=10
        Randomized solver: extra columns in the Krylov block.
    tol : float, default=1e-6
        Randomized solver: stop when every eigenpair's residual ``||K_c u - λ u||`` is below
        ``tol · λ_1``.
    max_iter : int, default=20
        Randomized solver: maximum passes over the kernel.
    block_size : int or str, default="128MiB"
        Memory for one kernel tile.
    max_memory : int, str or "auto", default="auto"
        Memory the whole kernel matrix may take (exact solver, and the randomized solver's
        cache); ``"auto"`` is half of the memory available when ``fit`` starts.
    sketch : {"gaussian", "hashing"}, default="gaussian"
        Sketch solver: Gaussian random projection (eq. 36) or signed feature hashing
        (eqs. 40, 46).
    sketch_dim : int, optional
        Sketch solver: the sketch's dimension ``q``; by default ``max(200, 10 k)`` for ``k``
        components (20 when ``n_components`` is a fraction), at most ``n_samples``.
    n_hashes : int, default=1
        Hashing sketch: hash functions concatenated (``sketch_dim`` must be a multiple).
    refine : bool, default=False
        Sketch solver: one more pass for the exact Rayleigh–Ritz projection on the sketched
        subspace (exact eigenvalues there; no mixing of close eigenvectors).
    n_landmarks : int, optional
        Nyström solver: the number of landmarks ``m``; by default ``min(n_samples, 1000)``.
    sampling : {"uniform", "diagonal", "column_norm", "kmeans"}, default="uniform"
        Nyström solver: how landmarks are chosen: uniformly, with probability ``∝ k(x, x)²``
        (eq. 64), ``∝ Σ_j k(x, x_j)²`` (eq. 65; one pass over the kernel), or as k-means
        centroids of a subsample.
    nystrom_method : {"feature_map", "extension"}, default="feature_map"
        Nyström solver: PCA of the feature map ``K(x, L) K_LL^{-1/2}`` centred on all the
        training points (one pass; exact for the approximated kernel), or the tutorial's
        eigen-extension of the landmarks' eigenpairs (eqs. 62–63; no pass).
    random_state : int, numpy Generator, RandomState or None, default=None
        Seed of the randomized solver's start block, of the sketch and of landmark sampling.

    Attributes
    ----------
    eigenvalues_ : ndarray (n_components_,)
        Eigenvalues of the centred training kernel matrix, descending.
    explained_variance_ : ndarray (n_components_,)
        ``eigenvalues_ / n_samples``: variance along each component in feature space.
    explained_variance_ratio_ : ndarray (n_components_,)
        Fraction of the total feature-space variance (trace of the centred kernel).
    eigenvectors_ : ndarray (n_samples, n_components_)
        Unit eigenvectors of the centred training kernel matrix (of its approximation for
        the sketch and Nyström solvers). Nyström on lazy input keeps them lazy: a dask array.
    landmarks_ : ndarray (n_landmarks, n_features)
        Nyström solver: the landmarks.
    n_components_ : int
    kernel_ : Kernel
        The kernel with data-dependent defaults resolved.
    gamma_ : float or None
        The resolved ``gamma`` (``None`` for kernels without one).
    solver_ : str
        The solver used.
    n_iter_ : int
        Passes over the kernel (1 for the exact solver).
    basis_ : KernelBasis
        The fitted state used by ``transform``.
    n_features_in_ : int

    See Also
    --------
    PCA : linear PCA on dask.
    sklearn.decomposition.KernelPCA : in-memory kernel PCA.

    Notes
    -----
    Exact: time ``O(n² d + n³)``, memory one ``n × n`` matrix. Randomized with a cached kernel:
    ``O(n² d)`` once plus ``O(n² b)`` per pass (``b = n_components + n_oversamples``);
    streaming: each pass re-evaluates the kernel, memory one tile per thread plus the Krylov
    basis, ``n × b × passes``. Kernel tiles are evaluated only on and above the diagonal.

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca import KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(100, 3))
    >>> kp = KernelPCA(n_components=2, kernel="rbf", gamma=0.5).fit(X)
    >>> kp.transform(X[:3]).shape
    (3, 2)
    """

    _parameter_constraints: dict = {
        "n_components": _N_COMPONENTS,
        "kernel": [Options({"rbf", "gaussian", "poly", "polynomial", "sigmoid", "linear"}),
                   InstanceOf(Kernel, "a dkpca.kernels.Kernel")],
        "gamma": [Interval("real", 0, None, closed="neither"), None],
        "sigma2": [Interval("real", 0, None, closed="neither"), None],
        "degree": [Interval("int", 1, None)],
        "coef0": [Interval("real", None, None)],
        "solver": [Options({"auto", "exact", "randomized", "sketch", "nystrom"})],
        "n_landmarks": [Interval("int", 1, None), None],
        "sampling": [Options(set(SAMPLINGS))],
        "nystrom_method": [Options({"feature_map", "extension"})],
        "min_relative_eigenvalue": [Interval("real", 0, 1, closed="neither"), None],
        "sketch": [Options({"gaussian", "hashing"})],
        "sketch_dim": [Interval("int", 1, None), None],
        "n_hashes": [Interval("int", 1, None)],
        "refine": [InstanceOf(bool, "a bool")],
        "n_oversamples": [Interval("int", 0, None)],
        "tol": [Interval("real", 0, None, closed="neither")],
        "max_iter": [Interval("int", 1, None)],
        "block_size": _SIZE,
        "max_memory": [*_SIZE, Options({"auto"})],
        "random_state": [Interval("int", 0, None), InstanceOf(
            (np.random.Generator, np.random.RandomState), "a numpy Generator or RandomState"
        ), None],
    }

    def __init__(
        self,
        n_components: float | None = None,
        *,
        kernel: str | Kernel = "rbf",
        gamma: float | None = None,
        sigma2: float | None = None,
        degree: int = 3,
        coef0: float = 1.0,
        solver: str = "auto",
        min_relative_eigenvalue: float | None = None,
        n_oversamples: int = 10,
        tol: float = 1e-6,
        max_iter: int = 20,
        block_size: int | str = "128MiB",
        max_memory: int | str = "auto",
        sketch: str = "gaussian",
        sketch_dim: int | None = None,
        n_hashes: int = 1,
        refine: bool = False,
        n_landmarks: int | None = None,
        sampling: str = "uniform",
        nystrom_method: str = "feature_map",
        random_state: RandomStateLike = None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.sigma2 = sigma2
        self.degree = degree
        self.coef0 = coef0
        self.solver = solver
        self.min_relative_eigenvalue = min_relative_eigenvalue
        self.n_oversamples = n_oversamples
        self.tol = tol
        self.max_iter = max_iter
        self.block_size = block_size
        self.max_memory = max_memory
        self.sketch = sketch
        self.sketch_dim = sketch_dim
        self.n_hashes = n_hashes
        self.refine = refine
        self.n_landmarks = n_landmarks
        self.sampling = sampling
        self.nystrom_method = nystrom_method
        self.random_state = random_state

    def _fit_nystrom(
        self, kernel: Kernel, X: da.Array, rule: ComponentRule, block_bytes: int
    ) -> KernelBasis:
        n = X.shape[0]
        m = self.n_landmarks if self.n_landmarks is not None else min(n, 1000)
        if m > n:
            raise ValueError(f"KernelPCA: n_landmarks={m} exceeds the {n} samples.")
        if rule.count is not None and rule.count > m:
            raise ValueError(
                f"KernelPCA: n_components={rule.count} exceeds n_landmarks={m}; Nyström "
                f"yields at most n_landmarks components."
            )
        rng = np.random.default_rng(check_random_state(self.random_state))
        landmarks = select_landmarks(kernel, X, m, self.sampling, rng=rng,
                                     block_bytes=block_bytes)
        return fit_nystrom(kernel, X, landmarks, rule, block_bytes=block_bytes,
                           method=self.nystrom_method)

    def _sketch(self, n: int, rule: ComponentRule) -> Sketch:
        wanted = rule.count if rule.count is not None else 20
        q = self.sketch_dim if self.sketch_dim is not None else min(n, max(200, 10 * wanted))
        if rule.count is not None and rule.count > q:
            raise ValueError(
                f"KernelPCA: n_components={rule.count} exceeds sketch_dim={q}; the sketch "
                f"yields at most sketch_dim components."
            )
        return Sketch(self.sketch, q, check_random_state(self.random_state), self.n_hashes)

    def _resolve_kernel(self, n_features: int) -> Kernel:
        if self.gamma is not None and self.sigma2 is not None:
            raise ValueError("KernelPCA: give gamma or sigma2, not both.")
        if self.sigma2 is not None and self.kernel not in ("rbf", "gaussian"):
            raise ValueError(
                f"KernelPCA: sigma2 applies to the rbf kernel only, not kernel={self.kernel!r}."
            )
        kernel = get_kernel(
            self.kernel, gamma=self.gamma, sigma2=self.sigma2, degree=self.degree,
            coef0=self.coef0,
        )
        return kernel.with_defaults(n_features)

    def _resolve_solver(self, n: int, rule: ComponentRule, kernel_fits: bool) -> str:
        if self.solver != "auto":
            if self.solver == "exact" and not kernel_fits:
                raise ValueError(
                    f"KernelPCA: solver='exact' needs the {n} x {n} kernel in memory, which "
                    f"exceeds max_memory={self.max_memory!r}; use solver='randomized'."
                )
            if self.solver == "randomized" and self.n_components is None:
                raise ValueError(
                    "KernelPCA: solver='randomized' needs n_components (an int or a variance "
                    "fraction); n_components=None asks for every component."
                )
            return self.solver
        if self.n_components is None:
            if not kernel_fits:
                raise ValueError(
                    f"KernelPCA: n_components=None asks for all components, which needs the "
                    f"{n} x {n} kernel in memory (above max_memory={self.max_memory!r}); "
                    f"set n_components."
                )
            return "exact"
        small = n <= EXACT_MAX_SAMPLES or (rule.count is not None and rule.count > n // 5)
        return "exact" if small and kernel_fits else "randomized"

    def fit(self, X: ArrayLike, y: Any = None) -> KernelPCA:
        """Fit the model on ``X`` (``n_samples × n_features``).

        Parameters
        ----------
        X : array-like, dask array, xarray.DataArray, or a Zarr path or URL
        y : ignored

        Returns
        -------
        self : KernelPCA
        """
        validate_params(self.get_params(), self._parameter_constraints, "KernelPCA")
        data = as_array(X)  # in-memory input stays the caller's array (no copy if dtype fits)
        Xd = as_dask(data, check_finite=False)
        _check_samples(Xd, "KernelPCA")
        n, d = Xd.shape
        check_n_components(self.n_components, n, "KernelPCA")
        rule = ComponentRule.from_params(self.n_components, self.min_relative_eigenvalue)
        kernel = self._resolve_kernel(d)
        block_bytes = _bytes(self.block_size, "block_size", "KernelPCA")
        max_memory = (
            int(psutil.virtual_memory().available // 2)
            if self.max_memory == "auto"
            else _bytes(self.max_memory, "max_memory", "KernelPCA")
        )
        kernel_fits = n * n * Xd.dtype.itemsize <= max_memory
        solver = self._resolve_solver(n, rule, kernel_fits)
        basis_data = data
        logger.info("KernelPCA: %s solver on %d x %d, kernel %r", solver, n, d, kernel)
        if solver == "exact":
            basis, vectors = fit_exact(
                kernel, Xd, rule, block_bytes=block_bytes, basis_data=basis_data
            )
            self.n_iter_ = 1
        elif solver == "sketch":
            basis, vectors = fit_sketch(
                kernel, Xd, rule, sketch=self._sketch(n, rule), block_bytes=block_bytes,
                refine=self.refine, basis_data=basis_data,
            )
            self.n_iter_ = 2 if self.refine else 1
        elif solver == "nystrom":
            basis = self._fit_nystrom(kernel, Xd, rule, block_bytes)
            vectors = basis.transform(Xd) / np.sqrt(basis.eigenvalues)  # lazy: n x k
            if not is_lazy(X):
                (vectors,) = compute(vectors)
            self.landmarks_ = basis.basis
            self.n_iter_ = 1
        else:
            basis, vectors, result = fit_randomized(
                kernel, Xd, rule,
                seed=check_random_state(self.random_state),
                block_bytes=block_bytes,
                max_memory=max_memory,
                n_oversamples=self.n_oversamples,
                tol=self.tol,
                max_iter=self.max_iter,
                basis_data=basis_data,
            )
            self.n_iter_ = result.n_passes
        self.basis_ = basis
        self.kernel_ = kernel
        self.gamma_ = getattr(kernel, "gamma", None)
        self.solver_ = solver
        self.eigenvalues_ = basis.eigenvalues
        self.eigenvectors_ = vectors
        self.explained_variance_ = basis.eigenvalues / n
        self.explained_variance_ratio_ = basis.eigenvalues / basis.total_variance
        self.n_components_ = basis.n_components
        self.n_features_in_ = d
        self._n_features_out = basis.n_components
        return self

    def transform(self, X: ArrayLike) -> np.ndarray | da.Array:
        """Project ``X`` on the components.

        Dask (or dask-backed xarray) input gives a lazy dask array chunked like ``X``'s rows;
        anything else is computed and returned as numpy.

        Returns
        -------
        scores : (n_samples, n_components_) array
        """
        check_is_fitted(self, "basis_")
        Xd = as_dask(X)
        _check_features(Xd, self.n_features_in_, "KernelPCA")
        return _like_input(self.basis_.transform(Xd), X)

    def fit_transform(self, X: ArrayLike, y: Any = None) -> np.ndarray | da.Array:
        """Fit and return the training scores ``eigenvectors_ * sqrt(eigenvalues_)``.

        No second pass over the data: the training scores follow from the eigenvectors.
        """
        self.fit(X)
        scores = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        if isinstance(scores, da.Array):  # Nyström on lazy input: already lazy
            return scores
        if is_lazy(X):
            return da.from_array(scores, chunks=(as_dask(X).chunks[0], -1))
        return scores


class PCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Linear principal component analysis on dask, for tall or wide data.

    Parameters
    ----------
    n_components : int, float or None, default=None
        An int keeps that many components, a float in (0, 1) the fewest explaining that
        fraction of the variance, ``None`` all ``min(n_samples, n_features)``.
    solver : {"auto", "covariance", "gram", "sketch"}, default="auto"
        ``"covariance"`` (the tutorial's Alg. 1): one pass accumulates the ``d × d`` covariance
        over row chunks. ``"gram"`` (Alg. 2, for ``n <= d``): one pass accumulates the
        ``n × n`` dot matrix over feature chunks, a second converts its eigenvectors
        (``w = X_cᵀ v / sqrt(λ)``, eq. 21). ``"auto"`` takes ``"covariance"`` when
        ``n > d``, else ``"gram"``. ``"sketch"`` (Alg. 4, for large ``n`` and ``d``) sketches
        every sample to ``sketch_dim`` dimensions, decomposes their ``q × q`` scatter and
        converts the eigenvectors back to the input space (eq. 21): two passes, memory
        ``O(q² + d k)``.
    min_relative_eigenvalue : float, optional
        Drop components whose variance is below this fraction of the first.
    block_size : int or str, default="128MiB"
        Memory for one feature chunk of the gram solver.
    sketch : {"gaussian", "hashing"}, default="gaussian"
        Sketch solver: Gaussian random projection or signed feature hashing.
    sketch_dim : int, optional
        Sketch solver: the sketch's dimension ``q``; by default ``max(200, 10 k)``, at most
        ``n_features``.
    n_hashes : int, default=1
        Hashing sketch: hash functions concatenated.
    refine : bool, default=False
        Sketch solver: a third pass makes the eigenvalues exact on the found subspace
        (Rayleigh–Ritz).
    random_state : int, numpy Generator, RandomState or None, default=None
        Seed of the sketch.

    Attributes
    ----------
    components_ : ndarray (n_components_, n_features)
    explained_variance_ : ndarray (n_components_,)
        Variance along each component, with ``n_samples - 1`` in the denominator as in
        scikit-learn.
    explained_variance_ratio_ : ndarray (n_components_,)
    singular_values_ : ndarray (n_components_,)
    mean_ : ndarray (n_features,)
    n_components_, n_samples_, n_features_in_ : int
    solver_ : str

    See Also
    --------
    KernelPCA, sklearn.decomposition.PCA

    Notes
    -----
    Covariance: time ``O(n d²)``, memory ``d²``. Gram: time ``O(n² d)``, memory ``n²``.
    Covariance accumulates around the first sample (a shift that keeps the one-pass formula
    accurate when the mean is large compared with the spread).

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca import PCA
    >>> X = np.random.default_rng(0).normal(size=(50, 4))
    >>> PCA(n_components=2).fit(X).components_.shape
    (2, 4)
    """

    _parameter_constraints: dict = {
        "n_components": _N_COMPONENTS,
        "solver": [Options({"auto", "covariance", "gram", "sketch"})],
        "min_relative_eigenvalue": [Interval("real", 0, 1, closed="neither"), None],
        "block_size": _SIZE,
        **{k: KernelPCA._parameter_constraints[k]
           for k in ("sketch", "sketch_dim", "n_hashes", "refine", "random_state")},
    }

    def __init__(
        self,
        n_components: float | None = None,
        *,
        solver: str = "auto",
        min_relative_eigenvalue: float | None = None,
        block_size: int | str = "128MiB",
        sketch: str = "gaussian",
        sketch_dim: int | None = None,
        n_hashes: int = 1,
        refine: bool = False,
        random_state: RandomStateLike = None,
    ):
        self.n_components = n_components
        self.solver = solver
        self.min_relative_eigenvalue = min_relative_eigenvalue
        self.block_size = block_size
        self.sketch = sketch
        self.sketch_dim = sketch_dim
        self.n_hashes = n_hashes
        self.refine = refine
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: Any = None) -> PCA:
        """Fit the model on ``X`` (``n_samples × n_features``).

        Returns
        -------
        self : PCA
        """
        validate_params(self.get_params(), self._parameter_constraints, "PCA")
        Xd = as_dask(X)
        _check_samples(Xd, "PCA")
        n, d = Xd.shape
        check_n_components(self.n_components, min(n, d), "PCA")
        rule = ComponentRule.from_params(self.n_components, self.min_relative_eigenvalue)
        solver = self.solver if self.solver != "auto" else ("covariance" if n > d else "gram")
        if solver == "sketch":
            wanted = rule.count if rule.count is not None else 20
            q = self.sketch_dim if self.sketch_dim is not None else min(d, max(200, 10 * wanted))
            if rule.count is not None and rule.count > q:
                raise ValueError(f"PCA: n_components={rule.count} exceeds sketch_dim={q}.")
            sketch = Sketch(self.sketch, q, check_random_state(self.random_state), self.n_hashes)
            mean, eigenvalues, vectors, total = fit_pca_sketch(
                Xd, rule, sketch=sketch, refine=self.refine
            )
        elif solver == "covariance":
            mean, eigenvalues, vectors, total = self._fit_covariance(Xd, rule)
        else:
            mean, eigenvalues, vectors, total = self._fit_gram(Xd, rule)
        variances = eigenvalues / (n - 1)
        m = rule.select(variances, total)
        self.mean_ = mean
        self.components_ = vectors[:, :m].T.copy()
        self.explained_variance_ = variances[:m]
        self.explained_variance_ratio_ = variances[:m] / total
        self.singular_values_ = np.sqrt(np.maximum(eigenvalues[:m], 0.0))
        self.n_components_ = m
        self.n_samples_ = n
        self.n_features_in_ = d
        self.solver_ = solver
        self._n_features_out = m
        return self

    def _fit_covariance(
        self, X: da.Array, rule: ComponentRule
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        n = X.shape[0]
        (shift,) = compute(X[0].astype(np.float64))  # the first sample, as a numpy array
        parts = [dask.delayed(_shifted_moments)(b, shift) for b in X.to_delayed().ravel()]
        (moments,) = compute(tree_sum(parts))
        _check_finite_statistics(moments)
        mean_shift, cross = moments[0] / n, moments[1:]
        cov = cross - n * np.outer(mean_shift, mean_shift)  # n × covariance, around the mean
        total = float(np.trace(cov)) / (n - 1)
        k = None if rule.needs_full_spectrum else rule.count
        eigenvalues, vectors = top_eigh(cov, k, overwrite=True)
        return shift + mean_shift, eigenvalues, vectors, total

    def _fit_gram(
        self, X: da.Array, rule: ComponentRule
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        n, d = X.shape
        width = max(1, _bytes(self.block_size, "block_size", "PCA") // (n * X.dtype.itemsize))
        columns = X.rechunk((-1, min(d, width)))
        parts = [dask.delayed(_dot_matrix)(b) for b in columns.to_delayed().ravel()]
        G, mean = compute(tree_sum(parts), columns.mean(axis=0, dtype=np.float64))
        _check_finite_statistics(G, mean)
        row_means = G.mean(axis=0)
        center_kernel_inplace(G, row_means, float(row_means.mean()))
        total = float(np.trace(G)) / (n - 1)
        k = None if rule.needs_full_spectrum else rule.count
        eigenvalues, dual = top_eigh(G, k, overwrite=True)
        eigenvalues = np.maximum(eigenvalues, 0.0)
        keep = eigenvalues > eigenvalues[0] * 1e-12
        eigenvalues, dual = eigenvalues[keep], dual[:, keep]
        # eq. (21): w = X_cᵀ v / sqrt(λ); the dual vectors sum to zero, so X_cᵀ v = Xᵀ v.
        dual = (dual - dual.mean(axis=0)) / np.sqrt(eigenvalues)
        (vectors,) = compute(columns.T.astype(np.float64) @ da.from_array(dual))
        return mean, eigenvalues, flip_signs(vectors), total

    def transform(self, X: ArrayLike) -> np.ndarray | da.Array:
        """Project ``X`` on the components: ``(X - mean_) @ components_.T``.

        Lazy for dask input, numpy otherwise.
        """
        check_is_fitted(self, "components_")
        Xd = as_dask(X)
        _check_features(Xd, self.n_features_in_, "PCA")
        components = self.components_.astype(Xd.dtype, copy=False)
        return _like_input((Xd - self.mean_.astype(Xd.dtype)) @ components.T, X)

    def inverse_transform(self, Z: ArrayLike) -> np.ndarray | da.Array:
        """Map scores back to the input space: ``Z @ components_ + mean_`` (eq. 17).

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(20, 3))
        >>> pca = PCA().fit(X)
        >>> bool(np.allclose(pca.inverse_transform(pca.transform(X)), X))
        True
        """
        check_is_fitted(self, "components_")
        Zd = as_dask(Z, name="Z")
        if Zd.shape[1] != self.n_components_:
            raise ValueError(
                f"Z has {Zd.shape[1]} columns, but PCA has {self.n_components_} components."
            )
        return _like_input(Zd @ self.components_.astype(Zd.dtype) + self.mean_, Z)


def _check_finite_statistics(*statistics: np.ndarray) -> None:
    """Non-finite input reaches the accumulated statistics; report it before any solve."""
    if not all(np.isfinite(s).all() for s in statistics):
        raise ValueError("PCA: X contains NaN or infinity; remove or impute those values.")


def _shifted_moments(block: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Column sums (first row) stacked on the cross-product matrix of ``block - shift``."""
    Y = block.astype(np.float64) - shift
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite input is reported by fit
        return np.vstack([Y.sum(axis=0), Y.T @ Y.copy()])  # distinct buffers: no syrk


def _dot_matrix(block: np.ndarray) -> np.ndarray:
    """``B Bᵀ`` of one feature chunk, in float64."""
    B = block.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite input is reported by fit
        return B @ B.T.copy()


