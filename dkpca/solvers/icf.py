"""Pivoted incomplete Cholesky factorisation of the kernel matrix (MDD paper §V-2).

``K ≈ G Gᵀ`` with ``G`` (``n × Q``) built greedily: the next pivot is the point with the largest
residual diagonal ``d(x) = k(x, x) - ‖g(x)‖²``, and the factorisation stops when the residual's
trace ``Σ d(x)`` falls below ``η`` or after ``Q`` pivots. With pivots ``P`` and ``K_PP = L Lᵀ``
(``L = G[P]``, lower triangular), every row is ``g(x) = L⁻¹ k(P, x)``, so ``G`` is never stored:
a pass over the data recomputes the residuals from the pivots, and the factorisation is the
Nyström approximation with the pivots as landmarks (``G Gᵀ = K(X, P) K_PP⁻¹ K(P, X)``).

Several pivots per pass, with the result of one-at-a-time greedy pivoting: a pass returns the
``b`` points of largest residual (the pool) and the largest residual outside it. Residuals only
fall, so while the pool's best updated residual still beats that outside value, it is the
global choice; the pool's residuals are updated exactly on the driver. The trace is exact at
the start of each pass; inside a pass the pool's decrease gives an upper bound, which is what
is compared with ``η``.

Kernel PCA then follows eqs. (16)–(19): with ``G = U Λ Vᵀ``, the centred kernel
``M_c U Λ² Uᵀ M_c`` has the eigenvalues of ``Λ Uᵀ M_c U Λ = Vᵀ Gᵀ M_c G V``, i.e. of the
``Q × Q`` scatter of the rows ``g(x)``; this is the Nyström solver's feature PCA with the feature
map ``k(x, P) L⁻ᵀ`` (one more pass). Its eigenvectors are ``α = M_c U Λ² ρ / λ``, which the
paper writes ``U ρ`` (exact when ``1 ∈ range(U)``: the centring matrix ``M_c`` then maps
``range(U)`` into itself).
"""

from __future__ import annotations

import functools
import heapq
import logging
from dataclasses import dataclass, field

import dask
import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse

from dkpca._scattered import shared
from dkpca.blocked import compute, tree_reduce
from dkpca.kernels import Kernel

from ._feature_map import feature_map_rcond

__all__ = ["IncompleteCholesky", "incomplete_cholesky"]

logger = logging.getLogger(__name__)

#: Pivots stop when the largest residual falls below this fraction of the largest k(x, x):
#: beyond it the kernel is numerically of lower rank and new columns would be rounding noise.
#: For float32 data the floor is :func:`~dkpca.solvers.nystrom.feature_map_rcond` (1.2e-6):
#: the kernel's own rounding, which ``L⁻ᵀ`` would otherwise blow up into spurious leading
#: components (300 float32 points, ``tol=1e-6``: a first eigenvalue of 232 against 30.0).
RESIDUAL_FLOOR = 1e-10

#: A residual ``k(x, x) - ‖g(x)‖²`` below minus this fraction of the largest ``k(x, x)`` is
#: no rounding error (float32 data reach about 2e-6): the kernel matrix is not positive
#: semi-definite on the data (sigmoid kernels reach -1.8, a polynomial with ``coef0 = -1``
#: -0.04), and a Cholesky factorisation of it is meaningless.
INDEFINITE_RESIDUAL = 1e-3

#: Points of largest residual that every pass returns (the pool the next pivots come from).
POOL_SIZE = 256


@dataclass
class IncompleteCholesky:
    """Pivots and factor of :func:`incomplete_cholesky`.

    Attributes
    ----------
    kernel : Kernel
    pivots : (Q, d) array
        The pivot rows, in the order they were chosen.
    index : (Q,) array
        Their rows in ``X``.
    factor : (Q, Q) array
        ``L``, lower triangular with ``K_PP = L Lᵀ``; ``g(x) = L⁻¹ k(P, x)``.
    trace_history : list of float
        The residual trace at the start of every pass (exact), then the bound it stopped on
        when that came inside a pass.
    n_passes : int
        Passes over the data.
    stopped_by : {"max_rank", "tol", "rank"}
        Why pivoting stopped: ``max_rank`` pivots, a residual trace below ``tol``, or the
        kernel's numerical rank (every residual at the rounding floor, or a residual trace
        no larger than ``n`` times it), beyond which further components are zero.
    """

    kernel: Kernel
    pivots: np.ndarray
    index: np.ndarray
    factor: np.ndarray
    trace_history: list[float] = field(default_factory=list)
    n_passes: int = 0
    stopped_by: str = "max_rank"

    @property
    def rank(self) -> int:
        """Number of pivots ``Q``."""
        return len(self.index)

    def rows(self, X: np.ndarray) -> np.ndarray:
        """``G``'s rows for the points ``X``: ``(L⁻¹ k(P, X))ᵀ``, in float64."""
        if self.rank == 0:
            return np.zeros((X.shape[0], 0))
        K = self.kernel.pairwise(self.pivots, X).astype(np.float64)
        return scipy.linalg.solve_triangular(self.factor, K, lower=True, check_finite=False).T

    def add_pivot(self, row: np.ndarray, index: int, g_row: np.ndarray, diagonal: float) -> None:
        """Append a pivot whose row of ``G`` is ``[g_row, diagonal]``."""
        q = self.rank
        L = np.zeros((q + 1, q + 1))
        L[:q, :q] = self.factor
        L[q, :q], L[q, q] = g_row, diagonal
        self.factor = L
        self.pivots = np.vstack([self.pivots, row[None, :]])
        self.index = np.append(self.index, index)


def _pool_of_block(block: np.ndarray, start: int, factor: IncompleteCholesky,
                   size: int) -> tuple[float, list, float]:
    """Residual trace of one row chunk, its ``size`` largest residuals and its smallest.

    Entries are ``(residual, -row, x)``, ordered like ``argmax`` on the whole residual vector:
    by residual, then lower row first. The smallest residual is before clipping at zero: far
    below zero, it shows an indefinite kernel.
    """
    residual = factor.kernel.diag(block).astype(np.float64)
    residual -= (factor.rows(block) ** 2).sum(axis=1)
    lowest = float(residual.min()) if residual.size else 0.0
    np.maximum(residual, 0.0, out=residual)
    top = np.argsort(-residual, kind="stable")[:size]
    rows = block[top]  # a copy: views would keep every chunk alive through the reduction
    if scipy.sparse.issparse(rows):  # candidate pivots: a few rows, dense
        rows = rows.toarray()
    return float(residual.sum()), [(float(residual[i]), -(start + i), row)
                                   for i, row in zip(top, rows, strict=True)], lowest


def _merge_pools(size: int, *parts: tuple[float, list, float]) -> tuple[float, list, float]:
    merged = heapq.nlargest(size, (e for _, entries, _ in parts for e in entries),
                            key=lambda e: e[:2])
    return (sum(trace for trace, _, _ in parts), merged,
            min(lowest for _, _, lowest in parts))


def _scan(X: da.Array, factor: IncompleteCholesky, size: int) -> tuple[float, list, float]:
    """One pass: the exact residual trace, the ``size`` largest residuals (sorted), the least."""
    X = X.rechunk({1: -1})
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]])
    pivots = shared(factor)  # one key, not a copy in every task
    parts = [dask.delayed(_pool_of_block)(b, int(s), pivots, size)
             for b, s in zip(X.to_delayed().ravel(), starts, strict=True)]
    (result,) = compute(tree_reduce(parts, functools.partial(_merge_pools, size)))
    return result


def incomplete_cholesky(
    kernel: Kernel,
    X: da.Array,
    *,
    tol: float | None = None,
    max_rank: int,
    pool_size: int = POOL_SIZE,
    owner: str = "KernelPCA",
) -> IncompleteCholesky:
    """Pivoted incomplete Cholesky ``K ≈ G Gᵀ`` of the kernel matrix of ``X``.

    Parameters
    ----------
    kernel : Kernel
        Positive semi-definite: a residual ``k(x, x) - ‖g(x)‖²`` clearly below zero (below
        :data:`INDEFINITE_RESIDUAL` times the largest ``k(x, x)``) shows that it is not on
        these data, and raises ``ValueError``.
    X : dask array, (n, d)
    tol : float, optional
        ``η``: stop once the residual trace ``tr(K - G Gᵀ)`` is below it. ``None``: ``1e-3``
        times ``tr(K)``.
    max_rank : int
        ``Q``, the most pivots.
    pool_size : int, default=256
        Candidates every pass returns; more means fewer passes but more rows gathered.
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Returns
    -------
    IncompleteCholesky

    Notes
    -----
    A pass costs ``O(n q d + n q²)`` for ``q`` current pivots; gathered per pass: the pool's
    ``b × d`` rows. Pivoting stops, whatever ``tol``, once the largest residual is below
    :data:`RESIDUAL_FLOOR` times the largest ``k(x, x)`` (float64) or
    :func:`~dkpca.solvers.nystrom.feature_map_rcond` times it (float32: 1.2e-6), the
    precision of the data's kernel values.

    References
    ----------
    S. Fine and K. Scheinberg, "Efficient SVM training using low-rank kernel
    representations", Journal of Machine Learning Research 2, 243–264, 2001.

    C. Varon, C. Alzate and J. A. K. Suykens, "Noise level estimation for model selection in
    kernel PCA denoising", IEEE Trans. Neural Networks and Learning Systems 26(11),
    2650–2663, 2015 (the "MDD paper").

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(300, 2))
    >>> icf = incomplete_cholesky(RBF(gamma=0.5), da.from_array(X, chunks=100), tol=1.0,
    ...                           max_rank=300)
    >>> G = icf.rows(X)
    >>> bool(np.trace(RBF(gamma=0.5).pairwise(X) - G @ G.T) < 1.0)
    True
    """
    n, d = X.shape
    factor = IncompleteCholesky(kernel, np.empty((0, d), dtype=X.dtype),
                                np.empty(0, dtype=np.int64), np.empty((0, 0)))
    max_rank = min(max_rank, n)
    floor = largest = None
    while factor.rank < max_rank:
        # One more than the pool: the largest residual outside it.
        trace, pool, lowest = _scan(X, factor, pool_size + 1)
        factor.n_passes += 1
        factor.trace_history.append(trace)
        if floor is None:  # the first pass: the residuals are the diagonal k(x, x)
            largest = pool[0][0]
            floor = max(RESIDUAL_FLOOR, feature_map_rcond(X.dtype)) * largest
            tol = 1e-3 * trace if tol is None else tol
        _check_definite(lowest, largest, kernel, owner)
        if trace < tol or pool[0][0] <= floor:
            factor.stopped_by = "rank" if pool[0][0] <= floor or trace <= n * floor else "tol"
            break
        outside = pool.pop() if len(pool) > pool_size else None
        added, bound = _pivots_from_pool(factor, pool, outside, trace, tol, max_rank, floor,
                                         largest, owner)
        logger.info("ICF pass %d: %d pivots (rank %d), residual trace %.4g -> at most %.4g",
                    factor.n_passes, added, factor.rank, trace, bound)
        if bound < tol:
            factor.trace_history.append(bound)
            factor.stopped_by = "rank" if bound <= n * floor else "tol"
            break
    return factor


def _check_definite(lowest: float, largest: float, kernel: Kernel, owner: str) -> None:
    """Raise ValueError when a residual is far below zero: the kernel is not PSD on the data.

    ``largest`` is the largest ``k(x, x)``, the scale of every residual.
    """
    if lowest >= -INDEFINITE_RESIDUAL * largest:
        return
    raise ValueError(
        f"{owner}: the kernel matrix of {kernel!r} is not positive semi-definite on these data "
        f"(an incomplete Cholesky residual k(x, x) - |g(x)|^2 of {lowest:.3g}, against a "
        f"largest k(x, x) of {largest:.3g}), so solver='icf' cannot factorise it; use "
        f"solver='exact', 'randomized' or Sketch(refine=True).")


def _pivots_from_pool(factor: IncompleteCholesky, pool: list, outside: tuple | None,
                      trace: float, tol: float, max_rank: int, floor: float, largest: float,
                      owner: str) -> tuple[int, float]:
    """Take greedy pivots from the pool while they are the global choice; update ``factor``.

    Returns the number of pivots added and the upper bound on the residual trace after them.
    """
    residual = np.array([e[0] for e in pool])
    order = np.array([e[1] for e in pool])  # -row: the tie rule
    rows = np.array([e[2] for e in pool])
    outside_key = outside[:2] if outside is not None else (-np.inf, 0)
    G = factor.rows(rows)  # (b, q)
    taken = np.zeros(len(pool), dtype=bool)
    added, bound = 0, trace
    while factor.rank < max_rank and bound >= tol:
        candidates = np.where(taken, -np.inf, residual)
        j = int(np.lexsort((-order, -candidates))[0])  # largest residual, then lowest row
        if candidates[j] <= floor or (added and (candidates[j], order[j]) <= outside_key):
            break
        column = factor.kernel.pairwise(rows, rows[j : j + 1])[:, 0].astype(np.float64)
        g = (column - G @ G[j]) / np.sqrt(residual[j])
        g[taken] = 0.0  # earlier pivots: zero in exact arithmetic
        g[j] = np.sqrt(residual[j])
        _check_definite(float(np.min(residual - g**2)), largest, factor.kernel, owner)
        factor.add_pivot(rows[j], -int(order[j]), G[j], g[j])
        decrease = np.minimum(g**2, residual)
        bound -= float(decrease.sum())
        residual -= decrease
        G = np.hstack([G, g[:, None]])
        taken[j] = True
        added += 1
    return added, bound
