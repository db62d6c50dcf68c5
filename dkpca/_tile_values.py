"""One kernel tile, stored in float32 without losing the digits that matter.

**Store in float32, accumulate in float64.** A tile is stored as ``K_ij - s_ij`` for its own
mean ``s_ij``, evaluated relative to a constant where the kernel allows (RBF: ``exp(z) - 1``
for a tile whose entries are mostly near 1, ``exp(z)`` for one mostly near 0, see
:meth:`~dkpca.kernels.Kernel.pairwise_offset`), so rounding to float32 keeps the digits
that matter even when the raw kernel is nearly constant (a small RBF ``gamma`` puts every entry
near 1 and the top uncentred eigenvalue near ``n``). The shift comes back exactly as a rank-one
term, ``K_ij V_j = (K_ij - s_ij) V_j + s_ij 1 (1ᵀ V_j)``, added in float64. Translation-invariant
kernels (RBF) are also *evaluated* with a float32 GEMM when tiles are stored in float32: both
blocks are first moved by the same vector (the first block's mean), which leaves the kernel
unchanged and removes the cancellation a large offset would cause in ``||x||² - 2<x, y> +
||y||²``.

Tiles follow their data: numpy rows give numpy tiles, CuPy rows give tiles on the GPU (see
:mod:`dkpca._device`); the statistics then stay on the GPU until a holder sums them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse

from ._device import array_module
from .kernels import Kernel

__all__ = ["ProductScratch", "StoredTile", "evaluate_tile"]

#: Rows of a streamed tile whose mean serves as its shift.
_SHIFT_SAMPLE_ROWS = 64


def evaluate_tile(
    kernel: Kernel, Xi: np.ndarray, Xj: np.ndarray, dtype: np.dtype
) -> tuple[np.ndarray, float]:
    """Return ``K(Xi, Xj) - c`` and ``c`` (see :meth:`Kernel.pairwise_offset`).

    With ``dtype`` float32 and a translation-invariant kernel, a float32 GEMM is safe: both
    blocks are moved by ``Xi``'s mean first, so the distance expansion sees small norms
    whatever the data's offset. Other kernels are evaluated in the data's precision.

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(5, 3)) + 1e4  # a large offset
    >>> K32, c = evaluate_tile(RBF(gamma=0.5), X, X, np.dtype(np.float32))
    >>> K32.dtype, bool(np.allclose(K32 + c, RBF(gamma=0.5).pairwise(X), atol=1e-6))
    (dtype('float32'), True)
    """
    # Sparse blocks stay sparse (moving them would densify them); sparse data sit near 0.
    if (np.dtype(dtype) == np.float32 and kernel.translation_invariant
            and not scipy.sparse.issparse(Xi)):
        center = Xi.mean(axis=0, dtype=np.float64)
        Xi = (Xi - center).astype(np.float32)
        Xj = (Xj - center).astype(np.float32)
    return kernel.pairwise_offset(Xi, Xj)


class ProductScratch:
    """One thread's buffers for tile products, reused from tile to tile (host memory).

    Dask's worker processes set ``MALLOC_TRIM_THRESHOLD_``, which makes every new temporary of a
    tile's size a fresh mapping, page-faulted as it is written: with it set, a threaded pass on
    2 cores ran 30 % slower (BENCHMARKS.md §8). Reused buffers cost that once per thread.

    Parameters
    ----------
    rows : int
        Most rows of a tile.
    columns : int
        Columns of the block ``V``.
    dtype : numpy dtype
        The tiles' storage dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(6, 2))
    >>> tile = StoredTile.evaluate(RBF(gamma=1.0), X, X, np.dtype(np.float32), True)
    >>> V = np.ones((6, 3))
    >>> (fresh,) = tile.products(V, None)
    >>> (reused,) = tile.products(V, None, ProductScratch(6, 3, np.dtype(np.float32)))
    >>> bool((fresh == reused).all())
    True
    """

    def __init__(self, rows: int, columns: int, dtype: np.dtype):
        self.cast = np.empty((rows, columns), dtype)
        self.product = np.empty((rows, columns), dtype)
        self.results = (np.empty((rows, columns)), np.empty((rows, columns)))
        self.sums = tuple(np.empty((rows, columns)) for _ in range(3))


@dataclass
class StoredTile:
    """One cached tile: ``K_ij - shift`` in the storage dtype, with float64 statistics.

    Attributes
    ----------
    values : ndarray
        The tile less ``shift``, float32 or float64.
    shift : float
        The tile's mean, removed before rounding.
    row_sums, col_sums : ndarray
        Row and column sums of the tile itself (float64, before rounding).
    trace : float
        Its trace when it lies on the diagonal, else 0.
    """

    values: np.ndarray
    shift: float
    row_sums: np.ndarray
    col_sums: np.ndarray
    trace: float

    @classmethod
    def evaluate(
        cls,
        kernel: Kernel,
        Xi: np.ndarray,
        Xj: np.ndarray,
        dtype: np.dtype,
        diagonal: bool,
        statistics: bool = True,
    ) -> StoredTile:
        """Evaluate ``K(Xi, Xj)`` and store it shifted, in ``dtype``.

        ``statistics=False`` (a tile used once, in a streamed product) skips the row and column
        sums and the trace (left at zero) and takes the shift from a subsample of rows: any
        constant keeps the product exact, a typical one keeps it accurate.

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca.kernels import RBF
        >>> X = np.zeros((3, 2))
        >>> tile = StoredTile.evaluate(RBF(gamma=1.0), X, X, np.dtype(np.float32), True)
        >>> tile.shift, tile.trace, tile.values.dtype, float(abs(tile.values).max())
        (1.0, 3.0, dtype('float32'), 0.0)
        """
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: solvers report it
            K, base = evaluate_tile(kernel, Xi, Xj, dtype)
            if diagonal:  # exact: a distance expansion's cancellation is worst for x against x
                np.fill_diagonal(K, kernel.diag(Xi) - base)
            if not statistics:
                step = max(1, K.shape[0] // _SHIFT_SAMPLE_ROWS)
                mean = float(K.dtype.type(float(K[::step].mean(dtype=np.float64))))
                K -= K.dtype.type(mean)
                empty = np.zeros(0)
                return cls(K.astype(dtype, copy=False), base + mean, empty, empty, 0.0)
            # Sums as GEMVs in the tile's precision (blocked accumulation: about 1e-7 relative
            # in float32), three times faster than a float64 reduction over the tile.
            xp = array_module(K)
            row_sums = (K @ xp.ones(K.shape[1], K.dtype)).astype(np.float64)
            col_sums = (xp.ones(K.shape[0], K.dtype) @ K).astype(np.float64)
            # Rounded to the tile's precision first: the shift recorded is exactly the one
            # subtracted (else every entry of a tile would carry the same rounding error).
            mean = float(K.dtype.type(float(row_sums.sum()) / max(1, K.size)))
            trace = float(np.trace(K, dtype=np.float64)) + base * K.shape[0] if diagonal else 0.0
            K -= K.dtype.type(mean)
        return cls(K.astype(dtype, copy=False), base + mean, row_sums + base * K.shape[1],
                   col_sums + base * K.shape[0], trace)

    def products(
        self, Vi: np.ndarray, Vj: np.ndarray | None, scratch: ProductScratch | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(K_ij Vj, K_ijᵀ Vi)`` in float64; a diagonal tile (``Vj`` None) gives one.

        The GEMMs run in the storage dtype; the shift's rank-one term is added in float64.
        With ``scratch`` the results are views of its buffers (the same numbers, no new
        arrays), valid until its next use.
        """
        if Vj is None:
            return (self._product(self.values, Vi, scratch, 0),)
        return (self._product(self.values, Vj, scratch, 0),
                self._product(self.values.T, Vi, scratch, 1))

    def _product(self, values: np.ndarray, V: np.ndarray, scratch: ProductScratch | None,
                 slot: int) -> np.ndarray:
        if scratch is None:
            V_cast = array_module(values).asarray(V, dtype=values.dtype, order="C")
            out = (values @ V_cast).astype(np.float64, copy=False)
        else:
            V_cast = scratch.cast[: len(V)]
            np.copyto(V_cast, V, casting="same_kind")
            product = scratch.product[: len(values)]
            np.matmul(values, V_cast, out=product)
            out = scratch.results[slot][: len(values)]
            np.copyto(out, product)
        out += self.shift * V.sum(axis=0, dtype=np.float64)
        return out

    @property
    def nbytes(self) -> int:
        """Memory of the stored values."""
        return self.values.nbytes
