"""Shifted first and second moments of rows: the one pass of linear PCA, and their running sums.

``Σ (x - s)`` and ``Σ (x - s)(x - s)ᵀ`` over the rows, accumulated in float64 strip by strip:
each strip of rows is shifted into a small buffer (the caller's array is never copied whole,
whatever its dtype), and its cross-product is one ``syrk``. Subtracting a shift ``s`` close to
the mean (the first sample) before the products keeps the centred covariance free of
cancellation when the data sit far from the origin.

In-memory arrays are split into one contiguous part per core, each part accumulated by its own
thread with single-threaded BLAS: the shifting and the products then both run on all cores
(numpy releases the GIL in both), and OpenBLAS's multithreaded ``syrk`` — unsafe on large
products (with OpenBLAS 0.3.31 on two threads it crashed from about 15,500 × 128 float64
rows up) — is never reached.

:class:`RowStatistics` (count, mean, centred scatter) is what the moments come to, and what
``partial_fit`` keeps: two batches' statistics merge exactly (Chan, Golub and LeVeque's
pairwise rule), so any number of batches gives the statistics of all their rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from threading import Lock

import numpy as np
import scipy.linalg

from .blocked import single_threaded_blas
from .linalg import blas_single_threaded

__all__ = [
    "RowStatistics",
    "available_cores",
    "moments_in_memory",
    "shifted_moments",
    "strip_rows",
]

#: Bytes of one strip of shifted rows: a few of them fit in a core's cache.
STRIP_BYTES = 2**18
#: Fewer rows than this per strip and the strip's ``syrk`` falls short of the GEMM rate.
MIN_STRIP_ROWS = 256
#: Rows per product when the caller's float64 rows are multiplied in place (no buffer).
RAW_STRIP_ROWS = 8192
#: Largest squared mean, as a multiple of the variance, for which the raw products ``Σ x xᵀ``
#: are used: the centred covariance then keeps all but about two of its digits (relative
#: rounding ``eps (1 + mean² / variance)``).
RAW_RATIO = 100.0
#: Rows that judge it (a temporary copy of this many rows is made).
CHECK_ROWS = 64


def strip_rows(n_features: int) -> int:
    """Rows per strip of a float64 buffer of ``n_features`` columns.

    Examples
    --------
    >>> strip_rows(64), strip_rows(784)
    (512, 256)
    """
    return max(MIN_STRIP_ROWS, STRIP_BYTES // (8 * n_features))


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it).

    Examples
    --------
    >>> available_cores() >= 1
    True
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def shifted_moments(
    block: np.ndarray, shift: np.ndarray, out: np.ndarray | None = None, lock: Lock | None = None
) -> np.ndarray:
    """Column sums stacked on the cross-product matrix of ``block - shift``, in float64.

    Parameters
    ----------
    block : (r, d) array
        Rows of the data, any floating dtype; it is read, never copied whole.
    shift : (d,) array
        Subtracted from every row before the products.
    out : (d + 1, d) float64 array, optional
        Add the moments to this array instead of a new one.
    lock : threading.Lock, optional
        Held while adding to ``out`` (threads sharing one accumulator).

    Returns
    -------
    (d + 1, d) float64 array
        Row 0: ``Σ (x - s)``; rows 1..d: ``Σ (x - s)(x - s)ᵀ``.

    Notes
    -----
    Non-finite input gives non-finite moments (no warning): callers check the result.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 2.0], [3.0, 6.0]])
    >>> shifted_moments(X, X[0])
    array([[ 2.,  4.],
           [ 4.,  8.],
           [ 8., 16.]])
    """
    n, d = block.shape
    rows = strip_rows(d)
    moments = np.zeros((d + 1, d)) if out is None else out
    product = np.empty((d + 1, d))
    # numpy computes Yᵀ Y on one buffer with syrk: safe while BLAS runs on one thread (tasks,
    # and the threads of moments_in_memory); otherwise a copy makes it a GEMM.
    same_buffer = blas_single_threaded()
    with np.errstate(invalid="ignore", over="ignore"):
        if block.dtype == np.float64 and _near_origin(block[:CHECK_ROWS]):
            # The raw products lose nothing here: read the caller's rows in place, shift after.
            for start in range(0, n, RAW_STRIP_ROWS):
                Y = block[start : start + RAW_STRIP_ROWS]
                np.sum(Y, axis=0, out=product[0])
                np.matmul(Y.T, Y if same_buffer else Y.copy(), out=product[1:])
                _shift_raw_moments(product, shift, len(Y))
                with lock or contextlib.nullcontext():
                    moments += product
            return moments
        buffer = np.empty((min(rows, n), d))
        for start in range(0, n, rows):
            Y = buffer[: min(rows, n - start)]
            np.subtract(block[start : start + rows], shift, out=Y)
            np.sum(Y, axis=0, out=product[0])
            np.matmul(Y.T, Y if same_buffer else Y.copy(), out=product[1:])
            with lock or contextlib.nullcontext():
                moments += product
    return moments


def _near_origin(rows: np.ndarray) -> bool:
    """Whether every column's squared mean is within :data:`RAW_RATIO` of its variance."""
    mean = rows.mean(axis=0)
    variance = rows.var(axis=0)
    return bool(np.all(mean * mean <= RAW_RATIO * variance))


def _shift_raw_moments(product: np.ndarray, shift: np.ndarray, count: int) -> None:
    """Turn ``[Σ x; Σ x xᵀ]`` into ``[Σ (x - s); Σ (x - s)(x - s)ᵀ]`` in place.

    ``- s tᵀ - t sᵀ + c s sᵀ = - s uᵀ - u sᵀ`` with ``u = t - c s / 2``: two rank-one updates
    (BLAS ``ger`` on the Fortran-ordered transpose, so no ``d × d`` temporary).
    """
    cross_t = product[1:].T
    ger = scipy.linalg.get_blas_funcs("ger", (cross_t,))
    u = product[0] - (count / 2) * shift
    ger(-1.0, u, shift, a=cross_t, overwrite_a=1)
    ger(-1.0, shift, u, a=cross_t, overwrite_a=1)
    product[0] -= count * shift


def moments_in_memory(X: np.ndarray, shift: np.ndarray, threads: int | None = None) -> np.ndarray:
    """:func:`shifted_moments` of an in-memory array on all cores.

    The threads add into one accumulator (under a lock), so the memory beyond the input is
    one ``(d + 1) × d`` product and one strip per thread, and the accumulator.

    Parameters
    ----------
    X : (n, d) array
    shift : (d,) array
    threads : int, optional
        Threads (one contiguous part of the rows each); by default :func:`available_cores`.

    Returns
    -------
    (d + 1, d) float64 array

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(5000, 3))
    >>> bool(np.allclose(moments_in_memory(X, X[0]), shifted_moments(X, X[0])))
    True
    """
    n, d = X.shape
    parts = max(1, min(threads or available_cores(), math.ceil(n / strip_rows(d))))
    bounds = np.linspace(0, n, parts + 1).astype(int)
    views = [X[a:b] for a, b in itertools.pairwise(bounds)]
    moments = np.zeros((d + 1, d))
    accumulate = partial(shifted_moments, shift=shift, out=moments, lock=Lock())
    with single_threaded_blas(), ThreadPoolExecutor(parts) as pool:
        list(pool.map(accumulate, views))
    return moments


@dataclasses.dataclass
class RowStatistics:
    """Count, mean and centred scatter of the rows seen: all that a sum over rows needs.

    Linear PCA keeps them of the data, Nyström kernel PCA of the landmark kernel rows
    ``k(x, L)`` (with the sum of the kernel's diagonal, for the total variance). Two sets
    merge into the statistics of all their rows (:meth:`merge`), which is what makes
    ``partial_fit`` equal to a ``fit`` on every row seen.

    Parameters
    ----------
    count : int
        Rows seen.
    mean : (d,) float64 array
    scatter : (d, d) float64 array
        ``Σ (x - mean)(x - mean)ᵀ``.
    diagonal_sum : float, default=0.0
        Kernel features: ``Σ k(x, x)``; unused (0) for linear PCA.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(100, 3))
    >>> a, b = (RowStatistics.from_moments(shifted_moments(part, part[0]), part[0], len(part))
    ...         for part in (X[:30], X[30:]))
    >>> whole = a.merge(b)
    >>> bool(np.allclose(whole.scatter, np.cov(X.T) * 99)), whole.count
    (True, 100)
    """

    count: int
    mean: np.ndarray
    scatter: np.ndarray
    diagonal_sum: float = 0.0

    @classmethod
    def from_moments(
        cls, moments: np.ndarray, shift: np.ndarray, count: int, diagonal_sum: float = 0.0
    ) -> RowStatistics:
        """Return the statistics of rows from their :func:`shifted_moments` around ``shift``.

        ``moments`` (``(d + 1) × d``, row 0 the sums) is used as the scatter's storage.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[1.0, 2.0], [3.0, 6.0]])
        >>> RowStatistics.from_moments(shifted_moments(X, X[0]), X[0], 2).mean
        array([2., 4.])
        """
        offset = moments[0] / count
        scatter = moments[1:]
        scatter -= count * np.outer(offset, offset)
        return cls(int(count), shift + offset, scatter, float(diagonal_sum))

    def merge(self, other: RowStatistics) -> RowStatistics:
        """Return the statistics of both sets of rows (neither is changed).

        ``scatter = S₁ + S₂ + (n₁ n₂ / n) δ δᵀ`` with ``δ`` the difference of the means: no
        sum of squares around the origin is ever formed, so nothing cancels.

        Examples
        --------
        >>> import numpy as np
        >>> one = RowStatistics(1, np.array([0.0]), np.zeros((1, 1)))
        >>> one.merge(RowStatistics(1, np.array([2.0]), np.zeros((1, 1)))).scatter
        array([[2.]])
        """
        if other.mean.shape != self.mean.shape:
            raise ValueError(
                f"statistics of {other.mean.shape[0]} columns cannot be merged with "
                f"statistics of {self.mean.shape[0]}"
            )
        count = self.count + other.count
        delta = other.mean - self.mean
        weight = self.count * other.count / count
        scatter = self.scatter + other.scatter
        ger = scipy.linalg.get_blas_funcs("ger", (scatter,))
        scatter = ger(weight, delta, delta, a=scatter.T, overwrite_a=1).T  # in place
        return RowStatistics(count, self.mean + delta * (other.count / count), scatter,
                             self.diagonal_sum + other.diagonal_sum)
