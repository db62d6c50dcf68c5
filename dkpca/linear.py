"""Linear PCA on dask: :class:`PCA`, for tall (covariance), wide (gram) or huge (sketch) data.

Over 500 lines, for one reason: ``PCA``'s docstring (about 140 lines) and its doctested
methods. The arithmetic of each solver lives in the ``_pca_*`` modules (covariance, randomized,
sparse, components, probabilistic).
"""

from __future__ import annotations

import numbers
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from ._device import array_module, is_device_array, to_host
from ._estimator import (
    N_COMPONENTS,
    SIZE,
    SKETCH_CONSTRAINTS,
    available_when,
    check_features,
    check_samples,
    clear_fitted,
    like_input,
    make_sketch,
    parse_size,
    warn_if_no_variance,
)
from ._feature_names import check_feature_names
from ._pca_components import complete_basis, orthonormal_tail, select_count
from ._pca_covariance import (
    NonFiniteStatisticsError,
    check_finite_statistics,
    covariance_spectrum,
    row_statistics,
)
from ._pca_probabilistic import ProbabilisticMixin, minka_rank, noise_variance
from ._pca_randomized import fit_randomized_pca
from ._pca_sparse import sparse_projection
from ._scattered import inputs_sent_once
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
from .io import as_array, as_dask, is_sparse, nonfinite_message, require_known_rows
from .io._views import view_blocks
from .linalg import crossproduct, flip_signs, top_eigh
from .solvers import ComponentRule, fit_pca_sketch
from .solvers._components import warn_if_fraction_missed
from .solvers._sketches import Sketch

__all__ = ["PCA"]


class PCA(ProbabilisticMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Linear principal component analysis on dask, for tall, wide, sparse or very wide data.

    Parameters
    ----------
    n_components : int, float, "mle" or None, default=None
        An int keeps exactly that many components (directions without variance included, as
        zero-variance components), a float in (0, 1) the fewest whose variance ratios sum to
        *more than* that fraction (scikit-learn's rule), ``"mle"`` the rank that maximises
        Minka's evidence (needs ``n_samples >= n_features`` and the whole spectrum), ``None``
        all ``min(n_samples, n_features)``. With ``solver="sketch"`` a fraction chooses among
        the directions the sketch found (at most ``sketch_dim``); when they all explain no
        more than the fraction, they are kept, with a warning that ``sketch_dim`` is too
        small, and no direction without variance is added.
    whiten : bool, default=False
        Divide the scores by ``sqrt(explained_variance_)`` (unit variance on the training
        data); :meth:`inverse_transform` multiplies them back.
    solver : {"auto", "covariance", "gram", "randomized", "sketch"}, default="auto"
        ``"covariance"`` (the tutorial's Alg. 1): one pass accumulates the ``d × d`` covariance
        over row chunks (sparse input too, centred implicitly). ``"gram"`` (Alg. 2, for
        ``n <= d``): one pass accumulates the ``n × n`` dot matrix over feature chunks, a
        second converts its eigenvectors (``w = X_cᵀ v / sqrt(λ)``, eq. 21).
        ``"randomized"``: block Krylov (block Lanczos) on the implicitly centred data, for
        data too wide for either matrix; dense or sparse, chunked along rows, features or
        both; accurate to ``tol`` (see :mod:`dkpca._pca_randomized`). ``"auto"`` takes
        ``"covariance"`` when ``n > d`` or the data are sparse, else ``"gram"``, unless that
        solver's ``m × m`` matrix exceeds ``memory_budget`` and ``n_components`` is an int:
        then ``"randomized"``. ``"sketch"`` (Alg. 4, for large ``n`` and ``d``) sketches
        every sample to ``sketch_dim`` dimensions, decomposes their ``q × q`` scatter and
        converts the eigenvectors back to the input space (eq. 21): two passes, memory
        ``O(q² + d k)``.
    tol : float, default=1e-6
        Randomized solver: the largest residual ``||C v - λ v||`` relative to the first
        eigenvalue; every eigenvalue is then within ``tol`` of the first one's size of a true
        eigenvalue (relative error ≤ 1e-6 by default, usually far less). For float32 data at
        ``tol >= 1e-6`` dense blocks are multiplied in float32 (summed in float64, accurate to
        about 1e-7 of the first eigenvalue; about half the time of float64 products); a
        tighter ``tol`` multiplies in float64.
    max_iter : int, default=100
        Randomized solver: most products with ``X_cᵀ X_c`` (or ``X_c X_cᵀ``); a
        :class:`~sklearn.exceptions.ConvergenceWarning` says when ``tol`` was not reached.
    memory_budget : int or str, default="1GiB"
        What ``"auto"`` lets an exact solver's ``d × d`` or ``n × n`` matrix take, and the
        most that :meth:`partial_fit`'s ``d × d`` scatter may take.
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
    components_ : ndarray (n_components, n_features)
    explained_variance_ : ndarray (n_components,)
        Variance along each component, with ``n_samples - 1`` in the denominator as in
        scikit-learn.
    explained_variance_ratio_ : ndarray (n_components,)
    singular_values_ : ndarray (n_components,)
    mean_ : ndarray (n_features,)
    noise_variance_ : float
        Probabilistic PCA's noise variance (Tipping and Bishop): the mean variance of the
        directions not kept, zero when all ``min(n_samples, n_features)`` are.
    n_components_, n_samples_, n_features_in_ : int
    feature_names_in_ : object array of str
        The column names of a DataFrame fitted on (only then): ``transform`` and the scores
        refuse columns with other names or in another order, as scikit-learn's do.
    n_samples_seen_ : int
        Rows fitted so far (``n_samples_``; scikit-learn's ``IncrementalPCA`` name).
    row_statistics_ : RowStatistics or None
        Covariance solver: the count, mean and ``d × d`` scatter of every row fitted, which
        :meth:`partial_fit` continues from (and :func:`dkpca.save` keeps); ``None`` for the
        other solvers.
    solver_ : str
    n_iter_ : int
        Passes over the data: for the randomized solver its statistics pass and every
        product, for the others the passes they make at most.

    See Also
    --------
    KernelPCA, sklearn.decomposition.PCA

    Notes
    -----
    Covariance: time ``O(n d²)``, memory ``d²`` (sparse: ``O(Σ nnz(row)²)``). Gram: time
    ``O(n² d)``, memory ``n²``. Randomized: ``O(nnz(X) b)`` per pass with a block of
    ``b = k + max(10, k / 2)`` columns, usually tens of passes; memory ``O(m · basis)`` on the
    client (``m = min(n, d)``, the basis at most ``12 b`` columns past 2,048) and one block
    per task; one ``dask.compute`` per pass, every chunk read once in it.
    Fitted attributes and outputs have the input's dtype (float32 stays float32); sums,
    products and eigenproblems run in float64. The probabilistic model
    (:meth:`get_covariance`, :meth:`get_precision`, :meth:`score_samples`, :meth:`score`)
    follows scikit-learn's definitions, including its covariance of a whitened model; scoring
    costs ``O(d k)`` per sample through the matrix inversion lemma, never a ``d × d``
    matrix unless the model has no noise (see :mod:`dkpca._pca_probabilistic`).
    Covariance centres every strip of rows on its own rows and merges the strips exactly
    (Chan's pairwise rule), which keeps the one-pass formula accurate when the mean is large
    compared with the spread, whatever the order of the rows (see :mod:`dkpca.moments`). A
    numpy array is read in place, never copied, by one thread per core; a dask array (or
    Zarr) gives one task per row chunk. NaN and infinity are found in the accumulated
    statistics, so checking them costs no pass of its own.

    References
    ----------
    S. Marukatat, "Tutorial on PCA and approximate PCA and approximate kernel PCA",
    Artificial Intelligence Review 56, 5445–5477, 2023 (the "tutorial": Algs. 1–6, §5.3).

    M. E. Tipping and C. M. Bishop, "Probabilistic principal component analysis", Journal
    of the Royal Statistical Society B 61(3), 611–622, 1999.

    T. P. Minka, "Automatic choice of dimensionality for PCA", Advances in Neural
    Information Processing Systems 13, 2000.

    C. Musco and C. Musco, "Randomized block Krylov methods for stronger and faster
    approximate singular value decomposition", Advances in Neural Information Processing
    Systems 28, 2015.

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca import PCA
    >>> X = np.random.default_rng(0).normal(size=(50, 4))
    >>> PCA(n_components=2).fit(X).components_.shape
    (2, 4)
    """

    _parameter_constraints: dict = {
        "n_components": [*N_COMPONENTS, Options({"mle"})],
        "whiten": [InstanceOf(bool, "a bool")],
        "solver": [Options({"auto", "covariance", "gram", "randomized", "sketch"})],
        "tol": [Interval("real", 0, None, closed="neither")],
        "max_iter": [Interval("int", 1, None)],
        "memory_budget": SIZE,
        "min_relative_eigenvalue": [Interval("real", 0, 1, closed="neither"), None],
        "block_size": SIZE,
        **SKETCH_CONSTRAINTS,
    }

    def __init__(
        self,
        n_components: float | None = None,
        *,
        whiten: bool = False,
        solver: str = "auto",
        tol: float = 1e-6,
        max_iter: int = 100,
        memory_budget: int | str = "1GiB",
        min_relative_eigenvalue: float | None = None,
        block_size: int | str = "128MiB",
        sketch: str = "gaussian",
        sketch_dim: int | None = None,
        n_hashes: int = 1,
        refine: bool = False,
        random_state: RandomStateLike = None,
    ):
        self.n_components = n_components
        self.whiten = whiten
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.memory_budget = memory_budget
        self.min_relative_eigenvalue = min_relative_eigenvalue
        self.block_size = block_size
        self.sketch = sketch
        self.sketch_dim = sketch_dim
        self.n_hashes = n_hashes
        self.refine = refine
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: Any = None) -> PCA:
        """Fit the model on ``X`` (``n_samples × n_features``).

        Parameters
        ----------
        X : array-like, dask array, xarray.DataArray or Zarr path, (n_samples, n_features)
        y : ignored

        Returns
        -------
        self : PCA

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(30, 5)).astype(np.float32)
        >>> pca = PCA(2).fit(X)
        >>> pca.components_.dtype, pca.explained_variance_.shape
        (dtype('float32'), (2,))
        """
        if is_device_array(X):  # CuPy input: fitted on the host, see transform
            return self.fit(to_host(X), y)
        validate_params(self.get_params(), self._parameter_constraints, "PCA")
        clear_fitted(self)  # nothing from an earlier fit with other parameters
        check_feature_names(self, X, reset=True)
        # NaN and infinity reach the accumulated statistics, which are checked: no extra pass.
        Xa = as_array(X, check_finite=False, accept_sparse=True)
        check_samples(Xa, "PCA")
        n, d = Xa.shape
        limit = min(n, d)
        check_n_components(self.n_components, limit, "PCA")
        count = self.n_components if isinstance(self.n_components, numbers.Integral) else None
        sparse = is_sparse(Xa)
        solver = self._choose_solver(n, d, count, sparse)
        if self.n_components == "mle":
            if n < d:
                raise ValueError(
                    f"PCA: n_components='mle' is only supported if n_samples >= n_features "
                    f"(X has shape {(n, d)}); give an int or a variance fraction.")
            if solver in ("sketch", "randomized"):
                raise ValueError(
                    f"PCA: n_components='mle' needs the whole spectrum, which "
                    f"solver={solver!r} does not compute; use solver='covariance'.")
        if solver == "randomized" and count is None and self.n_components is not None:
            raise ValueError(
                f"PCA: solver='randomized' needs an integer n_components (got "
                f"{self.n_components!r}): it finds the leading eigenpairs only.")
        if sparse and solver not in ("covariance", "randomized"):
            raise TypeError(
                f"PCA: sparse input is supported by solver='covariance' and 'randomized' "
                f"(implicit centring), not solver={solver!r}; choose one of those.")
        sketch = None
        if solver == "sketch":
            sketch = make_sketch(self.sketch, self.sketch_dim, self.n_hashes, self.random_state,
                                 n_max=d, rule=ComponentRule(count=count), owner="PCA")
        try:
            with inputs_sent_once():  # a solver's passes share in-memory rows sent to a cluster
                mean, eigenvalues, vectors, total, passes, statistics = self._solve(
                    X, Xa, solver, count, sketch)
        except NonFiniteStatisticsError:
            raise ValueError(f"PCA: {nonfinite_message(Xa)}") from None
        self.solver_ = solver
        centred = (solver in ("randomized", "gram", "sketch")
                   or (solver == "covariance" and not sparse))
        self._set_spectrum(mean, eigenvalues, vectors, total, n, d, Xa.dtype, centred,
                           sketch_dim=None if sketch is None else sketch.sketch_dim)
        # Only the covariance solver's statistics are a sum over rows that partial_fit can
        # continue; a refit with another solver must not leave an older fit's behind.
        self.row_statistics_ = statistics
        self.n_iter_ = passes
        return self

    def _solve(
        self, X: Any, Xa: Any, solver: str, count: int | None, sketch: Sketch | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int, Any]:
        """Run ``solver`` on the validated ``Xa`` (``X`` as given, for its chunks).

        ``sketch`` is the sketch solver's (``None`` for the others).

        Returns the mean, eigenvalues, vectors, total variance, passes over the data and the
        covariance solver's row statistics (``None`` for the others).
        """
        passes = {"covariance": 1, "gram": 2, "sketch": 3 if self.refine else 2}.get(solver)
        statistics = None
        if solver == "sketch":
            mean, eigenvalues, vectors, total = fit_pca_sketch(
                as_dask(Xa, check_finite=False), ComponentRule(count=count), sketch=sketch,
                refine=self.refine)
        elif solver == "randomized":
            # a dask array keeps its own chunks (features too): no rechunk to full rows
            data = X.astype(Xa.dtype) if isinstance(X, da.Array) and X.ndim == 2 else Xa
            result = fit_randomized_pca(
                data, count if count is not None else min(Xa.shape),
                seed=check_random_state(self.random_state), tol=self.tol,
                max_iter=self.max_iter)
            mean, eigenvalues, vectors, total = result
            passes = result.n_passes
        elif solver == "covariance":
            statistics = row_statistics(Xa)
            mean, eigenvalues, vectors, total = covariance_spectrum(statistics, count)
        else:
            mean, eigenvalues, vectors, total = self._fit_gram(Xa, count)
        return mean, eigenvalues, vectors, total, passes, statistics

    def _incremental(self) -> None:
        """Raise AttributeError, saying why, where ``partial_fit`` does not exist.

        ``hasattr(model, "partial_fit")`` (what scikit-learn and dask-ml test) is then true
        exactly for the solvers that sum over rows.
        """
        if self.solver not in ("auto", "covariance"):
            raise AttributeError(
                f"PCA: partial_fit needs solver='covariance' (or 'auto'), whose statistics are "
                f"a sum over rows; solver={self.solver!r} needs every row at once.")

    @available_when(_incremental)
    def partial_fit(self, X: ArrayLike, y: Any = None) -> PCA:
        """Add a batch of rows: the model becomes the fit on every row seen so far.

        The covariance solver's statistics (count, mean, scatter: :attr:`row_statistics_`)
        are a sum over rows, so the batches' statistics merge exactly and the model after any
        number of calls equals :meth:`fit` on all their rows, to rounding (about 1e-13 for
        float64 data).
        The first call on an unfitted model starts it and fixes ``n_features_in_`` and the
        output dtype; a model already fitted by the covariance solver (by :meth:`fit`, or
        loaded with :func:`dkpca.load`) continues from its rows. Each call costs one pass over
        the batch (``O(r d²)``) and one ``d × d`` eigenproblem; memory ``O(d²)`` whatever the
        batch (a dask array or Zarr path is read chunk by chunk).

        Parameters
        ----------
        X : array-like, scipy.sparse matrix, dask array, xarray.DataArray or Zarr path
            The new rows, ``(n_batch, n_features)``; the first batch needs at least 2 rows.
        y : ignored

        Returns
        -------
        self : PCA

        Raises
        ------
        AttributeError
            The method does not exist unless ``solver`` is ``"covariance"`` or ``"auto"`` (the
            gram, randomized and sketch solvers need every row at once); the message says so.
        ValueError
            The model was fitted by another solver (``"auto"`` took gram, say); the batch has
            another number of features than the model; the ``d × d`` scatter a first call
            would keep exceeds ``memory_budget``; a dask batch's row chunk sizes are unknown
            (boolean indexing: the message, as :meth:`fit`'s, says to compute them).

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(300, 4))
        >>> pca = PCA(2)
        >>> for batch in np.array_split(X, 3):
        ...     pca = pca.partial_fit(batch)
        >>> whole = PCA(2).fit(X)
        >>> pca.n_samples_seen_, bool(np.allclose(pca.components_, whole.components_))
        (300, True)
        """
        if is_device_array(X):  # CuPy input: added on the host, as fit does
            return self.partial_fit(to_host(X), y)
        validate_params(self.get_params(), self._parameter_constraints, "PCA")
        Xa = as_array(X, check_finite=False, accept_sparse=True)
        first = not hasattr(self, "components_")
        check_feature_names(self, X, reset=first)
        if first:
            check_samples(Xa, "PCA")
            previous, dtype = None, Xa.dtype
        else:  # any batch may come from boolean indexing: the same message as fit's
            require_known_rows(Xa, owner="PCA")
            check_features(Xa, self.n_features_in_, "PCA")
            previous, dtype = getattr(self, "row_statistics_", None), self.mean_.dtype
            if previous is None:
                why = (f"was fitted by solver={self.solver_!r}, which keeps no row statistics"
                       if self.solver_ != "covariance" else
                       "was saved in model format 2, before row statistics were kept")
                raise ValueError(
                    f"PCA: this model {why} to continue from; fit it again with "
                    f"solver='covariance', or start a new model with partial_fit.")
        if first:
            self._check_scatter_fits(Xa.shape[1])
        try:
            batch = row_statistics(Xa)
        except NonFiniteStatisticsError:
            raise ValueError(f"PCA: {nonfinite_message(Xa)}") from None
        statistics = batch if previous is None else previous.merge(batch)
        n, d = statistics.count, Xa.shape[1]
        check_n_components(self.n_components, min(n, d), "PCA")
        if self.n_components == "mle" and n < d:
            raise ValueError(
                f"PCA: n_components='mle' is only supported if n_samples >= n_features "
                f"({n} rows seen, {d} features); give an int or a variance fraction.")
        count = self.n_components if isinstance(self.n_components, numbers.Integral) else None
        mean, eigenvalues, vectors, total = covariance_spectrum(statistics, count)
        self._set_spectrum(mean, eigenvalues, vectors, total, n, d, dtype,
                           centred=not is_sparse(Xa))
        self.solver_ = "covariance"
        self.row_statistics_ = statistics
        self.n_iter_ = 1
        return self

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags: sparse input is accepted (covariance and randomized solvers)."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _check_scatter_fits(self, d: int) -> None:
        """Refuse to start ``partial_fit`` when the ``d × d`` scatter exceeds ``memory_budget``.

        ``fit`` would take the gram or randomized solver there; ``partial_fit`` has only the
        covariance one, and a 100,000-feature scatter (80 GB) is better refused at once.
        """
        needed = 8 * d * d
        budget = parse_size(self.memory_budget, "memory_budget", "PCA")
        if needed > budget:
            raise ValueError(
                f"PCA: partial_fit keeps the {d} x {d} scatter of the rows ({needed / 2**30:.1f} "
                f"GiB), above memory_budget={self.memory_budget!r}; raise memory_budget if it "
                f"fits, or fit all rows at once (the gram and randomized solvers need no d x d "
                f"matrix).")

    def _choose_solver(self, n: int, d: int, count: int | None, sparse: bool) -> str:
        """Return ``solver``, or the one ``"auto"`` stands for.

        An exact solver when its ``m × m`` matrix fits ``memory_budget`` (covariance for
        ``n > d`` or sparse data, else gram), otherwise the randomized one (for an integer
        ``n_components``).
        """
        if self.solver != "auto":
            return self.solver
        exact = "covariance" if n > d or sparse else "gram"
        side = d if exact == "covariance" else n
        budget = parse_size(self.memory_budget, "memory_budget", "PCA")
        if 8 * side * side > budget and count is not None:
            return "randomized"
        return exact

    def _set_spectrum(
        self, mean: np.ndarray, eigenvalues: np.ndarray, vectors: np.ndarray, total: float,
        n: int, d: int, dtype: np.dtype, centred: bool, *, sketch_dim: int | None = None,
    ) -> None:
        """Fitted attributes from the leading eigenpairs of the scatter matrix ``X_cᵀ X_c``.

        ``sketch_dim`` is the sketch solver's ``q`` (``None`` for the exact solvers): a
        variance fraction then chooses among the directions the sketch found only, and warns
        when they do not reach it.

        Maintenance note: everything is computed in float64 and cast to the input's dtype at
        the end; variances are clipped at zero (rounding leaves tiny negative eigenvalues on
        rank-deficient data), so ``singular_values_² = (n - 1) explained_variance_``.
        """
        limit = min(n, d)
        variances = np.zeros(limit)  # directions a solver did not return carry no variance
        found = min(limit, len(eigenvalues))
        variances[:found] = np.maximum(eigenvalues[:found], 0.0) / (n - 1)
        fraction = (isinstance(self.n_components, numbers.Real)
                    and not isinstance(self.n_components, numbers.Integral))
        if self.n_components == "mle":  # Minka's rule, then the threshold if any
            m = select_count(variances, total, minka_rank(variances, n),
                             self.min_relative_eigenvalue)
        elif fraction and sketch_dim is not None:  # no zero-variance filler for a fraction
            m = select_count(variances[:found], total, self.n_components,
                             self.min_relative_eigenvalue)
            warn_if_fraction_missed(variances[:found], total, self.n_components, owner="PCA",
                                    found="directions the sketch", limit=f"sketch_dim={sketch_dim}",
                                    instead="'covariance' or 'gram'")
        else:
            m = select_count(variances, total, self.n_components, self.min_relative_eigenvalue)
        if isinstance(self.n_components, numbers.Integral) and self.min_relative_eigenvalue is None:
            m = int(self.n_components)  # exactly the width asked for, zero columns included
        vectors = complete_basis(vectors[:, :m], m)
        noise = noise_variance(variances[:found], m, limit, total)
        variances = variances[:m]
        # Sums of squares minus n·μ² (sparse covariance) cancel, where nothing varies, to the
        # rounding of a sum of n terms: at most about n·eps·Σⱼ n μⱼ², over columns (not
        # d·max μ², which exceeds a real variance next to one large-mean column). Moments
        # around each strip's first row (dense covariance), a block's mean (randomized), the
        # first row (sketch) and the Gram matrix of shifted rows (gram) are exactly zero there.
        scale = n * float(np.sum(mean**2)) / (n - 1)
        floor = 0.0 if centred else (64 + n) * np.finfo(float).eps * scale
        varies = total > max(floor, np.finfo(float).tiny)
        warn_if_no_variance(varies, "PCA", "")
        self.mean_ = mean.astype(dtype)
        self.components_ = np.ascontiguousarray(vectors.T, dtype=dtype)
        self.explained_variance_ = variances.astype(dtype)
        ratio = variances / total if varies else np.zeros_like(variances)
        self.explained_variance_ratio_ = ratio.astype(dtype)
        self.singular_values_ = np.sqrt(variances * (n - 1)).astype(dtype)
        self.noise_variance_ = dtype.type(noise)
        self.n_components_ = m
        self.n_samples_ = self.n_samples_seen_ = n
        self.n_features_in_ = d
        self._n_features_out = m

    def _fit_gram(
        self, X: np.ndarray | da.Array, k: int | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        n, d = X.shape
        block_bytes = parse_size(self.block_size, "block_size", "PCA")
        width = min(d, max(1, block_bytes // (n * X.dtype.itemsize)))
        in_memory = isinstance(X, np.ndarray)
        # In-memory data is cut into column views of the caller's array (no copy).
        columns = (view_blocks(X, (-1, width)) if in_memory
                   else X.rechunk((-1, width)))
        parts = [dask.delayed(_dot_matrix)(b) for b in columns.to_delayed().ravel()]
        # Lazy data that fits in one block comes along with the Gram matrix: no second pass.
        small = not in_memory and n * d * X.dtype.itemsize <= block_bytes
        G, mean, *held = compute(tree_sum(parts), columns.mean(axis=0, dtype=np.float64),
                                 *([X] if small else []))
        check_finite_statistics(G, mean)
        row_means = G.mean(axis=0)
        center_kernel_inplace(G, row_means, float(row_means.mean()))
        total = float(np.trace(G)) / (n - 1)
        eigenvalues, dual = top_eigh(G, k, overwrite=True)
        eigenvalues = np.maximum(eigenvalues, 0.0)
        # Directions without variance cannot be scaled by 1 / sqrt(λ): the fit completes them
        # (complete_basis), with zero variance, up to the width asked for. Maintenance note:
        # forming, centring and diagonalising G leave its eigenvalues an absolute error of
        # about n·eps·λ₁ (backward-stable eigh: O(n eps ||G||); numpy's matrix_rank takes the
        # same max(M, N)·eps of the largest as its rank tolerance). Below that an eigenvalue is
        # rounding; above it float64 resolves it, so it is kept. That rounding leaves its
        # converted vector a length and overlaps of about eps·λ₁/λ: orthonormal_tail below.
        keep = eigenvalues > eigenvalues[0] * n * np.finfo(np.float64).eps
        eigenvalues, dual = eigenvalues[keep], dual[:, keep]
        # eq. (21): w = X_cᵀ v / sqrt(λ); the dual vectors sum to zero, so X_cᵀ v is
        # (X - 1 x₀ᵀ)ᵀ v, whose terms do not cancel for data far from the origin
        dual = (dual - dual.mean(axis=0)) / np.sqrt(eigenvalues)
        if held:  # small lazy data, already computed here: one shifted copy
            vectors = np.subtract(held[0], held[0][:1], dtype=np.float64).T @ dual
        else:  # a feature chunk at a time (the caller's array is never copied whole)
            shifted = columns.astype(np.float64) - columns[:1].astype(np.float64)
            (vectors,) = compute(shifted.T @ da.from_array(dual))
        vectors = orthonormal_tail(vectors, eigenvalues)  # rounding in X_cᵀ v / sqrt(λ)
        return mean, eigenvalues, flip_signs(vectors), total

    def transform(self, X: ArrayLike) -> np.ndarray | da.Array:
        """Project ``X`` on the components: ``(X - mean_) @ components_.T``.

        With ``whiten``, every score is divided by ``sqrt(explained_variance_)`` (at least
        the dtype's machine epsilon), so the training scores have unit variance.
        Lazy for dask input, CuPy (computed on the GPU) for CuPy input, numpy otherwise;
        :meth:`fit` takes CuPy input too, and fits on the host.

        Parameters
        ----------
        X : array-like, dask array or Zarr path, (n_samples, n_features)

        Returns
        -------
        (n_samples, n_components) array

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(50, 4)) * [4.0, 2.0, 1.0, 0.5]
        >>> Z = PCA(2, whiten=True).fit(X).transform(X)
        >>> np.round(Z.std(axis=0, ddof=1), 6)
        array([1., 1.])
        """
        check_is_fitted(self, "components_")
        check_feature_names(self, X, reset=False)
        if is_device_array(X):  # CuPy in, CuPy out: the projection runs on the GPU
            check_features(X, self.n_features_in_, "PCA")
            xp = array_module(X)
            components = xp.asarray(self._scaled_components(np.dtype(X.dtype), inverse=False))
            return (X - xp.asarray(self.mean_.astype(X.dtype))) @ components.T
        if is_sparse(X):
            Xs = as_array(X, accept_sparse=True)
            check_features(Xs, self.n_features_in_, "PCA")
            components = self._scaled_components(Xs.dtype, inverse=False)
            return sparse_projection(Xs, components, self.mean_.astype(Xs.dtype))
        Xd = as_dask(X)
        check_features(Xd, self.n_features_in_, "PCA")
        components = self._scaled_components(Xd.dtype, inverse=False)
        return like_input((Xd - self.mean_.astype(Xd.dtype)) @ components.T, X)

    def _scaled_components(self, dtype: np.dtype, *, inverse: bool) -> np.ndarray:
        """Return ``components_`` in ``dtype``, whitened if asked.

        With ``whiten``, rows are scaled for transform (``1 / sqrt(λ)``) or its inverse
        (``sqrt(λ)``).
        """
        components = self.components_.astype(dtype, copy=False)
        if not self.whiten:
            return components
        scale = np.sqrt(self.explained_variance_.astype(dtype))
        scale = np.maximum(scale, np.finfo(dtype).eps)
        return components * (scale if inverse else 1 / scale)[:, None]

    def inverse_transform(self, Z: ArrayLike) -> np.ndarray | da.Array:
        """Map scores back to the input space: ``Z @ components_ + mean_`` (eq. 17).

        With ``whiten``, the scores are first scaled back by ``sqrt(explained_variance_)``:
        the exact inverse of :meth:`transform` on the span of the components.

        Parameters
        ----------
        Z : array-like or dask array, (n_samples, n_components)

        Returns
        -------
        (n_samples, n_features) array

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(20, 3))
        >>> pca = PCA(whiten=True).fit(X)
        >>> bool(np.allclose(pca.inverse_transform(pca.transform(X)), X))
        True
        """
        check_is_fitted(self, "components_")
        if is_device_array(Z):  # CuPy in, CuPy out, on the GPU
            xp = array_module(Z)
            components = xp.asarray(self._scaled_components(np.dtype(Z.dtype), inverse=True))
            return Z @ components + xp.asarray(self.mean_.astype(Z.dtype))
        Zd = as_dask(Z, name="Z")
        if Zd.shape[1] != self.n_components_:
            raise ValueError(
                f"Z has {Zd.shape[1]} columns, but PCA has {self.n_components_} components."
            )
        components = self._scaled_components(Zd.dtype, inverse=True)
        return like_input(Zd @ components + self.mean_.astype(Zd.dtype), Z)


def _dot_matrix(block: np.ndarray) -> np.ndarray:
    """``(B - 1 b₀ᵀ)(B - 1 b₀ᵀ)ᵀ`` of one feature chunk (all rows), in float64.

    Centring the Gram matrix ``H G H`` ignores a shift common to every row, and shifting by
    the first row (``X[0]`` over the chunk's features) keeps the entries at the data's spread:
    ``B Bᵀ`` of data far from the origin (a mean of 1e7 against a spread of 1) loses every
    digit of the centred matrix to cancellation.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite input is reported by fit
        B = np.subtract(block, block[:1], dtype=np.float64)
        return crossproduct(B.T)
