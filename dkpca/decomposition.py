"""The kernel PCA estimator, :class:`KernelPCA`, with scikit-learn's API.

Linear :class:`~dkpca.linear.PCA` lives in :mod:`dkpca.linear` and is re-exported here.

Over 500 lines, for one reason: the docstrings (about 175 lines for the class's 17 parameters
and fitted attributes, 45 for ``partial_fit``) are the API reference. The solvers and their
options (:mod:`dkpca.options`), the pre-images and the checks live in their own modules; the
methods here only route to them.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Self

import dask
import dask.array as da
import numpy as np
import psutil
import scipy.sparse
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from ._device import array_module, is_device_array, to_host
from ._estimator import (
    N_COMPONENTS,
    RANDOM_STATE,
    SIZE,
    available_when,
    check_features,
    check_samples,
    clear_fitted,
    like_input,
    parse_size,
    warn_if_no_variance,
)
from ._feature_names import check_feature_names
from ._kernel_solvers import (
    INCREMENTAL_SOLVERS,
    SolverRun,
    continue_landmarks,
    resolve_solver,
    run_solver,
    training_data,
)
from ._precomputed import PrecomputedKernel
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
from .io import as_array, as_dask, is_lazy, require_known_rows
from .io._views import view_blocks
from .kernels import Kernel, get_kernel
from .linear import PCA
from .options import (
    FLAT_NAMES,
    PREIMAGES,
    SOLVERS,
    FixedPoint,
    Nystrom,
    SolverOptions,
    moved_parameters,
    solver_name,
    solver_options,
)
from .preimage import PreimageMixin
from .solvers import ComponentRule, as_landmarks

__all__ = ["PCA", "KernelPCA"]

logger = logging.getLogger(__name__)


@contextmanager
def _all_or_nothing(model: Any) -> Iterator[None]:
    """Restore ``model``'s fitted attributes as they were if the block raises.

    Attributes are set one by one (``fit`` sets the spectrum before it learns the pre-image):
    without this, a fit that fails half-way would leave a model that transforms but breaks
    later with a misleading error.
    """
    before = dict(vars(model))
    try:
        yield
    except BaseException:
        clear_fitted(model)
        vars(model).update({name: value for name, value in before.items()
                            if name not in vars(model)})
        raise


class KernelPCA(PreimageMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel principal component analysis on dask, for data larger than memory.

    The kernel matrix is evaluated in tiles across the active dask scheduler (a
    ``distributed.Client`` when one exists, else local threads) and is never held whole unless
    it fits in ``max_memory``.

    Parameters
    ----------
    n_components : int, float or None, default=None
        An int keeps that many components (with ``remove_zero_eig=False``, exactly that many
        columns, see below); a float in (0, 1) keeps the fewest components that explain that
        fraction of the variance; ``None`` keeps every component with a positive eigenvalue
        (exact solver only).
    kernel : str, Kernel or callable, default="rbf"
        A name: ``"rbf"``, ``"poly"``, ``"sigmoid"``, ``"linear"``, ``"laplacian"``,
        ``"cosine"``, ``"chi2"``, ``"additive_chi2"`` (scikit-learn's kernels, to 1e-10), or
        ``"precomputed"``: ``fit`` takes the ``n × n`` training kernel matrix (numpy or dask,
        symmetric) and ``transform`` takes ``K(new, train)``; pre-images, k-means landmarks
        and the fixed-size solver need an input space and refuse it. A :mod:`dkpca.kernels`
        object (which may be a sum, ``RBF() + Linear()``). A callable ``k(X, Y, **params)``
        returning the ``(len(X), len(Y))`` block is evaluated tile by tile; scikit-learn's
        per-pair callables ``k(x, y) -> float`` are detected and called pair by pair (slow).
        A model with a callable kernel cannot be saved.
    kernel_params : dict, optional
        Keyword arguments of a callable kernel (named kernels take ``gamma``, ``degree`` and
        ``coef0``).
    gamma : float, optional
        Kernel coefficient of rbf, poly and sigmoid; ``None`` means ``1 / n_features``.
        With a :mod:`dkpca.kernels` object as ``kernel``, ``gamma``, ``sigma2``, ``degree`` and
        ``coef0`` must keep their defaults (the object carries its own): others raise
        ``ValueError``.
    sigma2 : float, optional
        RBF width in ``exp(-||x - y||² / (2 sigma2))``; an alternative to ``gamma``.
    degree : int, default=3
        Degree of the polynomial kernel.
    coef0 : float, default=1
        Independent term of the poly and sigmoid kernels.
    solver : str or a :mod:`dkpca.options` object, default="auto"
        The solver, by name with its defaults or as an options object with its own
        settings (:class:`~dkpca.options.Randomized`, :class:`~dkpca.options.Sketch`, ...;
        a grid search reaches them as ``solver__<option>``). ``"exact"`` gathers the kernel
        and calls LAPACK; ``"randomized"`` runs a block Krylov iteration on the kernel
        operator (cached in memory when it fits, re-evaluated tile by tile when it does not);
        ``"sketch"`` is approx-KPCA (tutorial Alg. 6): one pass sketches the centred kernel
        map to ``q`` dimensions, then a ``q × q`` eigenproblem; ``"nystrom"`` approximates
        the kernel through ``m`` landmarks and runs a one-pass PCA of their feature map (out
        of core: only ``m × m`` objects are gathered); ``"fixed_size"`` is Nyström with
        landmarks chosen to maximise their quadratic Renyi entropy (MDD paper §V, FS and FS2;
        any kernel); ``"icf"`` is Nyström on the pivots of an incomplete Cholesky
        factorisation of the kernel matrix (MDD paper eqs. 16–19). ``"auto"`` takes
        ``"exact"`` for at most 2,000 samples, when ``n_components`` is ``None`` or above a
        fifth of the samples, and ``"randomized"`` (with its defaults) otherwise.
    min_relative_eigenvalue : float, optional
        Drop components whose eigenvalue is below this fraction of the first.
    block_size : int or str, default="128MiB"
        Memory for one kernel tile.
    max_memory : int, str or "auto", default="auto"
        Memory the kernel may take: the whole matrix for the exact solver (in this process),
        the upper tiles for the randomized solver's cache (where they are held: on the workers
        under a ``distributed.Client``). ``"auto"`` is half of this machine's available memory
        for the exact solver and, for the cache, the workers' free memory (half of each
        worker's limit less what it uses) or, without a cluster, half of the available memory.
    preimage : {"auto", "fixed_point", "learned"} or FixedPoint, default="auto"
        How ``inverse_transform`` and ``denoise`` map back to the input space: the fixed-point
        iteration of Mika et al. (RBF kernels on dense data only; its stopping rule in
        :class:`~dkpca.options.FixedPoint`) or the kernel ridge regression learned with
        ``fit_inverse_transform`` (any kernel). ``"auto"`` takes the learned one when
        ``fit_inverse_transform=True`` (as scikit-learn), else the fixed point where it
        applies. See :mod:`dkpca.preimage`.
    fit_inverse_transform : bool, default=False
        Learn the kernel ridge pre-image from the training scores to the training points (the
        landmarks for landmark solvers; at most 5,000 training points otherwise), as
        scikit-learn does.
    alpha : float, default=1.0
        Ridge penalty of the learned pre-image.
    random_state : int, numpy Generator, RandomState or None, default=None
        Seed of the randomized solver's start block, of the sketch, of landmark sampling and
        of the learned pre-image's subsample.

    remove_zero_eig : bool, default=False
        With an int ``n_components``: ``False`` returns exactly that many columns, components
        without a positive eigenvalue (a rank-deficient kernel) being zero columns with
        eigenvalue 0 (logged at INFO level, as scikit-learn keeps them silently); ``True``
        drops them, with a warning. scikit-learn's semantics: with
        ``n_components=None`` zero components are always dropped. Significantly negative
        eigenvalues among the requested components (an indefinite kernel) raise
        ``ValueError``.
    copy_X : bool, default=True
        Keep a copy of in-memory training data as the model's basis (exact, randomized and
        sketch solvers), so that changing the caller's array later cannot change
        ``transform``, ``denoise`` or a saved model. ``False`` keeps a reference: no second
        copy of the data in memory, but the model then silently follows the array. Lazy
        training data (dask, Zarr) is always kept as a lazy reference, never read into
        memory; :func:`dkpca.save` writes it into the saved model, which is self-contained.

    Attributes
    ----------
    eigenvalues_ : ndarray (n_components,)
        Eigenvalues of the centred training kernel matrix, descending.
    explained_variance_ : ndarray (n_components,)
        ``eigenvalues_ / n_samples``: variance along each component in feature space.
    explained_variance_ratio_ : ndarray (n_components,)
        Fraction of the total feature-space variance (trace of the centred kernel).
    eigenvectors_ : ndarray (n_samples, n_components)
        Unit eigenvectors of the centred training kernel matrix (of its approximation for
        the sketch and Nyström solvers). Nyström on lazy input keeps them lazy: a dask array.
        Absent after :meth:`partial_fit`, which keeps no rows (``transform`` gives scores).
    landmarks_ : ndarray (n_landmarks, n_features)
        Nyström and fixed-size solvers: the landmarks; ICF: the pivots, in the order chosen.
    entropy_trace_ : ndarray (n_iter,)
        Fixed-size solver: the working set's quadratic Renyi entropy at the start and after
        every iteration (non-decreasing).
    row_statistics_ : RowStatistics or None
        Nyström (feature map) and fixed-size solvers: the count, mean and scatter of
        ``k(x, L)`` over every row fitted and the sum of ``k(x, x)``, which
        :meth:`partial_fit` continues from (``m × m``; :func:`dkpca.save` keeps it); ``None``
        for the other solvers.
    n_samples_seen_ : int
        Rows fitted so far.
    residual_trace_ : ndarray
        ICF solver: the trace of ``K - G Gᵀ`` at the start of every pass; when the stop came
        inside a pass, the last entry is the upper bound it stopped on.
    n_components_ : int
    kernel_ : Kernel
        The kernel with data-dependent defaults resolved.
    gamma_ : float or None
        The resolved ``gamma`` (``None`` for kernels without one).
    solver_ : str
        The solver used.
    n_iter_ : int
        Passes over the kernel (1 for the exact solver); for fixed-size and ICF, the
        selection's iterations or passes plus the Nyström pass.
    basis_ : KernelBasis
        The fitted state used by ``transform`` and the pre-images.
    dual_coef_ : ndarray (n_preimage, n_features)
        With ``fit_inverse_transform``: the learned pre-image's ridge coefficients.
    X_transformed_fit_ : ndarray (n_preimage, n_components)
        With ``fit_inverse_transform``: the training scores it regresses from.
    n_features_in_ : int
    feature_names_in_ : object array of str
        The column names of a DataFrame fitted on (only then): ``transform`` refuses columns
        with other names or in another order, as scikit-learn's does.

    See Also
    --------
    PCA : linear PCA on dask.
    sklearn.decomposition.KernelPCA : in-memory kernel PCA.

    Notes
    -----
    Exact: time ``O(n² d + n³)``, memory one ``n × n`` matrix. Randomized with a cached kernel:
    ``O(n² d)`` once plus ``O(n² b)`` per pass (``b`` the block width, see ``n_oversamples``),
    memory half of ``n² × 4`` bytes for float32 tiles, held by the workers under a
    ``distributed.Client`` (the client keeps only ``n × b`` blocks and the Krylov basis,
    ``2 n × b × passes`` float64); streaming: each pass re-evaluates the kernel, memory one
    tile per thread plus the Krylov basis. Kernel tiles are evaluated only on and above the
    diagonal.

    References
    ----------
    B. Schölkopf, A. Smola and K.-R. Müller, "Nonlinear component analysis as a kernel
    eigenvalue problem", Neural Computation 10(5), 1299–1319, 1998.

    S. Marukatat, "Tutorial on PCA and approximate PCA and approximate kernel PCA",
    Artificial Intelligence Review 56, 5445–5477, 2023 (the "tutorial": Algs. 1–6, §5.3).

    C. Varon, C. Alzate and J. A. K. Suykens, "Noise level estimation for model selection in
    kernel PCA denoising", IEEE Trans. Neural Networks and Learning Systems 26(11),
    2650–2663, 2015 (the "MDD paper").

    S. Mika, B. Schölkopf, A. Smola, K.-R. Müller, M. Scholz and G. Rätsch, "Kernel PCA and
    de-noising in feature spaces", Advances in Neural Information Processing Systems 11, 1999.

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
        "n_components": N_COMPONENTS,
        "kernel": [
            InstanceOf(str, "a kernel name"),
            InstanceOf(Kernel, "a dkpca.kernels.Kernel"),
            InstanceOf(Callable, "a callable k(X, Y)"),
        ],
        "kernel_params": [InstanceOf(Mapping, "a dict"), None],
        "gamma": [Interval("real", 0, None, closed="neither"), None],
        "sigma2": [Interval("real", 0, None, closed="neither"), None],
        "degree": [Interval("int", 1, None)],
        "coef0": [Interval("real", None, None)],
        "solver": [Options({"auto", *SOLVERS}),
                   InstanceOf(tuple(SOLVERS.values()), "a dkpca.options solver object")],
        "min_relative_eigenvalue": [Interval("real", 0, 1, closed="neither"), None],
        "block_size": SIZE,
        "max_memory": [*SIZE, Options({"auto"})],
        "preimage": [Options(set(PREIMAGES)), InstanceOf(FixedPoint, "a FixedPoint")],
        "fit_inverse_transform": [Options({True, False})],
        "alpha": [Interval("real", 0, None, closed="neither")],
        "random_state": RANDOM_STATE,
        "remove_zero_eig": [Options({True, False})],
        "copy_X": [Options({True, False})],
    }

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        """Refuse a flat solver parameter of model format 3, saying where it went.

        Checked here, before ``__init__``, whose signature scikit-learn reads (it may not
        take ``**kwargs``): the user sees the new place instead of "unexpected keyword".
        """
        moved = sorted(FLAT_NAMES.intersection(kwargs))
        if moved:
            raise TypeError(f"KernelPCA: {moved_parameters(moved)}.")
        return super().__new__(cls)

    def __init__(
        self,
        n_components: float | None = None,
        *,
        kernel: str | Kernel | Callable = "rbf",
        gamma: float | None = None,
        sigma2: float | None = None,
        degree: int = 3,
        coef0: float = 1.0,
        solver: str | SolverOptions = "auto",
        min_relative_eigenvalue: float | None = None,
        block_size: int | str = "128MiB",
        max_memory: int | str = "auto",
        preimage: str | FixedPoint = "auto",
        fit_inverse_transform: bool = False,
        alpha: float = 1.0,
        random_state: RandomStateLike = None,
        kernel_params: Mapping[str, Any] | None = None,
        remove_zero_eig: bool = False,
        copy_X: bool = True,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.sigma2 = sigma2
        self.degree = degree
        self.coef0 = coef0
        self.solver = solver
        self.min_relative_eigenvalue = min_relative_eigenvalue
        self.block_size = block_size
        self.max_memory = max_memory
        self.preimage = preimage
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.random_state = random_state
        self.kernel_params = kernel_params
        self.remove_zero_eig = remove_zero_eig
        self.copy_X = copy_X

    @property
    def landmarks_(self) -> np.ndarray | da.Array:
        """The Nyström solver's landmarks (the fitted basis points)."""
        check_is_fitted(self, "basis_")
        if self.solver_ not in ("nystrom", "fixed_size", "icf"):
            raise AttributeError(
                f"landmarks_ exists for the nystrom, fixed_size and icf solvers, not "
                f"{self.solver_!r}"
            )
        return self.basis_.basis

    def _resolve_kernel(self, n_features: int) -> Kernel:
        if isinstance(self.kernel, Kernel):
            # A kernel object carries its own parameters: the flat ones would be ignored.
            given = [f"{name}={value!r}" for name, value, default in (
                ("gamma", self.gamma, None), ("sigma2", self.sigma2, None),
                ("degree", self.degree, 3), ("coef0", self.coef0, 1.0)) if value != default]
            if given:
                raise ValueError(
                    f"KernelPCA: {', '.join(given)} cannot be applied to kernel={self.kernel!r}: "
                    f"a Kernel object carries its own parameters; set them on it (for "
                    f"example RBF(gamma=0.5)), or name the kernel (kernel='rbf', gamma=0.5).")
        if self.gamma is not None and self.sigma2 is not None:
            raise ValueError("KernelPCA: give gamma or sigma2, not both.")
        if self.sigma2 is not None and self.kernel not in ("rbf", "gaussian"):
            raise ValueError(
                f"KernelPCA: sigma2 applies to the rbf kernel only, not kernel={self.kernel!r}."
            )
        kernel = get_kernel(
            self.kernel,
            gamma=self.gamma,
            sigma2=self.sigma2,
            degree=self.degree,
            coef0=self.coef0,
            kernel_params=self.kernel_params,
        )
        return kernel.with_defaults(n_features)

    @property
    def _precomputed(self) -> bool:
        return isinstance(self.kernel, str) and self.kernel == "precomputed"

    def fit(self, X: ArrayLike, y: Any = None) -> KernelPCA:
        """Fit the model on ``X`` (``n_samples × n_features``).

        Parameters
        ----------
        X : array-like, scipy.sparse matrix, dask array, xarray.DataArray, or a Zarr path or URL
            Sparse data (CSR, CSC, or a dask array of sparse blocks) is never densified whole:
            each kernel tile is a sparse product. With ``kernel="precomputed"``, the
            ``n × n`` training kernel matrix. A CuPy array fits on the GPU, as
            ``dkpca.device = "cuda"`` does (see the GPU guide); the model keeps a host copy.
        y : ignored

        Returns
        -------
        self : KernelPCA

        Raises
        ------
        ValueError
            Invalid parameters or data; ``numpy.linalg.LinAlgError`` (a ``ValueError``) when
            the learned pre-image's ridge system is singular (raise ``alpha``). A fit that
            raises leaves the model unfitted: no fitted attributes from it or an earlier fit.
        """
        if is_device_array(X):  # CuPy input: computed on the GPU, kept on the host
            with dask.config.set({"dkpca.device": "cuda"}):
                return self.fit(to_host(X), y)
        self._validate_params()
        clear_fitted(self)  # nothing from an earlier fit with other parameters
        # a fit that raises leaves the model unfitted; its in-memory rows go to a cluster once
        with _all_or_nothing(self), inputs_sent_once():
            self._fit(X)
        return self

    def _fit(self, X: ArrayLike) -> None:
        """Fit on ``X`` after the parameters were checked (see :meth:`fit`)."""
        check_feature_names(self, X, reset=True)
        if self._precomputed and self.fit_inverse_transform:
            raise ValueError("KernelPCA: Cannot fit_inverse_transform with a precomputed "
                             "kernel: pre-images need an input space.")
        data = training_data(X, precomputed=self._precomputed, copy_X=self.copy_X,
                             owner="KernelPCA")
        Xd = as_dask(data, check_finite=False, accept_sparse=True)
        check_samples(Xd, "KernelPCA")
        n, d = Xd.shape
        check_n_components(self.n_components, n, "KernelPCA")
        rule = self._component_rule()
        kernel = PrecomputedKernel(n) if self._precomputed else self._resolve_kernel(d)
        block_bytes = parse_size(self.block_size, "block_size", "KernelPCA")
        solver, cache_memory = self._solver_for(n, Xd.dtype.itemsize)
        logger.info("KernelPCA: %s solver on %d x %d, kernel %r", solver, n, d, kernel)
        run = run_solver(
            solver_options(self.solver, solver), kernel, Xd, rule,
            random_state=self.random_state, block_bytes=block_bytes,
            cache_memory=cache_memory, basis_data=data, lazy=is_lazy(X), owner="KernelPCA",
        )
        self._set_fitted(run, kernel, solver, d)

    def _validate_params(self) -> None:
        """Check every parameter, and those of the solver and pre-image options objects."""
        validate_params(self.get_params(deep=False), self._parameter_constraints, "KernelPCA")
        for options in (self.solver, self.preimage):
            if isinstance(options, SolverOptions):
                options.validated("KernelPCA")

    def _solver_for(self, n: int, itemsize: int) -> tuple[str, int | None]:
        """Return the solver a fit on ``n`` samples runs, and the memory its kernel cache may take.

        The cache's memory is ``None`` when ``max_memory="auto"``: the cluster is asked then,
        only if the randomized solver runs.
        """
        if self.max_memory == "auto":
            max_memory, cache_memory = int(psutil.virtual_memory().available // 2), None
        else:
            max_memory = cache_memory = parse_size(self.max_memory, "max_memory", "KernelPCA")
        solver = resolve_solver(solver_name(self.solver), self.n_components, n,
                                self._component_rule(), kernel_fits=n * n * itemsize <= max_memory,
                                max_memory=self.max_memory, owner="KernelPCA")
        return solver, cache_memory

    def _component_rule(self) -> ComponentRule:
        return ComponentRule.from_params(self.n_components, self.min_relative_eigenvalue,
                                         self.remove_zero_eig or self.n_components is None)

    def _incremental(self) -> None:
        """Raise AttributeError, saying why, where ``partial_fit`` does not exist.

        Only the solvers that sum over rows once their landmarks are fixed have it, so that
        ``hasattr(model, "partial_fit")`` (what scikit-learn and dask-ml test) is true exactly
        when a call can work, and a call otherwise names the solvers that can.
        """
        solver = solver_name(self.solver)
        if solver not in INCREMENTAL_SOLVERS:
            raise AttributeError(
                f"KernelPCA: partial_fit needs solver='nystrom' or 'fixed_size', which sum over "
                f"rows once their landmarks are fixed; solver={solver!r} needs every row "
                f"at once.")
        if isinstance(self.solver, Nystrom) and self.solver.method != "feature_map":
            raise AttributeError(
                "KernelPCA: partial_fit needs Nystrom(method='feature_map'); the "
                "eigen-extension is centred on the landmarks and keeps no row statistics.")
        if self._precomputed:
            raise AttributeError(
                "KernelPCA: partial_fit cannot take a precomputed kernel: a new batch's kernel "
                "rows against the landmarks are not defined by it.")

    @available_when(_incremental)
    def partial_fit(self, X: ArrayLike, y: Any = None) -> KernelPCA:
        """Add a batch of rows: the model becomes the fit on every row seen so far.

        For the solvers that are a sum over rows once their landmarks are fixed:
        ``solver="nystrom"`` (feature map, any ``sampling``) and ``"fixed_size"``. The first
        call on an unfitted model fixes the landmarks: ``Nystrom(landmarks=...)``, or chosen in
        this first batch as :meth:`fit` would choose them among all rows (so the first batch
        should hold at least ``n_landmarks`` rows and represent the data; see the guide on
        how much that choice costs). Each call then adds the batch's statistics of
        ``k(x, L)`` (:attr:`row_statistics_`), and the model equals :meth:`fit` with the same
        landmarks on all the rows seen, to rounding: about 1e-13 for float64 data. float32
        data is evaluated in float32 kernel strips (summed in float64), which round otherwise
        when the rows are batched or chunked otherwise; the difference is then a float32
        fit's own error against float64: eigenvalues within about 1e-6 of the largest (each
        within about 1e-5 of itself), scores within a few 1e-5 of their largest. A model
        fitted by :meth:`fit` with these solvers, or loaded with :func:`dkpca.load`, continues
        from its rows.

        Once started, the kernel (``kernel``, ``gamma``, ``sigma2``, ``degree``, ``coef0``,
        ``kernel_params``), the solver and the landmarks (``landmarks``, ``n_landmarks``) are
        those of the statistics: a later call with other values raises ``ValueError``
        (call :meth:`fit`, or start a new model). The options that choose the landmarks
        (``sampling``, ``selection``, ``entropy_gamma``, ``tol``, ``max_iter``,
        ``random_state``) act on the first call only. ``n_components``,
        ``min_relative_eigenvalue``, ``remove_zero_eig`` and the pre-image parameters apply
        anew at every call: the statistics hold all that the components need.

        ``transform`` works between calls; ``eigenvectors_`` is not kept (the rows are not).
        Each call costs one pass over the batch (``O(r m d + r m²)``) and an
        ``m × m`` eigenproblem; a dask array or Zarr path is read chunk by chunk.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix, dask array, xarray.DataArray or Zarr path
            The new rows ``(n_batch, n_features)``.
        y : ignored

        Returns
        -------
        self : KernelPCA

        Raises
        ------
        AttributeError
            The method does not exist for another solver (exact, randomized, sketch and icf
            need every row at once), the Nyström eigen-extension or a precomputed kernel;
            the message says which solvers have it.
        ValueError
            A model without statistics, a batch with another number of features, or
            parameters that changed the kernel, the solver or the landmarks since the first
            call. A call that raises leaves the model as it was before the call.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).normal(size=(300, 3))
        >>> from dkpca.options import Nystrom
        >>> kp = KernelPCA(2, solver=Nystrom(landmarks=X[:40]))
        >>> for batch in np.array_split(X, 3):
        ...     kp = kp.partial_fit(batch)
        >>> whole = KernelPCA(2, solver=Nystrom(landmarks=X[:40])).fit(X)
        >>> kp.n_samples_seen_, bool(np.allclose(kp.eigenvalues_, whole.eigenvalues_))
        (300, True)
        """
        self._validate_params()
        # a call that raises leaves the model as it was; its rows go to a cluster once
        with _all_or_nothing(self), inputs_sent_once():
            self._partial_fit(X)
        return self

    def _partial_fit(self, X: ArrayLike) -> None:
        """Add the batch ``X`` after the parameters were checked (see :meth:`partial_fit`)."""
        fitted = hasattr(self, "basis_")
        check_feature_names(self, X, reset=not fitted)
        Xd = as_dask(as_array(X, accept_sparse=True), check_finite=False, accept_sparse=True)
        if fitted:
            require_known_rows(Xd, owner="KernelPCA")
            check_features(Xd, self.n_features_in_, "KernelPCA")
            kernel, n_seen = self.kernel_, self.n_samples_seen_
            if getattr(self, "row_statistics_", None) is None:
                raise ValueError(
                    f"KernelPCA: this model keeps no row statistics to continue from (fitted "
                    f"by solver={self.solver_!r} other than the Nyström feature map, or saved "
                    f"in model format 2); fit it again with solver='nystrom' or 'fixed_size', "
                    f"or start a new model with partial_fit.")
            self._check_continues(kernel)
        else:
            check_samples(Xd, "KernelPCA")
            kernel, n_seen = self._resolve_kernel(Xd.shape[1]), 0
        check_n_components(self.n_components, n_seen + Xd.shape[0], "KernelPCA")
        block_bytes = parse_size(self.block_size, "block_size", "KernelPCA")
        solver = solver_name(self.solver)
        run = continue_landmarks(
            solver_options(self.solver, solver), kernel, Xd, self._component_rule(),
            fitted=self.basis_ if fitted else None,
            previous=self.row_statistics_ if fitted else None,
            random_state=self.random_state, block_bytes=block_bytes, owner="KernelPCA")
        self._set_fitted(run, kernel, solver, Xd.shape[1])

    def _check_continues(self, kernel: Kernel) -> None:
        """Refuse parameters that no longer give the fitted kernel, solver or landmarks.

        The row statistics are sums of ``kernel_(x, landmarks_)`` and the fit is the
        ``solver_``'s: a batch fitted otherwise would be merged into them as if it were not
        (scikit-learn's ``IncrementalPCA`` refuses a changed ``n_components`` the same way).
        """
        fix = ("; call fit() to start again with the new parameters, or start a new model "
               "with partial_fit (set_params back to continue this one).")
        resolved = self._resolve_kernel(self.n_features_in_)
        if resolved != kernel:
            raise ValueError(
                f"KernelPCA: partial_fit continues a fit with kernel_={kernel!r}, but the "
                f"parameters (kernel, gamma, sigma2, degree, coef0, kernel_params) now give "
                f"{resolved!r}; the row statistics hold the fitted kernel's values{fix}")
        solver = solver_name(self.solver)
        if solver != self.solver_:
            raise ValueError(
                f"KernelPCA: partial_fit continues a fit by solver_={self.solver_!r}, but "
                f"solver={self.solver!r} now names {solver!r}{fix}")
        options = solver_options(self.solver, solver)
        fitted = self.basis_.basis
        given = getattr(options, "landmarks", None)
        if given is not None:
            if isinstance(fitted, da.Array):  # a model loaded lazily: m x d, small
                (fitted,) = dask.compute(fitted)
            landmarks = as_landmarks(given, fitted.dtype)
            if scipy.sparse.issparse(landmarks) or scipy.sparse.issparse(fitted):
                same = landmarks.shape == fitted.shape and (
                    scipy.sparse.csr_matrix(landmarks) != scipy.sparse.csr_matrix(fitted)).nnz == 0
            else:
                same = np.array_equal(landmarks, fitted)
            if not same:
                raise ValueError(
                    f"KernelPCA: partial_fit continues a fit on its landmarks_ "
                    f"{fitted.shape}, but solver={type(options).__name__}(landmarks=...) now "
                    f"gives other points {landmarks.shape}{fix}")
        elif options.n_landmarks is not None and options.n_landmarks != fitted.shape[0]:
            raise ValueError(
                f"KernelPCA: partial_fit continues a fit on {fitted.shape[0]} landmarks, but "
                f"solver={self.solver!r} now asks for n_landmarks={options.n_landmarks}{fix}")

    def _set_fitted(self, run: SolverRun, kernel: Kernel, solver: str, d: int) -> None:
        """Set the fitted attributes from a solver run (``fit`` or ``partial_fit``)."""
        basis = run.basis
        n = basis.n_samples
        self.basis_ = basis
        self.row_statistics_ = run.statistics
        self.kernel_ = kernel
        self.gamma_ = getattr(kernel, "gamma", None)
        self.solver_ = solver
        self.n_iter_ = run.n_iter
        for name, trace in run.traces.items():  # entropy_trace_, residual_trace_
            setattr(self, name, trace)
        self.eigenvalues_ = basis.eigenvalues
        if run.vectors is None:  # partial_fit keeps no rows: an older fit's must not linger
            self.__dict__.pop("eigenvectors_", None)
        else:
            self.eigenvectors_ = run.vectors
        self.explained_variance_ = basis.eigenvalues / n
        total = basis.total_variance  # 0 for constant data: no variance to share
        warn_if_no_variance(bool(np.any(basis.eigenvalues > 0)), "KernelPCA",
                            " in the kernel's feature space")
        self.explained_variance_ratio_ = basis.eigenvalues / total if total > 0 else \
            np.zeros_like(basis.eigenvalues)
        self.n_components_ = basis.n_components
        self.n_samples_seen_ = n
        self.n_features_in_ = n if self._precomputed else d
        self._n_features_out = basis.n_components
        self._fit_preimage(np.random.default_rng(check_random_state(self.random_state)))

    def transform(self, X: ArrayLike) -> np.ndarray | da.Array:
        """Project ``X`` on the components.

        Dask (or dask-backed xarray) input gives a lazy dask array chunked like ``X``'s rows;
        a CuPy array gives a CuPy array; anything else is computed and returned as numpy. The
        kernel evaluations run on the GPU with CuPy input or ``dkpca.device = "cuda"`` (see
        :func:`dkpca.blocked.kernel_product`).

        Returns
        -------
        scores : (n_samples, n_components) array
        """
        check_is_fitted(self, "basis_")
        check_feature_names(self, X, reset=False)
        if is_device_array(X):  # CuPy input implies the GPU, as in fit
            with dask.config.set({"dkpca.device": "cuda"}):
                return array_module(X).asarray(self.transform(to_host(X)))
        Xd = as_dask(X, accept_sparse=True)
        check_features(Xd, self.n_features_in_, "KernelPCA")
        return like_input(self.basis_.transform(Xd), X)

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags: sparse input is accepted; a precomputed kernel is pairwise."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = self._precomputed
        return tags

    def fit_transform(self, X: ArrayLike, y: Any = None) -> np.ndarray | da.Array:
        """Fit and return the training scores ``eigenvectors_ * sqrt(eigenvalues_)``.

        No second pass over the data: the training scores follow from the eigenvectors. They
        come in :meth:`transform`'s dtype (float32 for float32 data, as in scikit-learn).
        """
        self.fit(X)
        Xd = as_dask(X, accept_sparse=True)
        dtype = np.result_type(Xd.dtype, np.float32)
        scores = (self.eigenvectors_ * np.sqrt(self.eigenvalues_)).astype(dtype, copy=False)
        if isinstance(scores, da.Array):  # Nyström on lazy input: already lazy
            return scores
        if is_lazy(X):
            return view_blocks(scores, (Xd.chunks[0], -1))
        return scores


# inspect (help, IDEs) and Sphinx read a class's __new__ before its __init__: show __init__'s
# parameters, not the (*args, **kwargs) of the __new__ that refuses the flat ones.
_init = inspect.signature(KernelPCA.__init__)
KernelPCA.__signature__ = _init.replace(parameters=list(_init.parameters.values())[1:])
del _init
