"""The training fields laid out as the model's matrix: grids, land, NaN policy, scales.

:func:`lay_out` is what :meth:`FieldModel.fit` and the first :meth:`FieldModel.partial_fit`
do before the estimator sees any data, one job per function: flatten each variable to samples ×
grid points, take every statistic in one pass, sort the NaNs (land: NaN at every sample; empty
samples; NaNs scattered among valid data), apply ``nan_policy``, then build the layout and the
matrix (in a floating dtype: float32 stays float32, integers become floats). Standardising
under ``nan_policy="drop_samples"`` takes the standard deviations again, over the samples kept,
in a second pass.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr

from ._checks import check_weights_grid, positions
from ._grid import (
    GridLayout,
    _flat,
    as_variables,
    build_layout,
    check_samples_aligned,
    float_dtype,
)

__all__ = ["all_rows", "lay_out", "sample_template"]


@dataclass
class _Flattened:
    """Each variable as samples × grid points, with its grid's shape and dimensions."""

    pairs: list
    flats: list
    shapes: list[tuple[int, ...]]
    dims: list[tuple[str, ...]]


@dataclass
class _NaNs:
    """Where the training fields have NaNs, per variable (grid points) and over all (samples)."""

    land: list[np.ndarray]
    scattered: list[np.ndarray]
    empty_samples: np.ndarray
    scattered_samples: np.ndarray


def lay_out(data: Any, sample_dims: tuple[str, ...], weights: Any, standardize: bool,
            nan_policy: str) -> tuple[GridLayout, Any, np.ndarray, xr.DataArray]:
    """Lay out the training fields; return the layout, the matrix, its rows and a template.

    The layout holds the grids, land, weights and scales; the matrix ``X`` has every sample
    and the kept grid points, scaled; the rows are the samples the model is fitted on; the
    template is an empty DataArray over the sample dimensions, for the scores.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> field = xr.DataArray(np.arange(12.0).reshape(4, 3), dims=("time", "x"))
    >>> field[:, 0] = np.nan  # land
    >>> layout, X, rows, template = lay_out(field, ("time",), None, False, "raise")
    >>> X.shape, rows.tolist(), template.dims
    ((4, 2), [True, True, True, True], ('time',))
    """
    flattened = _flatten(data, sample_dims)
    feature_nans, sample_nans, stds = _statistics(flattened.flats, standardize)
    nans = _sort_nans(feature_nans, sample_nans, flattened.flats[0].shape[0])
    template = sample_template(flattened.pairs[0][1], sample_dims)
    if nan_policy == "raise":
        _refuse_scattered(nans, flattened, template)
    masks = [~m for m in nans.land]
    if nan_policy == "drop_features":
        masks = [m & ~s for m, s in zip(masks, nans.scattered, strict=True)]
    rows = ~nans.empty_samples
    if nan_policy == "drop_samples":
        rows &= ~nans.scattered_samples
        if standardize and nans.scattered_samples.any():
            # the standard deviations over the samples fitted, not those left out (a second
            # pass, only here: which samples those are is known after the first)
            stds = _stds([f[rows] for f in flattened.flats])
    check_weights_grid(flattened.pairs, sample_dims, weights)
    layout = build_layout(data, sample_dims, weights, _scales(stds, masks), masks, nans.land)
    if not layout.kept.any():
        raise ValueError("no grid point has data at every training sample")
    flats = flattened.flats
    full = flats[0] if len(flats) == 1 else (
        da.concatenate(flats, axis=1) if any(isinstance(f, da.Array) for f in flats)
        else np.concatenate(flats, axis=1))
    return layout, layout.features(full), rows, template


def _flatten(data: Any, sample_dims: tuple[str, ...]) -> _Flattened:
    kind, pairs = as_variables(data)
    plain = GridLayout(kind, sample_dims)
    flats, shapes, dims = [], [], []
    for _, array in pairs:
        feature_dims = plain.feature_dims(array)
        flats.append(_flat(array, sample_dims, feature_dims))
        shapes.append(tuple(array.sizes[d] for d in feature_dims))
        dims.append(feature_dims)
    check_samples_aligned(pairs, sample_dims)  # a list's variables are joined by position
    return _Flattened(pairs, flats, shapes, dims)


def _statistics(flats: list, standardize: bool) -> tuple[list, np.ndarray, list | None]:
    """Return NaN counts per grid point and per sample, and standard deviations (one compute)."""
    from dkpca.blocked import compute

    stats = []
    with warnings.catch_warnings():  # land: the standard deviation of no values
        warnings.simplefilter("ignore", RuntimeWarning)
        for M in flats:
            xp = da if isinstance(M, da.Array) else np
            isnan = xp.isnan(M)
            stats += [isnan.sum(axis=0), isnan.sum(axis=1)]
            if standardize:
                stats.append(_std(M))
        if any(isinstance(s, da.Array) for s in stats):
            stats = list(compute(*stats))
    per = 3 if standardize else 2
    feature_nans = [np.asarray(stats[i * per]) for i in range(len(flats))]
    sample_nans = sum(np.asarray(stats[i * per + 1]) for i in range(len(flats)))
    stds = [np.asarray(stats[i * per + 2]) for i in range(len(flats))] if standardize else None
    return feature_nans, sample_nans, stds


def _std(M: Any) -> Any:
    """Each grid point's standard deviation over the samples, NaN ignored.

    ``ddof=0``, as xeofs and scikit-learn's ``StandardScaler``: each standardised grid point
    has a variance of ``n / (n - 1)`` with the estimators' ``n - 1`` denominator, and the
    explained variances are xeofs's.
    """
    xp = da if isinstance(M, da.Array) else np
    return xp.nanstd(M.astype(np.float64), axis=0, ddof=0)


def _stds(flats: list) -> list[np.ndarray]:
    """Return each variable's standard deviations (:func:`_std`), in one compute."""
    from dkpca.blocked import compute

    with warnings.catch_warnings():  # land: the standard deviation of no values
        warnings.simplefilter("ignore", RuntimeWarning)
        stds = [_std(M) for M in flats]
        if any(isinstance(s, da.Array) for s in stds):
            stds = list(compute(*stds))
    return [np.asarray(s) for s in stds]


def _sort_nans(feature_nans: list, sample_nans: np.ndarray, n_samples: int) -> _NaNs:
    land = [count == n_samples for count in feature_nans]
    n_land = sum(int(m.sum()) for m in land)
    empty_samples = sample_nans == sum(m.size for m in land)
    n_empty = int(empty_samples.sum())
    return _NaNs(
        land=land,
        scattered=[~m & (count > n_empty) for m, count in zip(land, feature_nans, strict=True)],
        empty_samples=empty_samples,
        scattered_samples=~empty_samples & (sample_nans > n_land),
    )


def _refuse_scattered(nans: _NaNs, flattened: _Flattened, template: xr.DataArray) -> None:
    """``nan_policy="raise"``: name where NaNs lie among valid data, if anywhere."""
    if not any(s.any() for s in nans.scattered):
        return
    where = "; ".join(  # named per variable, as transform names them
        f"{name or 'grid'} points " + positions(s, shape, d, dict(array.coords))
        for s, shape, d, (name, array) in zip(nans.scattered, flattened.shapes, flattened.dims,
                                              flattened.pairs, strict=True)
        if s.any()
    )
    samples = positions(nans.scattered_samples, template.shape, template.dims,
                        dict(template.coords))
    raise ValueError(
        f"the field has NaNs scattered among valid data: at {where}, at samples {samples}. "
        f"Pass nan_policy='drop_samples' to leave those samples out (NaN scores) or "
        f"'drop_features' to leave those grid points out, or fill them first."
    )


def _scales(stds: list | None, masks: list[np.ndarray]) -> list[np.ndarray]:
    """Per grid point: 1 / standard deviation when standardising (0 where it is 0 or NaN)."""
    if stds is None:
        return [np.ones(m.size) for m in masks]
    scales = []
    for std in stds:
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(std > 0, 1.0 / std, np.nan)
        scales.append(np.where(np.isfinite(scale), scale, 0.0))
    return scales


def all_rows(scores: Any, rows: np.ndarray, dtype: Any = None) -> Any:
    """Return the scores of the rows given, NaN at the others, in ``dtype``.

    ``dtype`` is the training matrix's, so that the scores are in the dtype ``transform``
    gives (float32 data: float32 scores, whatever the estimator's ``fit_transform`` returns);
    by default the scores' own floating dtype.

    Examples
    --------
    >>> import numpy as np
    >>> all_rows(np.ones((2, 1)), np.array([True, False, True])).ravel().tolist()
    [1.0, nan, 1.0]
    """
    dtype = float_dtype(scores.dtype if dtype is None else dtype)
    scores = scores.astype(dtype, copy=False) if scores.dtype != dtype else scores
    if rows.all():
        return scores
    if isinstance(scores, da.Array):
        index = np.cumsum(rows) - 1
        taken = scores[np.where(rows, index, 0)]
        return da.where(da.from_array(rows)[:, None], taken, np.nan)
    out = np.full((rows.size, scores.shape[1]), np.nan, dtype=dtype)
    out[rows] = scores
    return out


def sample_template(array: xr.DataArray, sample_dims: tuple[str, ...]) -> xr.DataArray:
    """Return an empty DataArray over ``array``'s sample dimensions, with their coordinates.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> sample_template(xr.DataArray(np.zeros((3, 2)), dims=("t", "x")), ("t",)).dims
    ('t',)
    """
    coords = {n: c for n, c in array.coords.items() if set(c.dims) <= set(sample_dims)}
    return xr.DataArray(np.empty([array.sizes[d] for d in sample_dims]), dims=sample_dims,
                        coords=coords)
