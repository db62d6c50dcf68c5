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
:mod:`dkpca._device`); the statistics then stay on the GPU until a holder sums them. The
code is written against the array API standard (``tests/test_array_api.py`` runs it on
``array_api_strict``), with ``out=`` and integer-array assignment where numpy and CuPy have
them (:func:`~dkpca._device.into`, :func:`~dkpca._device.set_diagonal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse

from ._device import array_module, astype, namespace_dtype, nbytes, numpy_dtype, set_diagonal
from ._fused import exp_minus_in_place
from .kernels import Kernel
from .kernels._base import ExponentialKernel

__all__ = ["BlockOfV", "ProductScratch", "StoredTile", "evaluate_tile"]

#: Rows of a streamed tile whose mean serves as its shift.
_SHIFT_SAMPLE_ROWS = 64


def _mean64(A: Any) -> Any:
    """Return the mean of every entry of ``A``, summed in float64 (a 0-d array or scalar)."""
    xp = array_module(A)
    return xp.sum(A, dtype=xp.float64) / max(1, A.size)


def _copy(A: Any) -> Any:
    """Return a copy of ``A`` (the standard has no ``copy`` method)."""
    return A.copy() if hasattr(A, "copy") else array_module(A).asarray(A, copy=True)


def _trace64(K: Any) -> Any:
    """Return the trace of ``K`` summed in float64 (the standard has it in ``linalg``)."""
    xp = array_module(K)
    trace = xp.trace if hasattr(xp, "trace") else xp.linalg.trace
    return trace(K, dtype=xp.float64)


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
    return kernel.pairwise_offset(*_moved_blocks(kernel, Xi, Xj, dtype))


def _moved_blocks(kernel: Kernel, Xi: np.ndarray, Xj: np.ndarray,
                  dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Both blocks moved by ``Xi``'s mean, in float32, where a float32 GEMM is then safe."""
    # Sparse blocks stay sparse (moving them would densify them); sparse data sit near 0.
    if (np.dtype(dtype) == np.float32 and kernel.translation_invariant
            and not scipy.sparse.issparse(Xi)):
        xp = array_module(Xi, Xj)
        center = xp.sum(Xi, axis=0, dtype=xp.float64) / Xi.shape[0]  # numpy's mean, exactly
        return astype(Xi - center, xp.float32), astype(Xj - center, xp.float32)
    return Xi, Xj


def _streamed_exponential(kernel: ExponentialKernel, Xi: np.ndarray, Xj: np.ndarray,
                          dtype: np.dtype, diagonal: bool,
                          near_one: Any = None) -> tuple[np.ndarray, Any, Any]:
    """Return a streamed tile of ``exp(E)`` less its shift, the shift and the form of ``exp``.

    The offset form (``expm1`` where ``near_one``, else ``exp``) and the mean are taken from a
    subsample of rows and kept on the tile's device, and
    :func:`~dkpca._fused.exp_minus_in_place` applies both in one pass: on a GPU nothing waits
    for the host (see :mod:`dkpca._fused`). A form the caller already knows (from the tile's
    previous evaluation) is taken as given.
    """
    Z = kernel.exponent(*_moved_blocks(kernel, Xi, Xj, dtype))
    xp = array_module(Z)
    step = max(1, Z.shape[0] // _SHIFT_SAMPLE_ROWS)
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: solvers report it
        if near_one is None:
            near_one = _mean64(xp.exp(Z[::step, ...])) > 0.5
        base = astype(xp.asarray(near_one), Z.dtype)
        sample = exp_minus_in_place(_copy(Z[::step, ...]), near_one, 0.0)
        if diagonal:  # exactly 1 on the diagonal (the distance expansion only nearly gives 0)
            set_diagonal(sample, 1 - base, step)
        mean = astype(_mean64(sample), Z.dtype)
        exp_minus_in_place(Z, near_one, mean)
        if diagonal:
            set_diagonal(Z, (1 - base) - mean)
    return (astype(Z, namespace_dtype(xp, dtype)),
            astype(base, xp.float64) + astype(mean, xp.float64), near_one)


@dataclass
class BlockOfV:
    """One row block of ``V`` for a pass, made once for every tile that multiplies it.

    Attributes
    ----------
    cast : ndarray
        The block in the tiles' dtype (the GEMMs' operand).
    sums : ndarray
        Its column sums in float64 (for the shift's rank-one term).
    """

    cast: np.ndarray
    sums: np.ndarray

    @classmethod
    def of(cls, V: np.ndarray, dtype: np.dtype) -> BlockOfV:
        """Make the block of ``V`` (float64, on the tiles' device) for tiles of ``dtype``.

        Examples
        --------
        >>> import numpy as np
        >>> block = BlockOfV.of(np.ones((3, 2)), np.dtype(np.float32))
        >>> block.cast.dtype, block.sums
        (dtype('float32'), array([3., 3.]))
        """
        xp = array_module(V)
        return cls(astype(V, namespace_dtype(xp, numpy_dtype(dtype))),
                   xp.sum(V, axis=0, dtype=xp.float64))


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
    near_one : bool, 0-d device array or None
        A streamed exponential tile's form of ``exp`` (``expm1`` where true), which its next
        evaluation can take as given; ``None`` for other tiles.
    """

    values: np.ndarray
    shift: float
    row_sums: np.ndarray
    col_sums: np.ndarray
    trace: float
    near_one: Any = None

    @classmethod
    def evaluate(
        cls,
        kernel: Kernel,
        Xi: np.ndarray,
        Xj: np.ndarray,
        dtype: np.dtype,
        diagonal: bool,
        statistics: bool = True,
        near_one: bool | None = None,
    ) -> StoredTile:
        """Evaluate ``K(Xi, Xj)`` and store it shifted, in ``dtype``.

        ``statistics=False`` (a tile used once, in a streamed product) skips the row and column
        sums and the trace (left at zero) and takes the shift from a subsample of rows: any
        constant keeps the product exact, a typical one keeps it accurate. For an exponential
        kernel, ``near_one`` gives the form of ``exp`` the tile's earlier evaluation found
        (:attr:`near_one`), so that a GPU runs the one it needs (see :mod:`dkpca._fused`).

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca.kernels import RBF
        >>> X = np.zeros((3, 2))
        >>> tile = StoredTile.evaluate(RBF(gamma=1.0), X, X, np.dtype(np.float32), True)
        >>> tile.shift, tile.trace, tile.values.dtype, float(abs(tile.values).max())
        (1.0, 3.0, dtype('float32'), 0.0)
        """
        if not statistics and isinstance(kernel, ExponentialKernel):
            values, shift, near_one = _streamed_exponential(kernel, Xi, Xj, dtype, diagonal,
                                                            near_one)
            return cls(values, shift, np.zeros(0), np.zeros(0), 0.0, near_one)
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: solvers report it
            K, base = evaluate_tile(kernel, Xi, Xj, dtype)
            xp = array_module(K)
            stored = namespace_dtype(xp, dtype)
            if diagonal:  # exact: a distance expansion's cancellation is worst for x against x
                set_diagonal(K, kernel.diag(Xi) - base)
            if not statistics:  # the mean stays on the tile's device: no wait for the host
                step = max(1, K.shape[0] // _SHIFT_SAMPLE_ROWS)
                mean = astype(_mean64(K[::step, ...]), K.dtype)
                K -= mean
                empty = np.zeros(0)
                return cls(astype(K, stored), astype(mean, xp.float64) + base, empty, empty, 0.0)
            # Sums as GEMVs in the tile's precision (blocked accumulation: about 1e-7 relative
            # in float32), three times faster than a float64 reduction over the tile.
            row_sums = astype(K @ xp.ones(K.shape[1], dtype=K.dtype), xp.float64)
            col_sums = astype(xp.ones(K.shape[0], dtype=K.dtype) @ K, xp.float64)
            # Rounded to the tile's precision first: the shift recorded is exactly the one
            # subtracted (else every entry of a tile would carry the same rounding error).
            mean = float(numpy_dtype(K.dtype).type(float(xp.sum(row_sums)) / max(1, K.size)))
            trace = float(_trace64(K)) + base * K.shape[0] if diagonal else 0.0
            K -= mean  # exact in the tile's dtype, as a weak Python scalar is in every library
        return cls(astype(K, stored), base + mean, row_sums + base * K.shape[1],
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
            return (self.product(Vi, scratch),)
        return self.product(Vj, scratch), self.product(Vi, scratch, transposed=True)

    def product(self, V: np.ndarray | BlockOfV, scratch: ProductScratch | None = None,
                transposed: bool = False) -> np.ndarray:
        """Return ``K_ij V`` (or ``K_ijᵀ V``) in float64, as :meth:`products` computes it.

        A holder that returns only the rows of its stripe needs one of a tile's two products.
        ``V`` may be a :class:`BlockOfV` made once a pass (no cast and sum per tile).
        """
        block = V if isinstance(V, BlockOfV) else BlockOfV.of(V, self.values.dtype)
        values, slot = (self.values.T, 1) if transposed else (self.values, 0)
        if scratch is None:
            out = astype(values @ block.cast, array_module(values).float64)
        else:
            product = scratch.product[: len(values)]
            np.matmul(values, block.cast, out=product)
            out = scratch.results[slot][: len(values)]
            np.copyto(out, product)
        out += self.shift * block.sums
        return out

    @property
    def nbytes(self) -> int:
        """Memory of the stored values."""
        return nbytes(self.values)
