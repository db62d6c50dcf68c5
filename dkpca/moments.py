"""Moments of rows, strip by strip: the one pass of linear PCA, and their running sums.

The rows are read in float64 strip by strip: each strip is shifted into a small buffer (the
caller's array is never copied whole, whatever its dtype), and its cross-product is one
``syrk``. :func:`centred_statistics`, the covariance solver's pass, takes every strip's
moments around its own rows (its first row, and its mean where the first row lies far from
it) and merges the strips' counts, means and scatters exactly (Chan, Golub and LeVeque's
pairwise rule): no sum is taken around a point far from the rows, so the covariance is free
of cancellation when the data sit far from the origin, and its accuracy does not depend on
the order of the rows (an outlier first costs what it costs last).

In-memory arrays are split into one contiguous part per core, each part accumulated by its own
thread with single-threaded BLAS: the shifting and the products then both run on all cores
(numpy releases the GIL in both), and OpenBLAS's multithreaded ``syrk`` — unsafe on large
products (with OpenBLAS 0.3.31 on two threads it crashed from about 15,500 × 128 float64
rows up) — is never reached.

:class:`RowStatistics` (count, mean, centred scatter) is what the moments come to, and what
``partial_fit`` keeps: two batches' statistics merge exactly (the same pairwise rule), so any
number of batches gives the statistics of all their rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from threading import Lock

import numpy as np
import scipy.linalg

from .blocked import single_threaded_blas
from .linalg import blas_single_threaded

__all__ = [
    "RowStatistics",
    "available_cores",
    "centred_statistics",
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
#: Rows that judge it.
CHECK_ROWS = 64
#: Strips whose rank-one corrections two GEMMs apply (:func:`centred_statistics`): 8 is as fast
#: as 64 and keeps the merge's temporaries (a few 8 × d arrays a thread) near scikit-learn's peak.
PENDING_TERMS = 8


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


def _near_origin(rows: np.ndarray) -> bool:
    """Whether every column's squared mean is within :data:`RAW_RATIO` of its variance."""
    # Moments around the origin need no temporary of the rows' size (rows.var makes two); where
    # they cancel, the mean is far from the origin and the test fails as it should.
    mean = rows.mean(axis=0)
    variance = np.einsum("ij,ij->j", rows, rows) / len(rows) - mean * mean
    return bool(np.all(mean * mean <= RAW_RATIO * variance))


def centred_statistics(X: np.ndarray, threads: int | None = None) -> RowStatistics:
    """Count, mean and centred scatter of ``X``'s rows, every strip centred on its own rows.

    The one pass of the covariance solver. Each strip of rows (a cache-sized buffer, or
    ``RAW_STRIP_ROWS`` of float64 rows read in place where the products around the origin lose
    nothing) gives its own count, mean and centred scatter, and the strips merge exactly by
    Chan, Golub and LeVeque's pairwise rule, as :meth:`RowStatistics.merge` does: no sum
    around a point far from some rows is ever formed, so the accuracy does not depend on the
    order of the rows (an outlier first costs what it costs last). A strip is shifted by its
    first row, and again by its mean where the first row lies more than ``sqrt(RAW_RATIO)``
    standard deviations from it (see :func:`_add_strips`): a column that does not vary in it
    stays exactly zero.

    In-memory arrays are split into one contiguous part per thread; the threads add their strips' cross-products into one shared
    scatter (under a lock) and the strips' rank-one merge terms, gathered by
    :data:`PENDING_TERMS`, by two GEMMs each time.

    Parameters
    ----------
    X : (n, d) array
        Any floating dtype, read in place (never copied whole).
    threads : int, optional
        By default :func:`available_cores`; ``1`` for one chunk inside a task.

    Returns
    -------
    RowStatistics

    Notes
    -----
    Work beyond the ``O(n d²)`` products: ``O(n d)`` for the shifts and, per strip, about
    ``4 d²`` for its two rank-one merge terms (a strip has at least ``MIN_STRIP_ROWS`` rows).
    Measured against one shift for all rows (the first row's): the same time on 784 columns,
    about 5 % more on 16 to 100 columns (the per-strip checks and merges). Non-finite input
    gives non-finite statistics (no warning): callers check them.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(5000, 3)) + 1e6
    >>> X[0] += 1e9  # an outlier first
    >>> statistics = centred_statistics(X, threads=2)
    >>> Xc = X - X.mean(axis=0)
    >>> bool(np.allclose(statistics.scatter, Xc.T @ Xc, rtol=1e-12, atol=0))
    True
    """
    n, d = X.shape
    parts = max(1, min(threads or available_cores(), math.ceil(n / strip_rows(d))))
    scatter = np.zeros((d, d))
    if n == 0:  # an empty chunk: nothing to merge (RowStatistics.merge needs rows)
        return RowStatistics(0, np.zeros(d), scatter)
    if parts == 1:
        merger = _StripMerger(scatter, None)
        _add_strips(X, merger)
        return merger.result()
    bounds = np.linspace(0, n, parts + 1).astype(int)
    lock = Lock()
    mergers = [_StripMerger(scatter, lock) for _ in range(parts)]
    with single_threaded_blas(), ThreadPoolExecutor(parts) as pool:
        list(pool.map(_add_strips, [X[a:b] for a, b in itertools.pairwise(bounds)], mergers))
    total = mergers[0]
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite input: callers check
        for merger in mergers[1:]:  # the parts' means, merged as their strips were
            merger.flush()
            total.add_mean(merger.count, merger.mean)
    return total.result()


class _StripMerger:
    """Chan's pairwise merge of strips' statistics into a running count, mean and scatter.

    Merging a strip of ``r`` rows with mean ``m_s`` and moments around ``s`` (``t = Σ (x - s)``,
    ``P = Σ (x - s)(x - s)ᵀ``, ``o = t / r``) into ``N`` rows with mean ``m`` adds
    ``P - r o oᵀ + (N r / (N + r)) δ δᵀ`` to the scatter, ``δ = m_s - m``. ``P`` goes into the
    (possibly shared) scatter at once; the strips' counts, means and offsets wait,
    :data:`PENDING_TERMS` at a time, for a few vector operations and two GEMMs (per strip, a
    ``d × d`` rank-one update would cost a pass over the scatter, and the small operations
    of a merge as much time as a narrow strip's product).
    """

    def __init__(self, scatter: np.ndarray, lock: Lock | None):
        d = scatter.shape[0]
        self.scatter = scatter
        self.lock = lock or contextlib.nullcontext()
        self.count = 0
        self.mean = np.zeros(d)
        self.pending = 0
        self.counts = np.empty(PENDING_TERMS)
        self.means = np.empty((PENDING_TERMS, d))
        self.offsets = np.empty((PENDING_TERMS, d))

    def add(self, product: np.ndarray, count: int, mean: np.ndarray, offset: np.ndarray) -> None:
        """Merge a strip: ``product = P``, its ``mean`` and ``offset = o``."""
        with self.lock:
            self.scatter += product
        self.add_mean(count, mean, offset)

    def add_mean(self, count: int, mean: np.ndarray, offset: np.ndarray | float = 0.0) -> None:
        """Merge the count and mean of rows whose ``P`` is already in ``scatter``."""
        i = self.pending
        self.counts[i] = count
        self.means[i] = mean
        self.offsets[i] = offset
        self.pending += 1
        if self.pending == PENDING_TERMS:
            self.flush()

    def flush(self) -> None:
        """Merge the pending strips in order: their means, then two GEMMs on the scatter.

        The running means before each strip come from cumulative sums of ``r (m_s - ref)``
        around the first mean ``ref`` (differences of the size of the data's spread), and the
        scatter gets ``Σ u uᵀ - Σ v vᵀ``, ``u = δ sqrt(N r / (N + r))``, ``v = o sqrt(r)``.
        """
        k, self.pending = self.pending, 0
        if k:
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # see below
                self._merge(k)

    def _merge(self, k: int) -> None:
        """:meth:`flush` of ``k`` strips (non-finite data or no rows before: NaN, or no term)."""
        counts, means = self.counts[:k], self.means[:k]
        reference = self.mean if self.count else means[0].copy()
        relative = means - reference
        totals = self.count + np.cumsum(counts)  # rows after each strip
        before = totals - counts
        sums = np.cumsum(relative * counts[:, None], axis=0)
        previous = np.empty_like(sums)  # Σ r (m - ref) before each strip
        previous[0] = (self.mean - reference) * self.count
        previous[1:] = sums[:-1] + previous[0]
        weights = np.sqrt(before * counts / totals)
        plus = (relative - previous / before[:, None]) * weights[:, None]
        plus[before == 0] = 0.0  # the first strip: nothing to merge with
        minus = self.offsets[:k] * np.sqrt(counts)[:, None]
        self.mean = reference + (sums[-1] + previous[0]) / totals[-1]
        self.count = int(totals[-1])
        gemm = scipy.linalg.get_blas_funcs("gemm", (plus,))
        with self.lock:  # the transpose is Fortran-ordered: updated in place (both symmetric)
            for sign, terms in ((1.0, plus), (-1.0, minus)):  # no stacked copy of the terms
                gemm(sign, terms.T, terms.T, beta=1.0, c=self.scatter.T, trans_b=1,
                     overwrite_c=1)

    def result(self) -> RowStatistics:
        """Return the statistics of every row merged."""
        self.flush()
        return RowStatistics(self.count, self.mean, self.scatter)


def _add_strips(block: np.ndarray, merger: _StripMerger) -> None:
    """Merge ``block``'s rows into ``merger``, strip by strip, each on its own rows.

    Float64 rows near the origin (judged on the first :data:`CHECK_ROWS`) are multiplied in
    place, their moments around the origin; every other strip is copied into a buffer
    shifted by its first row. Either is kept while the strip's mean lies within
    ``sqrt(RAW_RATIO)`` standard deviations of that origin in every column (``r o² <=
    RAW_RATIO · (spread)``: the centring then costs at most two digits). A strip that fails
    (the first row an outlier, say) is done again centred on its own mean, and so is every
    later strip of the block: data that fail once are shifted twice from then on (a pass
    over a strip in the cache, against a second product).
    """
    n, d = block.shape
    product = np.empty((d, d))
    sums = np.empty(d)
    # numpy computes Yᵀ Y on one buffer with syrk: safe while BLAS runs on one thread (tasks,
    # and the threads of centred_statistics); otherwise a copy makes it a GEMM.
    same_buffer = blas_single_threaded()
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite input: callers check
        if block.dtype == np.float64 and _near_origin(block[:CHECK_ROWS]):
            for start in range(0, n, RAW_STRIP_ROWS):
                Y = block[start : start + RAW_STRIP_ROWS]
                np.sum(Y, axis=0, out=sums)
                np.matmul(Y.T, Y if same_buffer else Y.copy(), out=product)
                sums /= len(Y)
                if not _centring_is_accurate(product, sums, len(Y)):  # NaN too
                    _add_shifted_strips(block[start:], merger, product, sums, same_buffer,
                                        centre=True)
                    return
                merger.add(product, len(Y), sums, sums)
            return
        _add_shifted_strips(block, merger, product, sums, same_buffer, centre=False)


def _centring_is_accurate(product: np.ndarray, offset: np.ndarray, count: int) -> bool:
    """Whether ``product - count · offset offsetᵀ`` keeps all but two digits of its diagonal.

    ``r o² <= RAW_RATIO (diag(P) - r o²)``, as ``r (1 + RAW_RATIO) o² <= RAW_RATIO diag(P)``.
    """
    squared = count * (1 + RAW_RATIO) * offset * offset
    return bool((squared <= RAW_RATIO * np.diagonal(product)).all())


def _add_shifted_strips(
    block: np.ndarray, merger: _StripMerger, product: np.ndarray, sums: np.ndarray,
    same_buffer: bool, centre: bool,
) -> None:
    """Merge ``block``'s rows strip by strip, shifted in a buffer (see :func:`_add_strips`).

    With ``centre`` (or once a strip failed) each strip is shifted again by the mean of the
    first shift; what that leaves of the strip's mean is rounding (``eps`` of the rows'
    distance to the first one), summed once more, so the mean is exact to rounding.
    """
    n, d = block.shape
    rows = strip_rows(d)
    buffer = np.empty((min(rows, n), d))
    for start in range(0, n, rows):
        Y = buffer[: min(rows, n - start)]
        first = block[start].astype(np.float64)
        np.subtract(block[start : start + rows], first, out=Y)
        np.sum(Y, axis=0, out=sums)
        sums /= len(Y)
        if not centre:
            np.matmul(Y.T, Y if same_buffer else Y.copy(), out=product)
            if _centring_is_accurate(product, sums, len(Y)):
                merger.add(product, len(Y), first + sums, sums)
                continue
            centre = True  # done again below, and every later strip centred at once
        Y -= sums
        shift = first + sums
        np.sum(Y, axis=0, out=sums)  # the rounding of the shift, kept exactly
        np.matmul(Y.T, Y if same_buffer else Y.copy(), out=product)
        sums /= len(Y)
        merger.add(product, len(Y), shift + sums, sums)


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
    >>> a, b = (centred_statistics(part) for part in (X[:30], X[30:]))
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
        """Return the statistics of rows from their moments around ``shift``.

        ``moments`` (``(d + 1) × d``: row 0 ``Σ (x - s)``, rows 1..d ``Σ (x - s)(x - s)ᵀ``) is
        used as the scatter's storage.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[1.0, 2.0], [3.0, 6.0]])
        >>> Y = X - X[0]
        >>> RowStatistics.from_moments(np.vstack([Y.sum(axis=0), Y.T @ Y]), X[0], 2).mean
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
