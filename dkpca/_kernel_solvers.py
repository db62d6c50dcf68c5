"""How :class:`~dkpca.KernelPCA`'s parameters become one solver run: a layer of pure functions.

The estimator validates its input and parameters; this module picks the solver
(``solver="auto"``), checks what each solver can do with the kernel, and runs it with the
solver's options (:mod:`dkpca.options`), ending in a :class:`SolverRun`: the
:class:`~dkpca.solvers.KernelBasis`, the training eigenvectors, the passes and the traces. It
never reads or writes the estimator: messages name it through ``owner``, and the estimator
sets every fitted attribute from the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse

from ._estimator import make_sketch
from ._precomputed import PrecomputedKernel, indexed_kernel_rows
from ._typing import RandomStateLike
from ._validation import check_random_state
from .blocked import compute
from .io import as_array, is_lazy
from .kernels import CallableKernel, Kernel
from .linalg import FLOAT32_MIN_TOL
from .moments import RowStatistics
from .options import ICF, Exact, FixedSize, Nystrom, Randomized, Sketch, SolverOptions
from .solvers import (
    ComponentRule,
    KernelBasis,
    as_landmarks,
    fit_exact,
    fit_nystrom,
    fit_randomized,
    fit_sketch,
    incomplete_cholesky,
    landmark_statistics,
    nystrom_basis,
    select_fixed_size,
    select_landmarks,
)
from .solvers._components import warn_if_fraction_missed
from .solvers._feature_map import RCOND, feature_map_rcond

__all__ = [
    "EXACT_MAX_SAMPLES",
    "INCREMENTAL_SOLVERS",
    "SolverRun",
    "continue_landmarks",
    "resolve_cache_dtype",
    "resolve_sketch_method",
    "resolve_solver",
    "run_solver",
    "training_data",
]

logger = logging.getLogger(__name__)

#: Below this many samples ``solver="auto"`` always decomposes the kernel exactly.
EXACT_MAX_SAMPLES = 2000

#: Solvers that are a sum over rows once their landmarks are fixed: ``partial_fit`` continues them.
INCREMENTAL_SOLVERS = ("nystrom", "fixed_size")


@dataclass
class SolverRun:
    """What a fit needs from the solver: the basis, eigenvectors and passes over the kernel.

    ``statistics`` are what ``partial_fit`` continues from (Nyström and fixed-size with the
    feature map), ``None`` for the solvers that need every row at once; ``vectors`` is
    ``None`` after ``partial_fit``, which keeps no rows. ``traces`` are the solver's fitted
    traces by attribute name (``entropy_trace_``, ``residual_trace_``): the estimator sets
    them, the solver layer never writes into it.
    """

    basis: KernelBasis
    vectors: np.ndarray | da.Array | None
    n_iter: int
    statistics: RowStatistics | None = None
    traces: dict[str, np.ndarray] = field(default_factory=dict)


def training_data(X: Any, *, precomputed: bool, copy_X: bool, owner: str) -> Any:
    """Return the validated training data the model keeps: its own copy under ``copy_X``.

    Lazy data stays a lazy reference; a precomputed kernel matrix becomes indexed rows.

    Examples
    --------
    >>> X = np.ones((3, 2))
    >>> kept = [training_data(X, precomputed=False, copy_X=c, owner="KernelPCA") is X
    ...         for c in (True, False)]
    >>> kept
    [False, True]
    """
    data = as_array(X, accept_sparse=True)
    if precomputed:
        return indexed_kernel_rows(data, owner)  # a new array
    if not copy_X or is_lazy(X):
        return data
    source = X.data if hasattr(X, "dims") else X  # an in-memory DataArray's values
    if scipy.sparse.issparse(data):
        return data.copy() if data is source else data
    # Anything but a numpy array (a DataFrame, a list) may hand over its own memory too.
    shares = not isinstance(source, np.ndarray) or np.may_share_memory(data, source)
    return data.copy() if shares else data


def resolve_sketch_method(options: Sketch, kernel: Kernel) -> str:
    """Return ``options.method``, with ``"auto"`` resolved by the kernel's definiteness.

    Examples
    --------
    >>> from dkpca.kernels import Sigmoid
    >>> resolve_sketch_method(Sketch(), Sigmoid())
    'covariance'
    """
    if options.method != "auto":
        return options.method
    return "nystrom" if kernel.positive_semidefinite else "covariance"


def resolve_cache_dtype(options: Randomized, data_dtype: np.dtype) -> np.dtype:
    """Return the randomized solver's tile precision for its ``cache_dtype`` and ``tol``.

    Examples
    --------
    >>> resolve_cache_dtype(Randomized(tol=1e-9), np.dtype("f8"))
    dtype('float64')
    """
    if options.cache_dtype != "auto":
        return np.dtype(options.cache_dtype)
    float32_enough = data_dtype == np.float32 or options.tol >= FLOAT32_MIN_TOL
    return np.dtype(np.float32 if float32_enough else np.float64)


def resolve_solver(
    solver: str, n_components: Any, n: int, rule: ComponentRule, *, kernel_fits: bool,
    max_memory: Any, owner: str,
) -> str:
    """Return the solver ``solver`` names, or the one ``"auto"`` picks.

    ``max_memory`` is the estimator's parameter, named in the messages.

    Examples
    --------
    >>> resolve_solver("auto", 5, 100_000, ComponentRule(count=5), kernel_fits=True,
    ...                max_memory="auto", owner="KernelPCA")
    'randomized'
    """
    if solver != "auto":
        if solver == "exact" and not kernel_fits:
            raise ValueError(
                f"{owner}: solver='exact' needs the {n} x {n} kernel in memory, which "
                f"exceeds max_memory={max_memory!r}; use solver='randomized'."
            )
        if solver == "randomized" and n_components is None:
            raise ValueError(
                f"{owner}: solver='randomized' needs n_components (an int or a variance "
                "fraction); n_components=None asks for every component."
            )
        return solver
    if n_components is None:
        if not kernel_fits:
            raise ValueError(
                f"{owner}: n_components=None asks for all components, which needs the "
                f"{n} x {n} kernel in memory (above max_memory={max_memory!r}); "
                f"set n_components."
            )
        return "exact"
    small = n <= EXACT_MAX_SAMPLES or (rule.count is not None and rule.count > n // 5)
    return "exact" if small and kernel_fits else "randomized"


def _check_rank(rule: ComponentRule, rank: int, name: str, owner: str) -> None:
    if rule.count is not None and rule.count > rank:
        raise ValueError(
            f"{owner}: n_components={rule.count} exceeds {name}={rank}; a Nyström "
            f"approximation of rank {rank} yields at most {rank} components."
        )


def _warn_if_fraction_missed(
    basis: KernelBasis, rule: ComponentRule, solver: str, limit: str, owner: str
) -> None:
    """:func:`~dkpca.solvers._components.warn_if_fraction_missed` for a kernel solver's basis."""
    warn_if_fraction_missed(basis.eigenvalues, basis.total_variance, rule.fraction, owner=owner,
                            found=f"components the {solver} solver", limit=limit,
                            instead="'exact' or 'randomized'")


def _check_input_space(options: SolverOptions, kernel: Kernel, owner: str) -> None:
    """Refuse what needs the input space when the kernel matrix was given instead."""
    if not isinstance(kernel, PrecomputedKernel):
        return
    if isinstance(options, Nystrom) and options.landmarks is not None:
        raise ValueError(f"{owner}: landmarks are points of the input space, which a "
                         "precomputed kernel does not have; choose them by sampling instead.")
    kmeans = isinstance(options, Nystrom) and options.sampling == "kmeans"
    if isinstance(options, FixedSize) or kmeans:
        what = "sampling='kmeans'" if kmeans else "solver='fixed_size'"
        raise ValueError(
            f"{owner}: {what} chooses landmarks in the input space, which a precomputed "
            f"kernel does not have; use sampling='uniform', 'diagonal' or 'column_norm'."
        )


def _given_landmarks(options: SolverOptions, X: da.Array, owner: str) -> np.ndarray | None:
    """Return the Nyström options' landmarks as an ``(m, d)`` array in ``X``'s dtype, checked.

    ``None`` if none were given. The array is the model's own copy: changing the caller's
    array later cannot change ``transform`` or a continuing ``partial_fit``.
    """
    given = options.landmarks if isinstance(options, Nystrom) else None
    if given is None:
        return None
    landmarks = as_landmarks(given, X.dtype)  # sparse: astype copies
    if not scipy.sparse.issparse(landmarks) and np.may_share_memory(landmarks, given):
        landmarks = landmarks.copy()
    if landmarks.ndim != 2 or landmarks.shape[1] != X.shape[1] or landmarks.shape[0] < 1:
        raise ValueError(
            f"{owner}: landmarks must be an (m, {X.shape[1]}) array of points in X's space, "
            f"got shape {landmarks.shape}.")
    if not scipy.sparse.issparse(landmarks) and not np.isfinite(landmarks).all():
        raise ValueError(f"{owner}: landmarks contain NaN or infinity.")
    return landmarks


def choose_landmarks(
    options: Nystrom | FixedSize, kernel: Kernel, X: da.Array, rule: ComponentRule, *,
    random_state: RandomStateLike, block_bytes: int, owner: str,
) -> tuple[Any, int, dict[str, np.ndarray]]:
    """Return the nystrom or fixed-size solver's landmarks (given, or chosen in ``X``).

    With them, the fit's passes (``n_iter_``: the fixed-size selection's iterations, else 1)
    and its traces (the fixed-size selection's ``entropy_trace_``).
    """
    given = _given_landmarks(options, X, owner)
    if given is not None:
        _check_rank(rule, given.shape[0], "the number of landmarks", owner)
        return given, 1, {}
    n = X.shape[0]
    rng = np.random.default_rng(check_random_state(random_state))
    m = options.n_landmarks if options.n_landmarks is not None else min(n, 1000)
    if m > n:
        raise ValueError(f"{owner}: n_landmarks={m} exceeds the {n} samples.")
    _check_rank(rule, m, "n_landmarks", owner)
    if isinstance(options, FixedSize):
        result = select_fixed_size(X, m, options.selection, rng=rng,
                                   gamma=options.entropy_gamma, tol=options.tol,
                                   max_iter=options.max_iter, owner=owner)
        traces = {"entropy_trace_": result.entropy_trace}
        return result.landmarks, len(result.entropy_trace), traces
    landmarks = select_landmarks(kernel, X, m, options.sampling, rng=rng,
                                 block_bytes=block_bytes, owner=owner)
    return landmarks, 1, {}


def _check_icf_kernel(kernel: Kernel, owner: str) -> None:
    """Refuse a kernel not declared positive semi-definite: ICF is a Cholesky factorisation.

    A precomputed matrix or a function cannot declare it: their definiteness is checked on
    the data, by the factorisation's residuals (:func:`~dkpca.solvers.incomplete_cholesky`).
    """
    if kernel.positive_semidefinite or isinstance(kernel, PrecomputedKernel | CallableKernel):
        return
    raise ValueError(
        f"{owner}: solver='icf' factorises the kernel matrix as G G^T, which needs a positive "
        f"semi-definite kernel; {kernel!r} is not one (sigmoid, poly with coef0 < 0, "
        f"additive_chi2, or a Kernel subclass that does not declare positive_semidefinite = "
        f"True). Use solver='exact', 'randomized' or Sketch(refine=True).")


def _fit_icf(
    options: ICF, kernel: Kernel, X: da.Array, rule: ComponentRule, block_bytes: int, owner: str
) -> tuple[KernelBasis, int, dict[str, np.ndarray]]:
    """Nyström kernel PCA on the pivots of an incomplete Cholesky factorisation."""
    _check_icf_kernel(kernel, owner)
    n = X.shape[0]
    rank = options.max_rank if options.max_rank is not None else min(n, 1000)
    icf = incomplete_cholesky(kernel, X, tol=options.tol, max_rank=rank, owner=owner)
    if icf.rank == 0:  # the first pass stopped it: tol >= trace(K), or k(x, x) = 0 everywhere
        trace = icf.trace_history[0]
        if trace > 0:
            raise ValueError(
                f"{owner}: ICF(tol={options.tol!r}) is at least the kernel matrix's trace "
                f"({trace:.4g}), so the incomplete Cholesky factorisation needs no pivot and "
                f"gives no component; lower tol (None: 1e-3 of the trace).")
        raise ValueError(
            f"{owner}: the kernel's diagonal k(x, x) is 0 on every row (all-zero data for "
            f"{kernel!r}?), so the incomplete Cholesky factorisation has no pivot and gives no "
            f"component; check the input, or use solver='exact'.")
    # Stopped by max_rank or by tol, the factorisation truncates the kernel: a count above
    # its rank is refused. Stopped by the kernel's own (numerical) rank, the components
    # beyond it are zero columns, as for the other solvers.
    if icf.stopped_by == "max_rank":
        _check_rank(rule, icf.rank, "the ICF rank", owner)
    elif icf.stopped_by == "tol" and rule.count is not None and rule.count > icf.rank:
        tol = "None (1e-3 of the trace)" if options.tol is None else repr(options.tol)
        raise ValueError(
            f"{owner}: n_components={rule.count} exceeds the ICF rank={icf.rank} at which the "
            f"incomplete Cholesky factorisation met ICF(tol={tol}) (residual trace "
            f"{icf.trace_history[-1]:.4g}); lower tol, or ask for at most {icf.rank} "
            f"components.")
    R = None  # fit_nystrom's default: inverse_sqrt(K_PP) with the dtype's cut-off
    if feature_map_rcond(X.dtype) <= RCOND:
        # float64: the factor's L^-T (eqs. 16-19). float32 pivots are well chosen but K_PP's
        # smallest directions are rounding noise that L^-T magnifies into spurious leading
        # components (300 points, tol=1e-6: 32.2 before the true 29.97); the cut-off drops them.
        R = scipy.linalg.solve_triangular(icf.factor, np.eye(icf.rank), lower=True).T
    basis, _ = fit_nystrom(kernel, X, icf.pivots, rule, block_bytes=block_bytes, feature_map=R,
                           owner=owner)
    remedy = (f"ICF(max_rank={options.max_rank!r}) (rank {icf.rank})"
              if icf.stopped_by == "max_rank" else f"the ICF rank {icf.rank} (lower tol)")
    _warn_if_fraction_missed(basis, rule, "icf", remedy, owner)
    return basis, icf.n_passes + 1, {"residual_trace_": np.array(icf.trace_history)}


def continue_landmarks(
    options: Nystrom | FixedSize, kernel: Kernel, X: da.Array, rule: ComponentRule, *,
    fitted: KernelBasis | None, previous: RowStatistics | None, random_state: RandomStateLike,
    block_bytes: int, owner: str,
) -> SolverRun:
    """One ``partial_fit`` call of the nystrom or fixed-size solver on the batch ``X``.

    The first call (``fitted`` is ``None``) fixes the landmarks (given, or chosen in this
    batch); later calls keep the fitted basis's landmarks and merge this batch's statistics
    into ``previous``.
    """
    if fitted is None:
        landmarks, passes, traces = choose_landmarks(
            options, kernel, X, rule, random_state=random_state, block_bytes=block_bytes,
            owner=owner)
    else:
        landmarks, passes, traces = fitted.basis, 1, {}
    _check_rank(rule, landmarks.shape[0], "the number of landmarks", owner)
    K_LL = kernel.pairwise(landmarks).astype(np.float64)  # once: shift and feature map
    batch = landmark_statistics(kernel, X, landmarks, block_bytes=block_bytes,
                                landmark_kernel=K_LL, owner=owner)
    statistics = batch if previous is None else previous.merge(batch)
    basis = nystrom_basis(kernel, landmarks, statistics, rule, block_bytes=block_bytes,
                          landmark_kernel=K_LL, owner=owner)
    return SolverRun(basis, None, passes, statistics, traces)


def _landmark_run(
    options: SolverOptions, kernel: Kernel, X: da.Array, rule: ComponentRule, *,
    random_state: RandomStateLike, block_bytes: int, lazy: bool, owner: str,
) -> SolverRun:
    """Run a landmark solver (nystrom, fixed_size, icf); its eigenvectors are the scaled scores."""
    statistics = None
    if isinstance(options, ICF):
        basis, passes, traces = _fit_icf(options, kernel, X, rule, block_bytes, owner)
    else:
        landmarks, passes, traces = choose_landmarks(
            options, kernel, X, rule, random_state=random_state, block_bytes=block_bytes,
            owner=owner)
        method = options.method if isinstance(options, Nystrom) else "feature_map"
        basis, statistics = fit_nystrom(kernel, X, landmarks, rule, block_bytes=block_bytes,
                                        method=method, owner=owner)
        name = "nystrom" if isinstance(options, Nystrom) else "fixed_size"
        _warn_if_fraction_missed(basis, rule, name, f"n_landmarks={landmarks.shape[0]}", owner)
    with np.errstate(divide="ignore", invalid="ignore"):  # zero columns stay zero
        scale = np.where(basis.eigenvalues > 0, 1 / np.sqrt(basis.eigenvalues), 0.0)
    vectors = basis.transform(X) * scale  # lazy: n x k
    if not lazy:
        (vectors,) = compute(vectors)
    return SolverRun(basis, vectors, passes, statistics, traces)


def run_solver(
    options: SolverOptions,
    kernel: Kernel,
    X: da.Array,
    rule: ComponentRule,
    *,
    random_state: RandomStateLike,
    block_bytes: int,
    cache_memory: int | None,
    basis_data: Any,
    lazy: bool,
    owner: str,
) -> SolverRun:
    """Run the solver that ``options`` describe on ``X`` (the validated training data).

    ``basis_data`` is what the model keeps as its basis for the full-kernel solvers (the
    training data, copied or not); ``lazy`` keeps Nyström's eigenvectors lazy;
    ``cache_memory`` caps the randomized solver's cached tiles (``None``: automatic).

    Examples
    --------
    >>> from dkpca.kernels import RBF
    >>> X = da.from_array(np.random.default_rng(0).normal(size=(50, 3)))
    >>> run = run_solver(Exact(), RBF(gamma=0.5), X, ComponentRule(count=2), random_state=0,
    ...                  block_bytes=2**20, cache_memory=None, basis_data=X, lazy=False,
    ...                  owner="KernelPCA")
    >>> run.basis.n_components, run.vectors.shape, run.n_iter
    (2, (50, 2), 1)
    """
    _check_input_space(options, kernel, owner)
    if isinstance(options, Exact):
        basis, vectors = fit_exact(kernel, X, rule, block_bytes=block_bytes,
                                   basis_data=basis_data, owner=owner)
        return SolverRun(basis, vectors, 1)
    if isinstance(options, Sketch):
        try:
            sketch = make_sketch(options.kind, options.dim, options.n_hashes, random_state,
                                 n_max=X.shape[0], rule=rule, owner=owner, dim_name="Sketch dim")
        except ValueError as error:  # the sketch's own check (dim, n_hashes) names no owner
            if str(error).startswith(f"{owner}:"):
                raise
            raise ValueError(f"{owner}: Sketch(kind={options.kind!r}, dim={options.dim!r}, "
                             f"n_hashes={options.n_hashes!r}): {error}; choose a dim that "
                             f"n_hashes divides.") from None
        basis, vectors = fit_sketch(
            kernel, X, rule, sketch=sketch, block_bytes=block_bytes,
            method=resolve_sketch_method(options, kernel), refine=options.refine,
            basis_data=basis_data, owner=owner,
        )
        _warn_if_fraction_missed(basis, rule, "sketch", f"Sketch dim={sketch.sketch_dim}",
                                 owner)
        return SolverRun(basis, vectors, 2 if options.refine else 1)
    if isinstance(options, Nystrom | FixedSize | ICF):
        return _landmark_run(options, kernel, X, rule, random_state=random_state,
                             block_bytes=block_bytes, lazy=lazy, owner=owner)
    # Randomized: the estimator's constraints admit no other options class
    basis, vectors, result = fit_randomized(
        kernel, X, rule, seed=check_random_state(random_state), block_bytes=block_bytes,
        max_memory=cache_memory, cache_dtype=resolve_cache_dtype(options, X.dtype),
        n_oversamples=options.n_oversamples, tol=options.tol, max_iter=options.max_iter,
        basis_data=basis_data, owner=owner,
    )
    return SolverRun(basis, vectors, result.n_passes)
