"""``select_model``: the RBF width and the number of components, by MDD, kPA or Shannon entropy.

The steps (MDD paper §IV and Fig. 8):

1. a training set (random rows, fixed-size FS2 landmarks or ICF pivots) and a validation set;
2. one pass over the data: the training rows, the four moments and the maximum of the
   distances from training to training ∪ validation points, and the feature variances for the
   rule of thumb (eq. 20) that centres the default grid;
3. the data's centred-kernel spectrum ``λ(σ²)`` on the training set, and ``n_draws`` noise
   spectra (MDD: drawn distance matrices; kPA: permuted training data), each draw an
   independent task seeded by ``SeedSequence.spawn`` and reusing its distances over the grid;
4. ``τ(σ²)`` = the per-index percentile of the noise spectra; ``n_c(σ²)`` by eq. (14),
   ``I_s(σ²)`` by eq. (15), and the ``σ²`` with the largest ``I_s``.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Sequence
from typing import Any

import dask
import numpy as np
import xarray as xr

from dkpca._device import configured_device
from dkpca._scattered import shared
from dkpca._typing import ArrayLike, RandomStateLike
from dkpca._validation import Interval, Options, check_random_state, validate_params
from dkpca.blocked import compute
from dkpca.io import as_dask, require_known_rows

from . import entropy, kpa, mdd
from ._distances import distance_moments
from ._spectra import centred_rbf_eigenvalues, squared_distances
from .result import ModelSelection
from .rules import default_sigma2_grid

__all__ = ["METHODS", "TRAININGS", "select_model"]

logger = logging.getLogger(__name__)

METHODS = ("mdd", "kpa", "shannon")
TRAININGS = ("random", "fs2", "icf")

#: Shannon's default grid: from 100 times below to 100 times above the rule of thumb.
SHANNON_GRID_DECADES = 2.0
SHANNON_GRID_POINTS = 41

#: Default training-set size cap: every draw holds and decomposes ``n_t × n_t`` matrices.
MAX_DEFAULT_TRAIN = 1000

_CONSTRAINTS = {
    "method": [Options(set(METHODS))],
    "n_components": [Interval("int", 1, None), None],
    "n_draws": [Interval("int", 1, None)],
    "percentile": [Interval("real", 0, 100, closed="neither")],
    "n_train": [Interval("int", 3, None), None],
    "max_components": [Interval("int", 1, None), None],
    "entropy_bins": [Interval("int", 2, None)],
    "icf_tol": [Interval("real", 0, None, closed="neither"), None],
}


def _pick_training(Xd, training, n_train, has_validation, rng, rule_of_thumb, icf_tol):
    """Return ``(index, train)``; ``train`` is in memory, or ``None`` to gather lazily."""
    n = Xd.shape[0]
    if not isinstance(training, str):
        given = np.asarray(training)
        if given.size and (given.ndim != 1 or given.dtype.kind not in "biu"):
            raise ValueError(f"select_model: training rows must be a 1-D sequence of integer "
                             f"row indices or a boolean mask, got a {given.ndim}-D "
                             f"{given.dtype} array of shape {given.shape}; pass integer "
                             f"indices (e.g. np.flatnonzero(mask)) rather than floats")
        if given.dtype == bool:  # a mask: its True rows
            if given.shape != (n,):
                raise ValueError(f"select_model: a boolean training mask needs one entry per "
                                 f"row of X ({n}), got shape {given.shape}")
            given = np.flatnonzero(given)
        if n_train is not None:
            raise ValueError(f"select_model: n_train={n_train} and training given as rows "
                             f"({given.size}) conflict; the rows fix the training set, so "
                             f"leave n_train unset")
        index = np.unique(given.astype(np.int64))
        if index.size < 3 or index[0] < 0 or index[-1] >= n:
            raise ValueError(f"select_model: training must hold at least 3 row indices in "
                             f"[0, {n}), got {index.size} rows from {index[:1]} to {index[-1:]}")
        return index, None
    if training not in TRAININGS:
        raise ValueError(f"select_model: training must be one of {TRAININGS} or row indices, "
                         f"got {training!r}")
    n_train = training_count(n, n_train, has_validation)
    if training == "random":
        return np.sort(rng.choice(n, n_train, replace=False)), None
    if training == "fs2":
        from dkpca.solvers.fixed_size import select_fixed_size

        chosen = select_fixed_size(Xd, n_train, "renyi_kmeans", rng=rng)
        return chosen.index, np.asarray(chosen.landmarks, dtype=np.float64)
    from dkpca.kernels import RBF
    from dkpca.solvers.icf import incomplete_cholesky

    chosen = incomplete_cholesky(RBF(sigma2=rule_of_thumb), Xd, tol=icf_tol, max_rank=n_train)
    order = np.argsort(chosen.index)
    return chosen.index[order], np.asarray(chosen.pivots, dtype=np.float64)[order]


def training_count(n: int, n_train: int | None, has_validation: bool) -> int:
    """Return the training rows ``select_model`` draws from ``n`` (``n_train``, or its default).

    Raises ``ValueError`` when that is fewer than 3 or more than ``n``.

    Examples
    --------
    >>> training_count(2000, None, True), training_count(2000, 300, False)
    (1000, 300)
    """
    if n_train is None:
        n_train = min(MAX_DEFAULT_TRAIN, n // 2 if has_validation else n)
        if n_train < 3:
            needed = "6 (3 to train on, the rest to validate)" if has_validation else "3"
            raise ValueError(f"select_model: X has {n} samples; model selection needs at "
                             f"least {needed}")
    if n_train < 3 or n_train > n:
        raise ValueError(f"select_model: need 3 <= n_train <= n_samples = {n}, got {n_train}")
    return n_train


def validation_count(validation: float, rest: int) -> int:
    """Return the validation rows a count or fraction asks for among ``rest`` outside training.

    An int is a count, a float a fraction; ``0`` and ``0.0`` both ask for none. Raises
    ``ValueError`` when that is more than ``rest`` (or the fraction is not in [0, 1]).

    Examples
    --------
    >>> validation_count(0.5, 1000), validation_count(200, 1000), validation_count(0.0, 1000)
    (500, 200, 0)
    """
    if isinstance(validation, numbers.Integral):
        count = int(validation)
    else:
        count = round(float(validation) * rest) if 0 <= validation <= 1 else -1
    if not 0 <= count <= rest:
        raise ValueError(f"select_model: validation={validation!r} asks for more than the "
                         f"{rest} rows outside the training set (or is not a fraction in "
                         f"[0, 1])")
    return count


def _has_validation(validation: Any) -> bool:
    """Whether ``validation`` asks for any validation points: not ``None``, ``0`` or ``0.0``.

    Examples
    --------
    >>> _has_validation(0), _has_validation(0.0), _has_validation(None), _has_validation(0.5)
    (False, False, False, True)
    """
    if isinstance(validation, numbers.Real) and not isinstance(validation, bool):
        return validation != 0
    return validation is not None


def _check_components(n_components: int | None, n_train: int) -> None:
    """Refuse more components than ``n_train - 1`` (a centred kernel's rank)."""
    if n_components is not None and n_components > n_train - 1:
        raise ValueError(f"select_model: n_components={n_components} exceeds n_train - 1 = "
                         f"{n_train - 1}")


def check_counts(n: int, n_train: int | None, validation: Any, n_components: int | None,
                 training: Any = "random") -> None:
    """Make the checks of ``select_model`` on its counts that need only ``n``, beforehand.

    For a command that can make them before it starts a cluster: ``n_train`` (or its default)
    against ``n``, ``n_components`` against it, and a validation count or fraction against the
    rows left. Row indices given as ``training`` are checked by ``select_model`` itself.

    Examples
    --------
    >>> check_counts(2000, 5000, "rest", None)
    Traceback (most recent call last):
    ...
    ValueError: select_model: need 3 <= n_train <= n_samples = 2000, got 5000
    """
    if not isinstance(training, str):
        return
    count = training_count(n, n_train, _has_validation(validation))
    _check_components(n_components, count)
    if isinstance(validation, numbers.Real) and not isinstance(validation, bool):
        validation_count(validation, n - count)


def _validation_set(Xd, validation, index, rng):
    """Return ``(others, others_include_train, n_validation)`` for the distance moments."""
    n = Xd.shape[0]
    rest = n - index.size
    if isinstance(validation, str):
        if validation != "rest":
            raise ValueError(f"select_model: validation must be 'rest', None, a count, a "
                             f"fraction or an array, got {validation!r}")
        return (Xd, True, rest) if rest else (None, False, 0)
    if validation is None:
        return None, False, 0
    if isinstance(validation, numbers.Real) and not isinstance(validation, bool):
        count = validation_count(validation, rest)
        if count == 0:
            return None, False, 0
        outside = np.setdiff1d(np.arange(n), index, assume_unique=True)
        return Xd[np.sort(rng.choice(outside, count, replace=False))], False, count
    others = as_dask(validation, name="validation")
    if others.shape[1] != Xd.shape[1]:
        raise ValueError(f"select_model: validation has {others.shape[1]} features, X has "
                         f"{Xd.shape[1]}")
    return others, False, others.shape[0]


def _check_grid(sigma2_grid: Sequence[float]) -> np.ndarray:
    """Return the grid sorted and unique; refuse anything but positive finite numbers.

    A scalar is a grid of one; a nested sequence (``ndim > 1``) is refused, not flattened.
    """
    try:
        values = np.asarray(sigma2_grid, dtype=np.float64)
    except (TypeError, ValueError):
        values = np.array([np.nan])
    if values.ndim > 1:
        raise ValueError(f"select_model: sigma2_grid must be a 1-D sequence of widths, got "
                         f"shape {values.shape}; pass one flat list, e.g. "
                         f"np.ravel(sigma2_grid) if every value is meant")
    grid = np.unique(values.ravel())
    if grid.size == 0 or not np.all(np.isfinite(grid)) or grid[0] <= 0:
        raise ValueError(f"select_model: sigma2_grid must hold positive finite values, got "
                         f"{sigma2_grid!r}")
    return grid


def _check_spread(rule: float, sq_distances: np.ndarray) -> None:
    """Refuse data (or training rows) whose points are all equal: no width has meaning.

    Every method's kernel matrices are then constant, their centred spectra zero; the rule of
    thumb is zero and a default grid would divide by it.
    """
    if not rule > 0:
        raise ValueError("select_model: all distances are equal; the data have no spread.")
    if not sq_distances.max(initial=0.0) > 0:
        raise ValueError("select_model: all distances are equal; the data have no spread "
                         f"among the {len(sq_distances)} training rows (they are all the "
                         "same row); choose training rows that differ")


def _spectra(method, seeds, train, sq_distances, moments, grid, k, percentile):
    """``(λ, τ)``, each ``(len(grid), k)``: the data's and the noise's percentile spectra.

    One compute: the data's spectra and every draw are independent tasks.
    """
    n_t = train.shape[0]
    device = configured_device()  # the eigenproblems' device; the draws are made on the host
    data = dask.delayed(centred_rbf_eigenvalues, pure=True)(shared(sq_distances), grid, k,
                                                            device)
    if method == "kpa":
        rows = shared(train)
        draws = [dask.delayed(kpa.permutation_spectra, pure=True)(s, rows, grid, k, device)
                 for s in seeds]
    else:
        draws = [dask.delayed(mdd.noise_spectra, pure=True)(s, moments, n_t, grid, k, device)
                 for s in seeds]
    logger.info("select_model: %s, %d draws over %d sigma2 values of %d x %d matrices",
                method, len(seeds), len(grid), n_t, n_t)
    lam, *noise = compute(data, *draws)
    return lam, np.percentile(np.stack(noise), percentile, axis=0)


def select_model(
    X: ArrayLike,
    method: str = "mdd",
    *,
    sigma2_grid: Sequence[float] | None = None,
    n_components: int | None = None,
    n_draws: int = 100,
    percentile: float = 95.0,
    training: str | Sequence[int] = "random",
    n_train: int | None = None,
    validation: str | float | ArrayLike | None = "rest",
    max_components: int | None = None,
    entropy_bins: int = entropy.DEFAULT_BINS,
    icf_tol: float | None = None,
    random_state: RandomStateLike = None,
) -> ModelSelection:
    """Choose the RBF width ``σ²`` and the number of kernel principal components.

    Parameters
    ----------
    X : array-like, dask array, DataArray or Zarr path
        ``(n_samples, n_features)``; read once (plus the training-set search for ``"fs2"`` and
        ``"icf"``).
    method : {"mdd", "kpa", "shannon"}, default="mdd"
        ``"mdd"``: noise spectra from distance matrices drawn from the Pearson distribution with
        the data's distance moments (Varon, Alzate & Suykens 2015). ``"kpa"``: kernel parallel
        analysis, noise from the training data with every feature permuted (Jørgensen & Hansen
        2012). ``"shannon"``: ``σ²`` maximising the Shannon entropy of the kernel matrix's values
        (Widjaja et al. 2012), then the number of components by MDD at that ``σ²``.
    sigma2_grid : sequence of float, optional
        Widths to try (1-D), in ``exp(-||x - y||² / (2σ²))``. Default: 20 log-spaced values from a
        tenth to ten times the rule of thumb eq. (20) (:func:`default_sigma2_grid`); with
        ``training="icf"``, the rule of thumb alone (the pivots depend on ``σ²``, as in the
        paper).
    n_components : int, optional
        Fix the number of components and choose only ``σ²`` (maximising ``I_s`` over that many
        components).
    n_draws : int, default=100
        Monte Carlo draws (MDD) or permutations (kPA), run as parallel tasks.
    percentile : float, default=95
        The noise spectrum is this percentile, per index, of the draws' eigenvalues.
    training : {"random", "fs2", "icf"}, sequence of int or boolean mask, default="random"
        The training set: ``n_train`` random rows; ``n_train`` fixed-size landmarks maximising
        the quadratic Renyi entropy (FS2, k-means start); the pivots of an incomplete Cholesky
        factorisation at the rule-of-thumb width (``icf_tol``, at most ``n_train`` pivots); or
        explicit rows, as integer indices or as a boolean mask with one entry per row of
        ``X`` (floats are refused, not truncated).
    n_train : int, optional
        Training-set size. Default: half the rows (all of them without validation), at most
        1000 — each draw decomposes ``n_train × n_train`` matrices. Not with explicit
        ``training`` rows, which fix the size.
    validation : "rest", None, int, float or array-like, default="rest"
        The points the training distances also run to: every row outside the training set;
        none; that many (an int) or that fraction (a float in [0, 1]) of random rows outside
        it; or separate data. ``0`` and ``0.0`` ask for none, as ``None`` does (and so leave
        the default ``n_train`` at all the rows).
    max_components : int, optional
        Compute only this many leading eigenvalues (default: all ``n_train``); components are
        then counted up to it. At least ``n_components`` when both are given.
    entropy_bins : int, default=100
        Histogram bins of ``[0, 1]`` for ``method="shannon"``.
    icf_tol : float, optional
        For ``training="icf"``: the residual trace at which pivoting stops (default
        ``1e-3 · n``, see :func:`dkpca.solvers.icf.incomplete_cholesky`).
    random_state : int, Generator or None
        Seeds every random choice; the result does not depend on the scheduler or the number
        of workers.

    Returns
    -------
    ModelSelection
        ``.sigma2``, ``.n_components``, ``.table``, ``.plot()``, ``.to_kpca()``.

    Raises
    ------
    ValueError
        For bad parameters; and, whatever the method, when the data (or the training rows)
        have no spread: all their points equal, so every kernel matrix is constant.

    References
    ----------
    C. Varon, C. Alzate and J. A. K. Suykens, "Noise level estimation for model selection in
    kernel PCA denoising", IEEE Trans. Neural Networks and Learning Systems 26(11),
    2650–2663, 2015 (the "MDD paper").

    Examples
    --------
    >>> from dkpca.datasets import make_square
    >>> X, _, _ = make_square(600, random_state=0)
    >>> mdd = select_model(X, n_draws=20, n_train=200, random_state=0)
    >>> kpa = select_model(X, "kpa", n_draws=20, n_train=200, random_state=0)
    >>> mdd.n_components > kpa.n_components
    True
    """
    params = {"method": method, "n_components": n_components, "n_draws": n_draws,
              "percentile": percentile, "n_train": n_train, "max_components": max_components,
              "entropy_bins": entropy_bins, "icf_tol": icf_tol}
    validate_params(params, _CONSTRAINTS, "select_model")
    if n_components is not None and max_components is not None and n_components > max_components:
        raise ValueError(f"select_model: n_components={n_components} exceeds "
                         f"max_components={max_components}, the most eigenvalues computed; "
                         f"raise max_components or leave it unset")
    Xd = require_known_rows(as_dask(X), owner="select_model")
    streams = check_random_state(random_state).spawn(3)
    rng_train, rng_valid = (np.random.default_rng(s) for s in streams[:2])
    variances = Xd.astype(np.float64).var(axis=0, ddof=1)
    rule = None
    if isinstance(training, str) and training == "icf":  # the pivots need the width first
        rule = float(compute(0.1 * variances.sum())[0])
        _check_spread(rule, np.ones(1))
    index, train = _pick_training(Xd, training, n_train, _has_validation(validation), rng_train,
                                  rule, icf_tol)
    n_t = index.size
    _check_components(n_components, n_t)
    others, include_train, n_valid = _validation_set(Xd, validation, index, rng_valid)
    if train is None:  # gathered in the same pass as the moments and the variances
        train = dask.delayed(np.asarray)(Xd[index].astype(np.float64).rechunk({0: -1}))
    sq_distances = dask.delayed(squared_distances, pure=True)(train)
    moments = None if method == "kpa" else distance_moments(
        train, sq_distances, n_t, others, others_include_train=include_train)
    lazy_rule = 0.1 * variances.sum() if rule is None else rule
    train, sq_distances, moments, rule = compute(train, sq_distances, moments, lazy_rule)
    rule = float(rule)
    _check_spread(rule, sq_distances)
    if sigma2_grid is not None:
        grid = _check_grid(sigma2_grid)
    elif isinstance(training, str) and training == "icf":
        grid = np.array([rule])
    elif method == "shannon":  # entropies are cheap, and their peak often lies past 10x
        grid = default_sigma2_grid(rule, SHANNON_GRID_POINTS, SHANNON_GRID_DECADES)
    else:
        grid = default_sigma2_grid(rule)
    k = n_components or min(max_components or n_t - 1, n_t - 1)
    seeds = streams[2].spawn(n_draws)
    table_attrs = {"method": method, "n_draws": n_draws, "percentile": float(percentile),
                   "n_train": n_t, "n_validation": n_valid, "rule_of_thumb": rule,
                   "training": training if isinstance(training, str) else "given"}
    if moments is not None:
        table_attrs.update({f"distance_{k_}": v for k_, v in vars(moments).items()})
    if method == "shannon":
        H = entropy.kernel_entropy(sq_distances, grid, entropy_bins)
        chosen = int(np.argmax(H))
        lam_c, tau_c = _spectra("mdd", seeds, train, sq_distances, moments, grid[[chosen]], k,
                                percentile)
        lam = np.full((grid.size, k), np.nan)
        tau = lam.copy()
        lam[chosen], tau[chosen] = lam_c[0], tau_c[0]
    else:
        H = None
        lam, tau = _spectra(method, seeds, train, sq_distances, moments, grid, k, percentile)
    return _decide(method, grid, lam, tau, H, n_components, index, table_attrs)


def _decide(method, grid, lam, tau, H, n_components, index, attrs) -> ModelSelection:
    if n_components is None:
        counts = mdd.components_above_noise(lam, tau)
    else:
        counts = np.full(grid.size, n_components)
    valid = ~np.isnan(lam[:, 0])
    info = np.full(grid.size, np.nan)
    info[valid] = mdd.structural_information(lam[valid], tau[valid], counts[valid])
    counts = np.where(valid, counts, -1)
    if method == "shannon":
        best = int(np.argmax(H))
    else:
        best = int(np.nanargmax(info))
    sigma2, n_c = float(grid[best]), int(counts[best])
    if grid.size > 1 and best in (0, grid.size - 1) and (n_c > 0 or method == "shannon"):
        logger.warning("select_model (%s): the choice sigma2=%.4g is at the edge of the grid; "
                       "extend sigma2_grid beyond it", method, sigma2)
    if n_components is None and n_c == 0:
        sigma2 = None if method != "shannon" else sigma2
        logger.warning("select_model (%s): no component rises above the noise", method)
    elif n_components is not None and info[best] <= 0:
        logger.warning("select_model (%s): at every sigma2 the noise exceeds the data over %d "
                       "components", method, n_components)
    attrs = dict(attrs, sigma2=np.nan if sigma2 is None else sigma2, n_components=n_c)
    component = np.arange(1, lam.shape[1] + 1)
    data_vars = {
        "data_eigenvalues": (("sigma2", "component"), lam),
        "noise_eigenvalues": (("sigma2", "component"), tau),
        "n_components": ("sigma2", counts),
        "information": ("sigma2", info),
    }
    if H is not None:
        data_vars["entropy"] = ("sigma2", H)
    table = xr.Dataset(data_vars, coords={"sigma2": grid, "component": component}, attrs=attrs)
    return ModelSelection(method=method, sigma2=sigma2, n_components=n_c, table=table,
                          training_index=index)

