"""How :class:`~dkpca.KernelPCA`'s parameters become one solver run.

The estimator validates its input and parameters; this module picks the solver
(``solver="auto"``), checks what each solver can do with the kernel, and runs it, ending in a
:class:`~dkpca.solvers.KernelBasis` and the training eigenvectors.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
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
from .solvers import (
    ComponentRule,
    KernelBasis,
    fit_exact,
    fit_nystrom,
    fit_randomized,
    fit_sketch,
    incomplete_cholesky,
    select_fixed_size,
    select_landmarks,
)

__all__ = [
    "EXACT_MAX_SAMPLES",
    "FLOAT32_MIN_TOL",
    "RANDOMIZED_MAX_ITER",
    "SolverRun",
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

#: ``cache_dtype="auto"`` stores float32 tiles for tolerances at least this loose: float32
#: products are accurate to about 1e-7 of the first eigenvalue (see :mod:`dkpca.tiles`).
FLOAT32_MIN_TOL = 1e-6

#: Solvers whose landmarks are training points chosen from the kernel alone.
_LANDMARK_SOLVERS = ("nystrom", "fixed_size", "icf")


@dataclass
class SolverRun:
    """What a fit needs from the solver: the basis, eigenvectors and passes over the kernel."""

    basis: KernelBasis
    vectors: np.ndarray | da.Array
    n_iter: int


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
    if solver == "fixed_size" or (solver == "nystrom" and est.sampling == "kmeans"):
        what = "solver='fixed_size'" if solver == "fixed_size" else "sampling='kmeans'"
        raise ValueError(
            f"KernelPCA: {what} chooses landmarks in the input space, which a precomputed "
            f"kernel does not have; use sampling='uniform', 'diagonal' or 'column_norm'."
        )


def _fit_landmarks(
    est: Any, solver: str, kernel: Kernel, X: da.Array, rule: ComponentRule, block_bytes: int
) -> tuple[KernelBasis, int]:
    """Nyström kernel PCA on landmarks chosen by ``solver``; returns it and its passes."""
    n = X.shape[0]
    rng = np.random.default_rng(check_random_state(est.random_state))
    if solver == "icf":
        rank = est.max_rank if est.max_rank is not None else min(n, 1000)
        icf = incomplete_cholesky(kernel, X, tol=est.icf_tol, max_rank=rank)
        est.residual_trace_ = np.array(icf.trace_history)
        _check_rank(rule, icf.rank, "the ICF rank")
        R = scipy.linalg.solve_triangular(icf.factor, np.eye(icf.rank), lower=True).T
        basis = fit_nystrom(kernel, X, icf.pivots, rule, block_bytes=block_bytes, feature_map=R)
        return basis, icf.n_passes + 1
    m = est.n_landmarks if est.n_landmarks is not None else min(n, 1000)
    if m > n:
        raise ValueError(f"KernelPCA: n_landmarks={m} exceeds the {n} samples.")
    _check_rank(rule, m, "n_landmarks")
    if solver == "fixed_size":
        result = select_fixed_size(X, m, est.selection, rng=rng, gamma=est.entropy_gamma,
                                   tol=est.tol, max_iter=est.max_iter or 20)
        est.entropy_trace_ = result.entropy_trace
        landmarks, passes = result.landmarks, len(result.entropy_trace)
    else:
        landmarks = select_landmarks(kernel, X, m, est.sampling, rng=rng, block_bytes=block_bytes)
        passes = 1
    method = est.nystrom_method if solver == "nystrom" else "feature_map"
    basis = fit_nystrom(kernel, X, landmarks, rule, block_bytes=block_bytes, method=method)
    return basis, passes


def run_solver(
    est: Any,
    solver: str,
    kernel: Kernel,
    X: da.Array,
    rule: ComponentRule,
    *,
    block_bytes: int,
    cache_memory: int,
    basis_data: Any,
    lazy: bool,
) -> SolverRun:
    """Run ``solver`` for the estimator ``est`` on ``X`` (the validated training data).

    ``basis_data`` is what the model keeps as its basis for the full-kernel solvers (the
    training data, copied or not); ``lazy`` keeps Nyström's eigenvectors lazy.
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
        basis, passes = _fit_landmarks(est, solver, kernel, X, rule, block_bytes)
        with np.errstate(divide="ignore", invalid="ignore"):  # zero columns stay zero
            scale = np.where(basis.eigenvalues > 0, 1 / np.sqrt(basis.eigenvalues), 0.0)
        vectors = basis.transform(X) * scale  # lazy: n x k
        if not lazy:
            (vectors,) = compute(vectors)
        return SolverRun(basis, vectors, passes)
    basis, vectors, result = fit_randomized(
        kernel, X, rule, seed=check_random_state(est.random_state), block_bytes=block_bytes,
        max_memory=cache_memory, cache_dtype=resolve_cache_dtype(est, X.dtype),
        n_oversamples=est.n_oversamples, tol=est.tol,
        max_iter=est.max_iter or RANDOMIZED_MAX_ITER, basis_data=basis_data,
    )
    return SolverRun(basis, vectors, result.n_passes)
