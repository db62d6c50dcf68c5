"""Exact leave-one-out refits of exact kernel PCA, from one kernel matrix.

A refit of :class:`~dkpca.KernelPCA` on the ``N - 1`` points without ``x_n`` evaluates the
kernel of those points, centres it, solves its eigenproblem, then evaluates the kernel again to
project all ``N`` points. Both kernels are parts of the full ``N × N`` matrix: rows and columns
without ``n`` for the fit, the columns without ``n`` for the projection. When the refit would
use the exact solver (the default up to 2,000 points), the matrix is evaluated
once here and every fold slices it, then runs the exact solver's own steps
(:func:`~dkpca.solvers.exact.centred_top_eigh`,
:func:`~dkpca.solvers._common.eigenpair_components`). The ``N`` refits cost ``N`` eigenproblems
and no kernel evaluation: in the LOO paper's setting (``N`` small, ``D`` large) the kernel is
most of a refit.

The numbers are those of refitting: the same kernel (resolved from the estimator's parameters
as a refit resolves it), the same centring, component rule and eigensolver; only the kernel's
entries may differ in their last bits (one evaluation against one per refit).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import dask.array as da
import numpy as np

from dkpca._device import aligned_operand
from dkpca._estimator import parse_size
from dkpca.blocked import center_columns, center_kernel_inplace, gather_kernel
from dkpca.kernels import Kernel
from dkpca.linalg import block_krylov_eigh, top_eigh
from dkpca.solvers import ComponentRule
from dkpca.solvers._common import check_finite_kernel, eigenpair_components
from dkpca.solvers._components import ZERO_RATIO
from dkpca.solvers.exact import centred_top_eigh

__all__ = ["KernelFolds", "kernel_folds"]

logger = logging.getLogger(__name__)


#: Relative residual (``||C u - θ u|| / θ_1``) a fold's Krylov eigenpairs reach; a fold that
#: does not reach it in :data:`FOLD_MAX_PASSES` products is solved by the exact eigensolver.
FOLD_TOL = 1e-12

#: Most products with a fold's kernel before its dense eigensolver takes over.
FOLD_MAX_PASSES = 30


@dataclasses.dataclass(frozen=True)
class KernelFolds:
    """What every fold shares: the full kernel matrix, its sums, and the refit's settings.

    ``K`` is the whole symmetric ``N × N`` training kernel (not centred), ``row_sums`` its
    ``K @ 1``; ``start`` holds the leading eigenvectors of the centred ``K`` that start each
    fold's block Krylov iteration, or is ``None`` when every fold runs the dense eigensolver.
    """

    K: np.ndarray
    row_sums: np.ndarray
    kernel: Kernel
    rule: ComponentRule
    start: np.ndarray | None

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled on a worker, an array may start at any byte of the message, and numpy
        # multiplies a large misaligned one slowly: a fold's products ran 4.5 times slower.
        for name, value in state.items():
            object.__setattr__(self, name, aligned_operand(value, value.dtype)
                               if isinstance(value, np.ndarray) else value)

    def scores(self, n: int) -> np.ndarray:
        """All ``N`` points' scores on the exact kernel PCA of the points other than ``n``.

        The fold's kernel ``K_n`` (``K`` without row and column ``n``) is centred and its
        leading eigenpairs found by block Krylov iteration from :attr:`start` (the full
        kernel's eigenvectors without row ``n``, close to the fold's: only products with ``K``,
        which release the GIL, and no copy of ``K_n``), to :data:`FOLD_TOL`; or, without a
        start or when that iteration stalls, by the exact solver's dense ``eigh``.

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
        keep = np.arange(len(self.K)) != n
        fold_sums = self.row_sums[keep] - self.K[keep, n]
        found = self._krylov(n, keep)
        if found is None:
            fold = self.K[np.ix_(keep, keep)]
            decomposition = centred_top_eigh(fold, fold_sums, self.rule)
        else:
            eigenvalues, eigenvectors, centred_trace = found
            decomposition = (eigenvalues, eigenvectors, fold_sums / (len(self.K) - 1),
                             centred_trace)
        _, coef, offset, _ = eigenpair_components(*decomposition, self.rule, "KernelPCA",
                                                  ZERO_RATIO)
        # the row of the left-out point is zero: K @ coef is K[:, keep] @ coef without a copy
        return self.K @ np.insert(coef, n, 0.0, axis=0) - offset

    def _krylov(self, n: int, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Eigenvalues, eigenvectors and trace of the centred ``K_n``; ``None``: not found."""
        if self.start is None:
            return None
        K, m = self.K, len(self.K) - 1

        def centred_product(V: np.ndarray) -> np.ndarray:  # H K_n H V, H = I - 11ᵀ/m
            padded = np.zeros((m + 1, V.shape[1]))
            padded[keep] = V - V.mean(axis=0)
            product = (K @ padded)[keep]
            center_columns(product)
            return product

        found = block_krylov_eigh(centred_product, self.start[keep], self.rule.count,
                                  tol=FOLD_TOL, max_iter=FOLD_MAX_PASSES)
        if not found.converged:
            logger.debug("leave-one-out fold %d: Krylov residual %.2g after %d products; "
                         "dense eigh instead", n, found.residual, found.n_passes)
            return None
        fold_sum = float(self.row_sums.sum()) - 2.0 * float(self.row_sums[n]) + float(K[n, n])
        fold_trace = float(np.trace(K)) - float(K[n, n])
        return found.eigenvalues, found.eigenvectors, fold_trace - fold_sum / m  # trace of HK_nH


def kernel_folds(estimator: Any, X: np.ndarray) -> KernelFolds | None:
    """Return the shared kernel for exact leave-one-out refits of ``estimator`` on ``X``, or None.

    ``estimator`` is the unfitted template every refit clones (its component count fixed).
    Returns ``None`` (refit each fold as a whole) unless it is a :class:`~dkpca.KernelPCA`,
    not a subclass, on an input-space kernel, whose fit on ``N - 1`` of the ``(N, D)``
    float64 rows ``X`` would run the exact solver.

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca import KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(20, 3))
    >>> kernel_folds(KernelPCA(2), X).K.shape
    (20, 20)
    >>> kernel_folds(KernelPCA(2, solver="randomized"), X) is None
    True
    """
    from dkpca.decomposition import KernelPCA

    if type(estimator) is not KernelPCA or estimator._precomputed:
        return None
    n, d = X.shape
    if estimator._solver_for(n - 1, X.dtype.itemsize)[0] != "exact":
        return None
    kernel = estimator._resolve_kernel(d)
    block_bytes = parse_size(estimator.block_size, "block_size", "KernelPCA")
    data = da.from_array(X, chunks=(-1, -1))
    K, row_sums = gather_kernel(kernel, data, block_bytes=block_bytes)
    check_finite_kernel(row_sums / n, data, "KernelPCA")
    _mirror_upper(K)
    rule = estimator._component_rule()
    logger.info("leave-one-out: %d exact refits from one %d x %d kernel", n, n, n)
    return KernelFolds(K, row_sums, kernel, rule, _start_block(K, row_sums, rule))


def _start_block(K: np.ndarray, row_sums: np.ndarray, rule: ComponentRule) -> np.ndarray | None:
    """Return the centred ``K``'s leading eigenvectors, which start the folds' Krylov iterations.

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
    centred, row_means = K.copy(), row_sums / n
    center_kernel_inplace(centred, row_means, float(row_means.mean()))
    return top_eigh(centred, width, overwrite=True)[1]


def _mirror_upper(K: np.ndarray) -> None:
    """Copy the upper triangle of ``K`` onto its lower one, strip by strip, in place."""
    strip = max(1, (8 * 2**20) // max(1, K.shape[1] * K.itemsize))
    for start in range(0, K.shape[0], strip):
        stop = min(start + strip, K.shape[0])
        K[start:stop, :start] = K[:start, start:stop].T
        square = K[start:stop, start:stop]
        lower = np.tril_indices(stop - start, -1)
        square[lower] = square.T[lower]
