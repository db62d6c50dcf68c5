"""Exact leave-one-out refits of exact kernel PCA and linear PCA, from one kernel matrix.

A refit of :class:`~dkpca.KernelPCA` on the ``N - 1`` points without ``x_n`` evaluates the
kernel of those points, centres it, solves its eigenproblem, then evaluates the kernel again to
project all ``N`` points. Both kernels are parts of the full ``N × N`` matrix: rows and columns
without ``n`` for the fit, the columns without ``n`` for the projection. When the refit would
use the exact solver (the default up to 2,000 points), the matrix is evaluated
once here and every fold works on it. The ``N`` refits cost ``N`` eigenproblems and no kernel
evaluation: in the LOO paper's setting (``N`` small, ``D`` large) the kernel is most of a
refit. The folds' eigenproblems are solved together, a stack of folds at a time, by block
Krylov iteration started from the full kernel's eigenvectors (:func:`_krylov_folds`), and
their components come from the exact solver's own steps
(:func:`~dkpca.solvers._common.eigenpair_components`; where the iteration does not apply or
stalls, :func:`~dkpca.solvers.exact.centred_top_eigh`).

Linear PCA's exact refits are the same folds of its Gram matrix ``X Xᵀ``, the linear
kernel: a kernel PCA score there is the PCA score ``(x - mean) · v`` of the same fold (whitened
as PCA whitens when it does).

The numbers are those of refitting, to a relative eigenpair residual of :data:`FOLD_TOL`: the
same kernel (resolved from the estimator's parameters as a refit resolves it), the same
centring and component rule; the kernel's entries may differ in their last bits (one
evaluation against one per refit).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np

from dkpca._device import aligned_operand
from dkpca._estimator import parse_size
from dkpca._precomputed import PrecomputedKernel, indexed_kernel_rows
from dkpca.blocked import DEFAULT_BLOCK_BYTES, center_kernel_inplace, gather_kernel
from dkpca.kernels import Kernel, Linear
from dkpca.linalg import DEPENDENT_GRAM, flip_signs, top_eigh
from dkpca.solvers import ComponentRule
from dkpca.solvers._common import check_finite_kernel, eigenpair_components
from dkpca.solvers._components import ZERO_RATIO
from dkpca.solvers.exact import centred_top_eigh

__all__ = ["KernelFolds", "kernel_folds"]

#: Linear PCA's solvers whose refits the folds reproduce (the others are approximate).
EXACT_PCA = ("covariance", "gram")

logger = logging.getLogger(__name__)


#: Relative residual (``||C u - θ u|| / θ_1``) a fold's Krylov eigenpairs reach; a fold that
#: does not reach it in :data:`FOLD_MAX_PASSES` products is solved by the exact eigensolver.
FOLD_TOL = 1e-12

#: Most products with a fold's kernel before its dense eigensolver takes over.
FOLD_MAX_PASSES = 30

#: Most bytes the folds iterating together may reserve for their Krylov bases, images and
#: projected matrices (pages are committed as the iteration fills them, a few passes' worth
#: as a rule): 12 folds of 500 points a stack.
FOLD_BATCH_BYTES = 64 * 2**20


@dataclasses.dataclass(frozen=True)
class KernelFolds:
    """What every fold shares: the full kernel matrix, its sums, and the refit's settings.

    ``K`` is the whole symmetric ``N × N`` training kernel (not centred), ``row_sums`` its
    ``K @ 1``; ``start`` holds the leading eigenvectors of the centred ``K`` that start each
    fold's block Krylov iteration, or is ``None`` when every fold runs the dense eigensolver.
    ``whiten``: scale each fold's scores to unit variance over its points, as linear PCA's
    ``whiten`` does (its ``explained_variance_`` is the centred Gram's eigenvalue over
    ``N - 2``).
    """

    K: np.ndarray
    row_sums: np.ndarray
    kernel: Kernel
    rule: ComponentRule
    start: np.ndarray | None
    whiten: bool = False

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled on a worker, an array may start at any byte of the message, and numpy
        # multiplies a large misaligned one slowly: a fold's products ran 4.5 times slower.
        for name, value in state.items():
            object.__setattr__(self, name, aligned_operand(value, value.dtype)
                               if isinstance(value, np.ndarray) else value)

    def scores(self, n: int) -> np.ndarray:
        """All ``N`` points' scores on the exact kernel PCA of the points other than ``n``.

        One fold of :meth:`fold_scores`.

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca import KernelPCA
        >>> X = np.random.default_rng(0).normal(size=(20, 3))
        >>> folds = kernel_folds(KernelPCA(2, kernel="rbf"), X)
        >>> refit = KernelPCA(2, kernel="rbf").fit(np.delete(X, 4, axis=0))
        >>> got, want = folds.scores(4), refit.transform(X)
        >>> bool(np.allclose(np.abs(got), np.abs(want), atol=1e-10))
        True
        """
        return self.fold_scores([n])[0]

    def fold_scores(self, points: Sequence[int]) -> list[np.ndarray]:
        """For each of ``points``, all ``N`` points' scores on the refit without it.

        Each fold's kernel ``K_n`` (``K`` without row and column ``n``) is centred and its
        leading eigenpairs found by block Krylov iteration from :attr:`start` (the full
        kernel's eigenvectors without row ``n``, close to the fold's), to :data:`FOLD_TOL`.
        The folds iterate together (:func:`_krylov_folds`): one product of ``K`` with all
        their blocks a pass, and their small orthogonalisations and Rayleigh–Ritz problems
        stacked, so a pass is a few large numpy calls that release the GIL instead of many
        small ones that hold it. Without a start, or for a fold whose iteration stalls, the
        exact solver's dense ``eigh``.

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca import KernelPCA
        >>> X = np.random.default_rng(0).normal(size=(40, 3))
        >>> folds = kernel_folds(KernelPCA(2, kernel="rbf"), X)
        >>> [s.shape for s in folds.fold_scores([0, 7])]
        [(40, 2), (40, 2)]
        """
        points = np.asarray(points, dtype=np.intp)
        found: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(points)
        if self.start is not None:
            N, capacity = len(self.K), _capacity(len(self.K), self.start.shape[1])
            batch = min(len(points),
                        max(1, FOLD_BATCH_BYTES // (8 * capacity * (2 * N + capacity))))
            # one workspace for every stack: in a dask worker (whose allocator returns freed
            # memory to the system at once) new stacks page-faulted 1.5-2 ms a fold back in
            workspace = _workspace(batch, N, capacity)
            for first in range(0, len(points), batch):
                found[first:first + batch] = _krylov_folds(
                    self.K, self.start, points[first:first + batch], self.rule.count, workspace)
        totals = float(self.row_sums.sum()), float(np.trace(self.K))  # of K, for every fold
        return [self._scores(n, pairs, *totals)
                for n, pairs in zip(points, found, strict=True)]

    def _scores(self, n: int, pairs: tuple[np.ndarray, np.ndarray] | None, total: float,
                trace: float) -> np.ndarray:
        """Fold ``n``'s scores from its eigenpairs (``None``: the dense solver finds them).

        ``total`` and ``trace`` are the sum of ``K``'s entries and its trace.
        """
        K, m = self.K, len(self.K) - 1
        keep = np.arange(m + 1) != n
        fold_sums = self.row_sums[keep] - K[keep, n]
        if pairs is None:
            logger.debug("leave-one-out fold %d: dense eigh", n)
            fold = K[np.ix_(keep, keep)]
            decomposition = centred_top_eigh(fold, fold_sums, self.rule)
        else:
            fold_sum = total - 2.0 * float(self.row_sums[n]) + float(K[n, n])
            fold_trace = trace - float(K[n, n])
            eigenvalues, eigenvectors = pairs
            decomposition = (eigenvalues, eigenvectors[keep], fold_sums / m,
                             fold_trace - fold_sum / m)  # the trace of H K_n H
        values, coef, offset, _ = eigenpair_components(*decomposition, self.rule, "KernelPCA",
                                                       ZERO_RATIO)
        # the row of the left-out point is zero: K @ coef is K[:, keep] @ coef without a copy
        scores = K @ np.insert(coef, n, 0.0, axis=0) - offset
        if self.whiten:
            scores /= np.maximum(np.sqrt(values / (m - 1)), np.finfo(np.float64).eps)
        return scores


def _krylov_folds(K: np.ndarray, start: np.ndarray, left_out: np.ndarray, k: int,
                  workspace: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                  ) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Find the ``k`` leading eigenpairs of ``H K_n H`` for every ``n`` in ``left_out``, together.

    Block Lanczos with full reorthogonalisation, as :func:`~dkpca.linalg.block_krylov_eigh`,
    run on a stack of folds. A fold's vectors live in all ``N`` rows with a zero in its
    left-out row, so every fold's product is a slice of one GEMM with ``K``. The basis is held
    by rows (``(folds, columns, N)``) so that a pass commits only the pages it fills. After the
    first pass a fold's new block keeps only a few directions (``K_n`` differs from ``K``,
    whose eigenvectors start it, by a rank-two term): the next block is as wide as the most
    any fold kept, the others padded with zero rows, which change neither products nor Ritz
    pairs. A fold leaves the stack when its ``k`` residuals reach :data:`FOLD_TOL` or its new
    block is empty (an invariant space, whose Ritz pairs are exact), with its eigenvalues
    (descending) and eigenvectors (``(N, k)``, zero in row ``n``); or as ``None`` when the
    basis would pass :data:`FOLD_MAX_PASSES` blocks or the fold's ``N - 1`` dimensions: the
    dense solver takes it. ``workspace`` (:func:`_workspace`, at least ``len(left_out)`` folds
    deep) holds the stacks to fill; new ones are allocated without it.
    """
    N, width = len(K), start.shape[1]
    capacity = _capacity(N, width)
    count = len(left_out)
    basis, images, projected = workspace or _workspace(count, N, capacity)  # projected: Qᵀ C Q
    block = np.repeat(start.T[None], count, axis=0)
    block[np.arange(count), :, left_out] = 0.0
    basis[:count, :width] = _orthonormal_rows(block, np.zeros(count))
    found: list[tuple[np.ndarray, np.ndarray] | None] = [None] * count
    folds = np.arange(count)  # the fold each slot of the stack holds
    low, high = 0, width
    for n_pass in range(1, FOLD_MAX_PASSES + 1):
        held = len(folds)
        product = _centred_products(K, basis[:held, low:high], left_out[folds])
        images[:held, low:high] = product
        column = basis[:held, :high] @ product.transpose(0, 2, 1)  # (held, high, width)
        projected[:held, :high, low:high] = column
        projected[:held, low:high, :low] = column[:, :low].transpose(0, 2, 1)
        theta, S = np.linalg.eigh(projected[:held, :high, :high], UPLO="L")
        theta, ritz = theta[:, ::-1][:, :k], S[:, :, ::-1][:, :, :k].transpose(0, 2, 1)
        vectors = ritz @ basis[:held, :high]  # (held, k, N)
        residual = np.linalg.norm(ritz @ images[:held, :high] - theta[..., None] * vectors,
                                  axis=2).max(axis=1)
        scale = np.maximum(np.abs(theta[:, 0]), np.finfo(float).tiny)
        done = residual <= FOLD_TOL * scale
        last = n_pass == FOLD_MAX_PASSES or high + width > capacity
        if not last:  # the next block: this pass's images, orthogonal to the basis
            block = _orthonormal_rows(product, 1e-12 * scale, basis[:held, :high],
                                      column.transpose(0, 2, 1))
            done |= ~block.any(axis=(1, 2))
        for slot in np.flatnonzero(done):
            found[folds[slot]] = (theta[slot].copy(), flip_signs(vectors[slot].T.copy()))
        if last or done.all():
            break
        stay = np.flatnonzero(~done)
        moved = stay != np.arange(len(stay))  # slots keep their order; later ones move up
        for stack in (basis, images, projected):
            stack[np.flatnonzero(moved), :high] = stack[stay[moved], :high]
        folds, block = folds[stay], block[stay]
        # each block's kept directions are its last rows (the Gram's largest eigenvalues)
        grown = int(block.any(axis=2).sum(axis=1).max())
        low, high = high, high + grown
        basis[:len(folds), low:high] = block[:, block.shape[1] - grown:]
    return found


def _capacity(N: int, width: int) -> int:
    """Return the most basis columns a fold's iteration may hold.

    The basis, its images and ``Qᵀ C Q`` take ``8 · capacity · (2 N + capacity)`` bytes a fold.
    """
    return min(N - 1, FOLD_MAX_PASSES * width)


def _workspace(count: int, N: int, capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return empty stacks of ``count`` folds' bases, images and projected matrices."""
    return (np.empty((count, capacity, N)), np.empty((count, capacity, N)),
            np.empty((count, capacity, capacity)))


def _centred_products(K: np.ndarray, blocks: np.ndarray, left_out: np.ndarray) -> np.ndarray:
    """``H K_n H`` times each fold's block of rows ``(folds, width, N)``, in one GEMM with ``K``.

    ``H`` centres over the ``N - 1`` rows a fold keeps; its left-out row stays zero.
    """
    rows, kept = np.arange(len(blocks)), K.shape[0] - 1
    centred = blocks - blocks.sum(axis=2, keepdims=True) / kept
    centred[rows, :, left_out] = 0.0
    product = (centred.reshape(-1, K.shape[0]) @ K).reshape(centred.shape)  # K symmetric
    product[rows, :, left_out] = 0.0
    product -= product.sum(axis=2, keepdims=True) / kept
    product[rows, :, left_out] = 0.0
    return product


def _orthonormal_rows(blocks: np.ndarray, thresholds: np.ndarray, basis: np.ndarray | None = None,
                      coefficients: np.ndarray | None = None) -> np.ndarray:
    """Each block's rows made orthonormal (and orthogonal to its ``basis`` rows) by SVQB.

    Rows of norm at most their block's threshold, and directions of the rows' Gram matrix
    below ``1e-14`` of its largest eigenvalue, are dependent and come back as zero rows. With
    a ``basis``, the rows are orthogonalised against it before and again after the first
    SVQB (Stathopoulos and Wu, as in :func:`~dkpca.linalg.block_krylov_eigh`);
    ``coefficients``, if given, are the first projection's ``blocks @ basisᵀ``, already known.
    """
    for sweep in range(2):
        if basis is not None:
            if sweep or coefficients is None:
                coefficients = blocks @ basis.transpose(0, 2, 1)
            blocks = blocks - coefficients @ basis
        norms = np.linalg.norm(blocks, axis=2, keepdims=True)
        if sweep == 0:
            norms[norms <= thresholds[:, None, None]] = np.inf
        blocks = blocks / np.where(norms > 0.0, norms, np.inf)
        lam, V = np.linalg.eigh(blocks @ blocks.transpose(0, 2, 1))
        kept = lam > DEPENDENT_GRAM * np.maximum(lam[:, -1:], np.finfo(float).tiny)
        blocks = (V * np.where(kept, 1.0 / np.sqrt(np.where(kept, lam, 1.0)), 0.0)[:, None, :]
                  ).transpose(0, 2, 1) @ blocks
    return blocks


def kernel_folds(estimator: Any, X: np.ndarray) -> KernelFolds | None:
    """Return the shared kernel for exact leave-one-out refits of ``estimator`` on ``X``, or None.

    ``estimator`` is the unfitted template every refit clones (its component count fixed).
    Returns ``None`` (refit each fold as a whole) unless it is, not as a subclass, either a
    :class:`~dkpca.KernelPCA` whose fit on ``N - 1`` of the ``(N, D)`` float64 rows ``X``
    would run the exact solver (with ``kernel="precomputed"``, ``X`` is the ``N × N`` kernel
    matrix, and the folds take it as it is), or a :class:`~dkpca.PCA` whose
    fit would run an exact solver (covariance or Gram), whose ``N × N`` Gram matrix fits its
    ``memory_budget``, and whose ``k`` components are clear of zero variance on every fold:
    its folds are kernel PCA's with the linear kernel (the Gram matrix), whose scores are
    PCA's.

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca import PCA, KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(20, 3))
    >>> kernel_folds(KernelPCA(2), X).K.shape
    (20, 20)
    >>> kernel_folds(PCA(2, whiten=True), X).whiten
    True
    >>> kernel_folds(KernelPCA(2, solver="randomized"), X) is None
    True
    >>> K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.allclose(kernel_folds(KernelPCA(2, kernel="precomputed"), K).K, K))
    True
    """
    from dkpca.decomposition import KernelPCA
    from dkpca.linear import PCA

    n, d = X.shape
    if type(estimator) is PCA:
        budget = parse_size(estimator.memory_budget, "memory_budget", "PCA")
        if (estimator._choose_solver(n - 1, d, estimator.n_components, False) not in EXACT_PCA
                or 8 * n * n > budget):
            return None
        kernel, block_bytes = Linear(), DEFAULT_BLOCK_BYTES
        rule = ComponentRule(count=int(estimator.n_components))
        # every fold centres its Gram matrix, which ignores a shift common to all rows: by the
        # first row, the entries stay at the data's spread, not its distance from the origin
        X = X - X[:1]
    elif (type(estimator) is KernelPCA
          and estimator._solver_for(n - 1, X.dtype.itemsize)[0] == "exact"):
        if estimator._precomputed:  # X is K: its rows, indexed, are the samples a refit reads
            kernel, X = PrecomputedKernel(n), indexed_kernel_rows(X, "KernelPCA")
        else:
            kernel = estimator._resolve_kernel(d)
        block_bytes = parse_size(estimator.block_size, "block_size", "KernelPCA")
        rule = estimator._component_rule()
    else:
        return None
    data = da.from_array(X, chunks=(-1, -1))
    K, row_sums = gather_kernel(kernel, data, block_bytes=block_bytes)
    check_finite_kernel(row_sums / n, data, type(estimator).__name__)
    _mirror_upper(K)
    start = _start_block(K, row_sums, rule)
    if type(estimator) is PCA and not _clear_of_zero(K, row_sums, rule.count, start):
        return None
    logger.info("leave-one-out: %d exact refits from one %d x %d kernel", n, n, n)
    return KernelFolds(K, row_sums, kernel, rule, None if start is None else start[1],
                       whiten=type(estimator) is PCA and estimator.whiten)


def _start_block(K: np.ndarray, row_sums: np.ndarray,
                 rule: ComponentRule) -> tuple[np.ndarray, np.ndarray] | None:
    """Return the centred ``K``'s leading eigenpairs, whose vectors start the folds' iterations.

    ``2 k + 5`` of them (``k`` components): the extra directions make each fold converge in a
    few products. ``None`` when that is a quarter of the points or more (or a rule needs the
    whole spectrum): then a dense ``eigh`` per fold is as cheap.
    """
    n = len(K)
    if rule.needs_full_spectrum or rule.count is None:
        return None
    width = 2 * rule.count + 5
    if 4 * width >= n:
        return None
    return top_eigh(_centred(K, row_sums), width, overwrite=True)


def _clear_of_zero(K: np.ndarray, row_sums: np.ndarray, k: int,
                   start: tuple[np.ndarray, np.ndarray] | None) -> bool:
    """Whether every fold's ``k`` leading centred eigenvalues are clearly positive.

    A fold's scatter is the full one less a rank-one term, so its ``k``-th eigenvalue is at
    least the full ``(k + 1)``-th (interlacing). Below that, a PCA refit would complete its
    basis with arbitrary directions that no kernel fold reproduces.
    """
    if k + 2 > len(K):
        return False
    values = start[0] if start is not None else top_eigh(_centred(K, row_sums), k + 1,
                                                         overwrite=True)[0]
    return bool(values[k] > ZERO_RATIO * max(float(values[0]), 0.0) > 0.0)


def _centred(K: np.ndarray, row_sums: np.ndarray) -> np.ndarray:
    """Return a centred copy of ``K``."""
    centred, row_means = K.copy(), row_sums / len(K)
    center_kernel_inplace(centred, row_means, float(row_means.mean()))
    return centred


def _mirror_upper(K: np.ndarray) -> None:
    """Copy the upper triangle of ``K`` onto its lower one, strip by strip, in place."""
    strip = max(1, (8 * 2**20) // max(1, K.shape[1] * K.itemsize))
    for start in range(0, K.shape[0], strip):
        stop = min(start + strip, K.shape[0])
        K[start:stop, :start] = K[:start, start:stop].T
        square = K[start:stop, start:stop]
        lower = np.tril_indices(stop - start, -1)
        square[lower] = square.T[lower]
