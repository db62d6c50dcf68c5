"""Pairwise independence of projections: a mutual-information permutation test (§3).

Coordinate-wise renormalisation (:mod:`dkpca.generalization.renormalize`) is only sound when
the kernel PCA components are independent, not merely uncorrelated. Abrahamsen & Hansen test
every pair of components with a permutation test of their mutual information (Moddemeijer,
1989): if the null hypothesis is rejected for no more pairs than the significance level
predicts, the components may be renormalised one by one.

The mutual information of a pair is the plug-in estimate from an equal-width 2-D histogram. It
is biased upwards, but the permutation test compares it with the same estimate on permuted
data, so the bias cancels. The pairs run as dask tasks, each with its own random stream.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import dask
import numpy as np
from scipy.special import xlogy

from dkpca._scattered import shared
from dkpca._typing import ArrayLike, RandomStateLike
from dkpca._validation import Interval, check_random_state, validate_params
from dkpca.blocked import compute

__all__ = ["IndependenceResult", "default_bins", "independence_test", "mutual_information"]

logger = logging.getLogger(__name__)

#: Most dask tasks one test is split into.
MAX_TASKS = 64

#: Most permuted labels held at once inside a task (int64 entries).
PERMUTATION_BLOCK = 2**21

_CONSTRAINTS: dict = {
    "n_permutations": [Interval("int", 1, None)],
    "alpha": [Interval("real", 0, 1, closed="neither")],
    "n_bins": [Interval("int", 2, None), None],
}


@dataclass(frozen=True)
class IndependenceResult:
    """Outcome of :func:`independence_test`.

    Attributes
    ----------
    mutual_information : ndarray of shape (q, q)
        Histogram estimate of the mutual information of each pair, in nats; symmetric, NaN on
        the diagonal.
    p_values : ndarray of shape (q, q)
        Permutation p-values, symmetric, NaN on the diagonal.
    rejected : ndarray of shape (q, q), bool
        ``p_values <= alpha`` (False on the diagonal); no correction for multiple tests.
    fraction_rejected : float
        Share of the ``q(q-1)/2`` pairs rejected; near ``alpha`` for independent components.
    alpha : float
        Significance level.
    n_permutations : int
        Permutations per pair.
    n_bins : int
        Histogram bins per axis.
    """

    mutual_information: np.ndarray
    p_values: np.ndarray
    rejected: np.ndarray
    fraction_rejected: float
    alpha: float
    n_permutations: int
    n_bins: int


def default_bins(n: int) -> int:
    """Bins per axis for ``n`` points: ``max(2, round(n ** (1/3)))``.

    A choice, not the paper's: a cube-root rule (as in Rice's rule for 1-D histograms) keeps
    about ``n^(1/3)`` points per cell of the ``b × b`` joint histogram, so the cells stay
    populated as ``n`` grows while the resolution grows too.

    Examples
    --------
    >>> default_bins(1000), default_bins(5)
    (10, 2)
    """
    return max(2, round(n ** (1 / 3)))


def _as_real(values: ArrayLike, name: str, owner: str) -> np.ndarray:
    """Return ``values`` as a float64 array; refuse complex, string and other non-real data.

    Maintenance note: check before the float64 cast, which would drop an imaginary part (with
    only a ``ComplexWarning``) and parse numeric strings.
    """
    X = np.asarray(values)
    if np.iscomplexobj(X):
        raise ValueError(f"Complex data not supported: {owner}: {name} has complex dtype "
                         f"{X.dtype}; pass real data (e.g. np.abs({name}) or {name}.real)")
    message = (f"{owner}: {name} must hold real numbers, got dtype {X.dtype}; convert it "
               "to a float array first")
    if X.dtype.kind in "SU":
        raise ValueError(message)
    try:
        return X.astype(np.float64, copy=False)
    except (TypeError, ValueError):
        raise ValueError(message) from None


def _finite(values: ArrayLike, name: str, owner: str) -> np.ndarray:
    """Return ``values`` as a float64 array; refuse it empty or with NaN or infinity."""
    X = _as_real(values, name, owner)
    if X.size == 0:
        raise ValueError(f"{owner}: {name} is empty (shape {X.shape}); pass at least one point")
    if not np.isfinite(X).all():
        raise ValueError(f"{owner}: {name} holds NaN or infinite values; drop or impute them "
                         "first")
    return X


def _bin_indices(x: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bins over ``[min, max]``, the last one closed (as :func:`numpy.histogram`)."""
    low, high = float(x.min()), float(x.max())
    if low == high:
        return np.zeros(x.size, dtype=np.int64)
    edges = np.linspace(low, high, n_bins + 1)
    return np.clip(np.searchsorted(edges, x, side="right") - 1, 0, n_bins - 1)


def _mi_from_counts(joint_xlogx: np.ndarray, margins_xlogx: float, n: int) -> np.ndarray:
    """``I = (Σ c log c + n log n - Σ cx log cx - Σ cy log cy) / n`` from the joint counts."""
    return (joint_xlogx + xlogy(n, n) - margins_xlogx) / n


def mutual_information(x: ArrayLike, y: ArrayLike, n_bins: int | None = None) -> float:
    """Histogram estimate of the mutual information of two samples, in nats.

    ``I = Σ p_ij log(p_ij / (p_i p_j))`` over an equal-width ``n_bins × n_bins`` histogram of
    the ranges of ``x`` and ``y`` (the bins of :func:`numpy.histogram2d`); ``n_bins`` defaults
    to :func:`default_bins`.

    Parameters
    ----------
    x, y : array-like of shape (n,)
        Two samples of the same non-zero length (flattened), finite.
    n_bins : int, optional
        Bins per axis, at least 2; default :func:`default_bins` of ``n``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``x`` or ``y`` is empty, complex, not numeric (strings included) or holds NaN or
        infinity, their lengths differ, or ``n_bins < 2``; the same checks as
        :func:`independence_test`.

    Examples
    --------
    >>> x = np.arange(8.0)
    >>> round(mutual_information(x, x, n_bins=2), 4)  # log 2
    0.6931
    >>> round(mutual_information(x, x % 2, n_bins=2), 4)
    0.0
    """
    validate_params({"n_bins": n_bins}, {"n_bins": _CONSTRAINTS["n_bins"]},
                    "mutual_information")
    x = _as_real(x, "x", "mutual_information").ravel()
    y = _as_real(y, "y", "mutual_information").ravel()
    if x.size != y.size:
        raise ValueError(f"mutual_information: x and y differ in length: {x.size} and {y.size}")
    x, y = _finite(x, "x", "mutual_information"), _finite(y, "y", "mutual_information")
    n = x.size
    b = default_bins(n) if n_bins is None else n_bins
    ix, iy = _bin_indices(x, b), _bin_indices(y, b)
    joint = np.bincount(ix * b + iy, minlength=b * b)
    margins = xlogy(np.bincount(ix), np.bincount(ix)).sum()
    margins += xlogy(np.bincount(iy), np.bincount(iy)).sum()
    return float(_mi_from_counts(xlogy(joint, joint).sum(), margins, n))


def _pair_test(
    ix: np.ndarray, iy: np.ndarray, n_bins: int, n_permutations: int, seed: np.random.SeedSequence
) -> tuple[float, float]:
    """Mutual information of one pair of binned components and its permutation p-value.

    Permuting ``y`` keeps both marginal histograms, so only ``Σ c log c`` over the joint counts
    changes; the joint counts of a block of permutations come from one :func:`numpy.bincount`
    over the combined indices ``(permutation, bin_x, bin_y)``.
    """
    n, cells = ix.size, n_bins * n_bins
    margins = xlogy(np.bincount(ix), np.bincount(ix)).sum()
    margins += xlogy(np.bincount(iy), np.bincount(iy)).sum()
    joint = np.bincount(ix * n_bins + iy, minlength=cells)
    observed = xlogy(joint, joint).sum()
    rng = np.random.default_rng(seed)
    base = ix * n_bins
    block = max(1, PERMUTATION_BLOCK // n)
    exceed = 0
    # the same tables summed in another cell order may differ in the last bits: count those
    tolerance = 1e-9 * max(1.0, abs(observed))
    # rows of copies of iy, each then shuffled; filled by a broadcast copy, which releases the
    # GIL (numpy.tile holds it: 3 % of a task's time, a limit on many threads)
    labels = np.empty((min(block, n_permutations), n), dtype=iy.dtype)
    for start in range(0, n_permutations, block):
        size = min(block, n_permutations - start)
        permuted = labels[:size]
        permuted[...] = iy
        rng.permuted(permuted, axis=1, out=permuted)
        codes = permuted + base + (np.arange(size) * cells)[:, None]
        counts = np.bincount(codes.ravel(), minlength=size * cells).reshape(size, cells)
        exceed += int(np.count_nonzero(xlogy(counts, counts).sum(axis=1) >= observed - tolerance))
    mi = float(_mi_from_counts(observed, margins, n))
    return max(mi, 0.0), (1 + exceed) / (1 + n_permutations)


def _pair_batch(
    bins: np.ndarray, pairs: Sequence[tuple[int, int]], seeds: Sequence[np.random.SeedSequence],
    n_bins: int, n_permutations: int,
) -> np.ndarray:
    """Run :func:`_pair_test` for a batch of pairs; rows ``(mi, p)``."""
    return np.array([
        _pair_test(bins[i], bins[j], n_bins, n_permutations, seed)
        for (i, j), seed in zip(pairs, seeds, strict=True)
    ]).reshape(-1, 2)


def independence_test(
    scores: ArrayLike,
    n_permutations: int = 1000,
    alpha: float = 0.05,
    *,
    n_bins: int | None = None,
    random_state: RandomStateLike = None,
) -> IndependenceResult:
    """Test every pair of components for independence by a mutual-information permutation test.

    For each pair ``(i, j)`` the mutual information of the two columns is estimated from an
    equal-width 2-D histogram (:func:`mutual_information`), and compared with its values after
    ``n_permutations`` random permutations of column ``j``:
    ``p = (1 + #{I_perm >= I_obs}) / (1 + n_permutations)``. Each pair draws from its own child
    of the random state's :class:`numpy.random.SeedSequence`, so the result does not depend on
    the scheduler or on how the pairs are grouped into (at most 64) dask tasks.

    Parameters
    ----------
    scores : array-like of shape (n, q)
        Projections, ``n >= 3`` points and ``q >= 2`` components, real; brought into memory.
    n_permutations : int, default=1000
        Permutations per pair.
    alpha : float, default=0.05
        Significance level, in (0, 1).
    n_bins : int, optional
        Histogram bins per axis (at least 2); default :func:`default_bins` of ``n``.
    random_state : int, Generator, RandomState or None
        Seed of the permutations.

    Returns
    -------
    IndependenceResult

    Raises
    ------
    ValueError
        If ``scores`` is not 2-D with ``n >= 3`` and ``q >= 2``, is complex (the imaginary part
        is not dropped), not numeric (strings included) or holds NaN or infinity; or a
        parameter is out of range.

    References
    ----------
    T. J. Abrahamsen and L. K. Hansen, "A cure for variance inflation in high dimensional
    kernel principal component analysis", Journal of Machine Learning Research 12,
    2027–2044, 2011 (the "LOO paper").

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=500)
    >>> scores = np.column_stack([x, rng.normal(size=500), x**2 + 0.1 * rng.normal(size=500)])
    >>> result = independence_test(scores, n_permutations=200, random_state=0)
    >>> result.rejected
    array([[False, False,  True],
           [False, False, False],
           [ True, False, False]])
    >>> round(float(result.p_values[0, 2]), 4), round(result.fraction_rejected, 4)
    (0.005, 0.3333)
    """
    validate_params(
        {"n_permutations": n_permutations, "alpha": alpha, "n_bins": n_bins},
        _CONSTRAINTS, "independence_test",
    )
    X = _as_real(scores, "scores", "independence_test")
    if X.ndim != 2:
        raise ValueError(f"independence_test: scores must be 2-D (n, q), got shape {X.shape}")
    n, q = X.shape
    if q < 2:
        raise ValueError(f"independence_test: need at least 2 components, got shape {X.shape}")
    if n < 3:
        raise ValueError(f"independence_test: need at least 3 points, got shape {X.shape}")
    _finite(X, "scores", "independence_test")
    b = default_bins(n) if n_bins is None else int(n_bins)
    bins = np.stack([_bin_indices(X[:, d], b) for d in range(q)])
    pairs = [(i, j) for i in range(q) for j in range(i + 1, q)]
    seeds = check_random_state(random_state).spawn(len(pairs))
    per_task = math.ceil(len(pairs) / MAX_TASKS)
    bin_table = shared(bins)  # one graph key, sent to the workers once
    tasks = [
        dask.delayed(_pair_batch)(
            bin_table, pairs[k:k + per_task], seeds[k:k + per_task], b, n_permutations
        )
        for k in range(0, len(pairs), per_task)
    ]
    results = np.concatenate(compute(*tasks))
    mi = np.full((q, q), np.nan)
    p = np.full((q, q), np.nan)
    rows, cols = np.array(pairs).T
    mi[rows, cols] = mi[cols, rows] = results[:, 0]
    p[rows, cols] = p[cols, rows] = results[:, 1]
    rejected = np.zeros((q, q), dtype=bool)
    rejected[rows, cols] = rejected[cols, rows] = results[:, 1] <= alpha
    fraction = float(np.mean(results[:, 1] <= alpha))
    logger.info("independence test: %d of %d pairs rejected at alpha=%g (%d permutations, "
                "%d bins)", round(fraction * len(pairs)), len(pairs), alpha,
                n_permutations, b)
    return IndependenceResult(mi, p, rejected, fraction, float(alpha), int(n_permutations), b)
