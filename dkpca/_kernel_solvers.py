"""How :class:`~dkpca.KernelPCA`'s parameters become one solver run.

The estimator validates its input and parameters; this module picks the solver
(``solver="auto"``), checks what each solver can do with the kernel, and runs it, ending in a
:class:`~dkpca.solvers.KernelBasis` and the training eigenvectors.
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
from ._validation import check_random_state
from .blocked import compute
from .io import as_array, is_lazy
from .kernels import Kernel
from .linalg import FLOAT32_MIN_TOL
from .moments import RowStatistics
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

__all__ = [
    "EXACT_MAX_SAMPLES",
    "INCREMENTAL_SOLVERS",
    "RANDOMIZED_MAX_ITER",
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

#: Default pass budget of the randomized solver.
RANDOMIZED_MAX_ITER = 30

#: Solvers whose landmarks are training points chosen from the kernel alone.
_LANDMARK_SOLVERS = ("nystrom", "fixed_size", "icf")

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


def training_data(est: Any, X: Any) -> Any:
    """Return the validated training data the model keeps: its own copy under ``copy_X``.

    Lazy data stays a lazy reference; a precomputed kernel matrix becomes indexed rows.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> X = np.ones((3, 2))
    >>> copied, kept = (SimpleNamespace(kernel="rbf", copy_X=c) for c in (True, False))
    >>> training_data(copied, X) is X, training_data(kept, X) is X
    (False, True)
    """
    data = as_array(X, accept_sparse=True)
    if isinstance(est.kernel, str) and est.kernel == "precomputed":
        if est.fit_inverse_transform:
            raise ValueError("KernelPCA: Cannot fit_inverse_transform with a precomputed "
                             "kernel: pre-images need an input space.")
        return indexed_kernel_rows(data, "KernelPCA")  # a new array
    if not est.copy_X or is_lazy(X):
        return data
    source = X.data if hasattr(X, "dims") else X  # an in-memory DataArray's values
    if scipy.sparse.issparse(data):
        return data.copy() if data is source else data
    shares = isinstance(source, np.ndarray) and np.may_share_memory(data, source)
    return data.copy() if shares else data


def resolve_sketch_method(est: Any, kernel: Kernel) -> str:
    """Return ``est.sketch_method``, with ``"auto"`` resolved by the kernel's definiteness."""
    if est.sketch_method != "auto":
        return est.sketch_method
    return "nystrom" if kernel.positive_semidefinite else "covariance"


def resolve_cache_dtype(est: Any, data_dtype: np.dtype) -> np.dtype:
    """Return the randomized solver's tile precision for ``est.cache_dtype`` and ``est.tol``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> resolve_cache_dtype(SimpleNamespace(cache_dtype="auto", tol=1e-9), np.dtype("f8"))
    dtype('float64')
    """
    if est.cache_dtype != "auto":
        return np.dtype(est.cache_dtype)
    float32_enough = data_dtype == np.float32 or est.tol >= FLOAT32_MIN_TOL
    return np.dtype(np.float32 if float32_enough else np.float64)


def resolve_solver(est: Any, n: int, rule: ComponentRule, kernel_fits: bool) -> str:
    """Return the solver ``est.solver`` names, or the one ``"auto"`` picks.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> est = SimpleNamespace(solver="auto", n_components=5, max_memory="auto")
    >>> resolve_solver(est, 100_000, ComponentRule(count=5), kernel_fits=True)
    'randomized'
    """
    if est.solver != "auto":
        if est.solver == "exact" and not kernel_fits:
            raise ValueError(
                f"KernelPCA: solver='exact' needs the {n} x {n} kernel in memory, which "
                f"exceeds max_memory={est.max_memory!r}; use solver='randomized'."
            )
        if est.solver == "randomized" and est.n_components is None:
            raise ValueError(
                "KernelPCA: solver='randomized' needs n_components (an int or a variance "
                "fraction); n_components=None asks for every component."
            )
        return est.solver
    if est.n_components is None:
        if not kernel_fits:
            raise ValueError(
                f"KernelPCA: n_components=None asks for all components, which needs the "
                f"{n} x {n} kernel in memory (above max_memory={est.max_memory!r}); "
                f"set n_components."
            )
        return "exact"
    small = n <= EXACT_MAX_SAMPLES or (rule.count is not None and rule.count > n // 5)
    return "exact" if small and kernel_fits else "randomized"


def _check_rank(rule: ComponentRule, rank: int, name: str) -> None:
    if rule.count is not None and rule.count > rank:
        raise ValueError(
            f"KernelPCA: n_components={rule.count} exceeds {name}={rank}; a Nyström "
            f"approximation of rank {rank} yields at most {rank} components."
        )


def _check_input_space(est: Any, solver: str, kernel: Kernel) -> None:
    """Refuse what needs the input space when the kernel matrix was given instead."""
    if not isinstance(kernel, PrecomputedKernel):
        return
    if est.landmarks is not None:
        raise ValueError("KernelPCA: landmarks are points of the input space, which a "
                         "precomputed kernel does not have; choose them by sampling instead.")
    if solver == "fixed_size" or (solver == "nystrom" and est.sampling == "kmeans"):
        what = "solver='fixed_size'" if solver == "fixed_size" else "sampling='kmeans'"
        raise ValueError(
            f"KernelPCA: {what} chooses landmarks in the input space, which a precomputed "
            f"kernel does not have; use sampling='uniform', 'diagonal' or 'column_norm'."
        )


def _given_landmarks(est: Any, X: da.Array) -> np.ndarray | None:
    """``est.landmarks`` as an ``(m, d)`` array in ``X``'s dtype, checked; ``None`` if not given."""
    if est.landmarks is None:
        return None
    landmarks = as_landmarks(est.landmarks, X.dtype)
    if landmarks.ndim != 2 or landmarks.shape[1] != X.shape[1] or landmarks.shape[0] < 1:
        raise ValueError(
            f"KernelPCA: landmarks must be an (m, {X.shape[1]}) array of points in X's space, "
            f"got shape {landmarks.shape}.")
    if not scipy.sparse.issparse(landmarks) and not np.isfinite(landmarks).all():
        raise ValueError("KernelPCA: landmarks contain NaN or infinity.")
    return landmarks


def choose_landmarks(
    est: Any, solver: str, kernel: Kernel, X: da.Array, rule: ComponentRule, block_bytes: int
) -> tuple[Any, int, dict[str, np.ndarray]]:
    """Return the nystrom or fixed-size solver's landmarks (given, or chosen in ``X``).

    With them, the fit's passes (``n_iter_``: the fixed-size selection's iterations, else 1)
    and its traces (the fixed-size selection's ``entropy_trace_``).
    """
    given = _given_landmarks(est, X)
    if given is not None:
        _check_rank(rule, given.shape[0], "the number of landmarks")
        return given, 1, {}
    n = X.shape[0]
    rng = np.random.default_rng(check_random_state(est.random_state))
    m = est.n_landmarks if est.n_landmarks is not None else min(n, 1000)
    if m > n:
        raise ValueError(f"KernelPCA: n_landmarks={m} exceeds the {n} samples.")
    _check_rank(rule, m, "n_landmarks")
    if solver == "fixed_size":
        result = select_fixed_size(X, m, est.selection, rng=rng, gamma=est.entropy_gamma,
                                   tol=est.tol, max_iter=est.max_iter or 20)
        traces = {"entropy_trace_": result.entropy_trace}
        return result.landmarks, len(result.entropy_trace), traces
    landmarks = select_landmarks(kernel, X, m, est.sampling, rng=rng, block_bytes=block_bytes)
    return landmarks, 1, {}


def _fit_landmarks(
    est: Any, solver: str, kernel: Kernel, X: da.Array, rule: ComponentRule, block_bytes: int
) -> tuple[KernelBasis, RowStatistics | None, int, dict[str, np.ndarray]]:
    """Nyström kernel PCA on landmarks chosen by ``solver``; statistics, passes, traces."""
    if solver == "icf":
        if est.landmarks is not None:
            raise ValueError("KernelPCA: landmarks apply to the nystrom and fixed_size solvers; "
                             "icf chooses its pivots from the kernel.")
        n = X.shape[0]
        rank = est.max_rank if est.max_rank is not None else min(n, 1000)
        icf = incomplete_cholesky(kernel, X, tol=est.icf_tol, max_rank=rank)
        _check_rank(rule, icf.rank, "the ICF rank")
        R = scipy.linalg.solve_triangular(icf.factor, np.eye(icf.rank), lower=True).T
        basis, _ = fit_nystrom(kernel, X, icf.pivots, rule, block_bytes=block_bytes,
                               feature_map=R)
        return basis, None, icf.n_passes + 1, {"residual_trace_": np.array(icf.trace_history)}
    landmarks, passes, traces = choose_landmarks(est, solver, kernel, X, rule, block_bytes)
    method = est.nystrom_method if solver == "nystrom" else "feature_map"
    basis, statistics = fit_nystrom(kernel, X, landmarks, rule, block_bytes=block_bytes,
                                    method=method)
    return basis, statistics, passes, traces


def continue_landmarks(
    est: Any, kernel: Kernel, X: da.Array, rule: ComponentRule, block_bytes: int
) -> SolverRun:
    """One ``partial_fit`` call of the nystrom or fixed-size solver on the batch ``X``.

    The first call (``est`` not fitted) fixes the landmarks (given, or chosen in this batch);
    later calls keep the fitted ones and merge this batch's statistics into the model's.
    """
    fitted = getattr(est, "basis_", None)
    if fitted is None:
        landmarks, passes, traces = choose_landmarks(est, est.solver, kernel, X, rule,
                                                     block_bytes)
        previous = None
    else:
        landmarks, passes, traces = fitted.basis, 1, {}
        previous = getattr(est, "row_statistics_", None)
        if previous is None:
            raise ValueError(
                f"KernelPCA: this model keeps no row statistics to continue from (fitted by "
                f"solver={est.solver_!r} with nystrom_method={est.nystrom_method!r}, or saved "
                f"in model format 2); fit it again with solver='nystrom' or 'fixed_size', or "
                f"start a new model with partial_fit.")
    _check_rank(rule, landmarks.shape[0], "the number of landmarks")
    K_LL = kernel.pairwise(landmarks).astype(np.float64)  # once: shift and feature map
    batch = landmark_statistics(kernel, X, landmarks, block_bytes=block_bytes,
                                landmark_kernel=K_LL)
    statistics = batch if previous is None else previous.merge(batch)
    basis = nystrom_basis(kernel, landmarks, statistics, rule, block_bytes=block_bytes,
                          landmark_kernel=K_LL)
    return SolverRun(basis, None, passes, statistics, traces)


def run_solver(
    est: Any,
    solver: str,
    kernel: Kernel,
    X: da.Array,
    rule: ComponentRule,
    *,
    block_bytes: int,
    cache_memory: int | None,
    basis_data: Any,
    lazy: bool,
) -> SolverRun:
    """Run ``solver`` for the estimator ``est`` on ``X`` (the validated training data).

    ``basis_data`` is what the model keeps as its basis for the full-kernel solvers (the
    training data, copied or not); ``lazy`` keeps Nyström's eigenvectors lazy;
    ``cache_memory`` caps the randomized solver's cached tiles (``None``: automatic).
    """
    _check_input_space(est, solver, kernel)
    if solver == "exact":
        basis, vectors = fit_exact(kernel, X, rule, block_bytes=block_bytes,
                                   basis_data=basis_data)
        return SolverRun(basis, vectors, 1)
    if solver == "sketch":
        basis, vectors = fit_sketch(
            kernel, X, rule, sketch=make_sketch(est, X.shape[0], rule, "KernelPCA"),
            block_bytes=block_bytes, method=resolve_sketch_method(est, kernel),
            refine=est.refine, basis_data=basis_data,
        )
        return SolverRun(basis, vectors, 2 if est.refine else 1)
    if solver in _LANDMARK_SOLVERS:
        basis, statistics, passes, traces = _fit_landmarks(est, solver, kernel, X, rule,
                                                           block_bytes)
        with np.errstate(divide="ignore", invalid="ignore"):  # zero columns stay zero
            scale = np.where(basis.eigenvalues > 0, 1 / np.sqrt(basis.eigenvalues), 0.0)
        vectors = basis.transform(X) * scale  # lazy: n x k
        if not lazy:
            (vectors,) = compute(vectors)
        return SolverRun(basis, vectors, passes, statistics, traces)
    basis, vectors, result = fit_randomized(
        kernel, X, rule, seed=check_random_state(est.random_state), block_bytes=block_bytes,
        max_memory=cache_memory, cache_dtype=resolve_cache_dtype(est, X.dtype),
        n_oversamples=est.n_oversamples, tol=est.tol,
        max_iter=est.max_iter or RANDOMIZED_MAX_ITER, basis_data=basis_data,
    )
    return SolverRun(basis, vectors, result.n_passes)
