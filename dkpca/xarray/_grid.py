"""Fields on a grid as one sample × feature matrix, and back.

A *field* is a DataArray, a Dataset, or a list of DataArrays, each with the same sample
dimensions (``time``, or ``("time", "member")``) and its own feature dimensions (a grid). Every
variable is laid out with its samples first and its grid flattened, and the variables are
joined along the features. What enters the model is then chosen and scaled:

* features that are NaN at every training sample (land in an ocean field) are left out, and so
  are features of weight 0 (``sqrt(cos 90°)``); outputs on the grid hold NaN there;
* each kept feature is multiplied by its *scale*: the area weight (``sqrt(cos(lat))`` or the
  user's weights) divided, under ``standardize``, by the feature's standard deviation.

:class:`GridLayout` records all of it, so that new fields are laid out identically and results
go back onto each variable's grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr

__all__ = [
    "LATITUDE_NAMES",
    "GridLayout",
    "VariableLayout",
    "as_variables",
    "build_layout",
    "check_samples_aligned",
    "float_dtype",
    "per_variable_weights",
]

#: Names under which ``weights="coslat"`` looks for the latitude (a dimension or coordinate).
LATITUDE_NAMES = ("lat", "latitude", "nav_lat", "lats", "y_lat", "rlat")


def as_variables(data: Any) -> tuple[str, list[tuple[str | None, xr.DataArray]]]:
    """Return the kind of ``data`` (dataarray, dataset, list) and its ``(name, array)`` pairs.

    Examples
    --------
    >>> a = xr.DataArray(np.zeros((2, 3)), dims=("time", "x"), name="a")
    >>> as_variables(a)[0], as_variables([a, a.rename("b")])[1][1][0]
    ('dataarray', 'b')
    """
    if isinstance(data, xr.DataArray):
        return "dataarray", [(None, data)]
    if isinstance(data, xr.Dataset):
        if not data.data_vars:
            raise ValueError("the Dataset has no data variables")
        return "dataset", [(str(name), data[name]) for name in data.data_vars]
    if isinstance(data, list | tuple) and data and all(isinstance(a, xr.DataArray) for a in data):
        return "list", [(str(a.name) if a.name is not None else f"var{i}", a)
                        for i, a in enumerate(data)]
    raise TypeError(
        f"expected an xarray.DataArray, a Dataset or a list of DataArrays, got "
        f"{type(data).__name__}"
    )


def check_samples_aligned(pairs: list[tuple[str | None, xr.DataArray]],
                          sample_dims: tuple[str, ...]) -> None:
    """Refuse variables whose samples differ from the first variable's.

    The variables are joined sample by sample, by position: a list of DataArrays with other
    sizes or other labels along a sample dimension (``time`` shifted by a month) would pair
    unrelated samples. A Dataset's variables share their coordinates, so always pass.

    Examples
    --------
    >>> sst = xr.DataArray(np.zeros((3, 2)), dims=("time", "x"), name="sst",
    ...                    coords={"time": [0, 1, 2]})
    >>> check_samples_aligned([("sst", sst), ("slp", sst.assign_coords(time=[1, 2, 3]))],
    ...                       ("time",))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: variable 'slp' has other samples than the first variable, 'sst': along 'time', ...
    """
    first_name, first = pairs[0]
    for name, array in pairs[1:]:
        for dim in sample_dims:
            if dim not in array.dims or dim not in first.dims:
                continue  # reported by the layout (feature_dims)
            ours, theirs = first.indexes.get(dim), array.indexes.get(dim)
            labelled = ours is not None and theirs is not None
            if first.sizes[dim] == array.sizes[dim] and (not labelled or ours.equals(theirs)):
                continue
            if not labelled:
                differ = f"{first.sizes[dim]} samples, {name!r} {array.sizes[dim]}"
            elif len(ours) == len(theirs):
                at = np.flatnonzero(np.asarray(ours != theirs))[:5]
                differ = (f"{_listed(ours[at])} and {name!r} {_listed(theirs[at])} at "
                          f"positions {at.tolist()}")
            else:
                differ = f"{len(ours)} labels, {name!r} {len(theirs)}"
                for a, b, label in ((ours, theirs, first_name), (theirs, ours, name)):
                    if len(a.difference(b)):
                        differ += f"; only in {label!r}: {_listed(a.difference(b)[:5])}"
            raise ValueError(
                f"variable {name!r} has other samples than the first variable, {first_name!r}: "
                f"along {dim!r}, {first_name!r} has {differ}. The variables are joined sample "
                f"by sample; give them the same {dim!r} coordinate (e.g. fields = xr.align(*fields, "
                f"join='inner'))."
            )


def _listed(labels: Any) -> str:
    """Labels of an index, for an error message."""
    return "[" + ", ".join(str(v) for v in labels) + "]"


def float_dtype(dtype: Any) -> np.dtype:
    """Return the floating dtype the model works in for data of ``dtype``.

    Integers and float16 become float64 or float32 (their ``result_type`` with float32), so
    that scales below 1 (``sqrt(cos(lat))``, ``1 / std``) are not truncated; float32 stays.

    Examples
    --------
    >>> float_dtype(np.int16), float_dtype(np.int64), float_dtype(np.float32)
    (dtype('float32'), dtype('float64'), dtype('float32'))
    """
    return np.dtype(np.result_type(dtype, np.float32))


def per_variable_weights(weights: Any, pairs: list[tuple[str | None, xr.DataArray]]) -> list:
    """Return each variable's weights; a dict's keys must name variables.

    A lone DataArray is named by its ``name``. A dict key that names no variable (a typo,
    another capitalisation) would leave its variable unweighted silently: it is an error.
    Variables without a key are unweighted.

    Examples
    --------
    >>> a = xr.DataArray(np.zeros((2, 3)), dims=("time", "x"), name="sst")
    >>> per_variable_weights({"sst": "coslat"}, [(None, a)])
    ['coslat']
    >>> per_variable_weights({"SST": "coslat"}, [(None, a)])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: weights has keys ['SST'] that name no variable; the variables are ['sst']. ...
    """
    if not isinstance(weights, dict):
        return [weights] * len(pairs)
    names = [str(array.name) if name is None and array.name is not None else name
             for name, array in pairs]
    unknown = [key for key in weights if key not in names]
    if unknown and names == [None]:
        raise ValueError(
            f"weights is a dict (keys {list(weights)}) but the DataArray has no name to match "
            f"them with: give the weights themselves (not a dict), or name the DataArray, "
            f"e.g. field.rename({str(unknown[0])!r})."
        )
    if unknown:
        raise ValueError(
            f"weights has keys {unknown} that name no variable; the variables are {names}. "
            f"Use the variables' names as keys (a variable without a key is unweighted)."
        )
    return [weights.get(name) for name in names]


def _flat(array: xr.DataArray, sample_dims: tuple[str, ...],
          feature_dims: tuple[str, ...]) -> Any:
    """Return the values as ``(n_samples, n_features)``: samples first, the grid flattened."""
    values = array.transpose(*sample_dims, *feature_dims).data
    n_samples = int(np.prod([array.sizes[d] for d in sample_dims]))
    n_features = int(np.prod([array.sizes[d] for d in feature_dims]))
    if isinstance(values, da.Array):
        # Only the first sample dimension may stay chunked, so the reshape is blockwise.
        values = values.rechunk({i: -1 for i in range(1, values.ndim)})
    return values.reshape(n_samples, n_features)


def _latitude(array: xr.DataArray, feature_dims: tuple[str, ...]) -> xr.DataArray:
    for name in LATITUDE_NAMES:
        for candidate in (*array.coords, *feature_dims):
            if str(candidate).lower() == name and candidate in array.coords:
                lat = array.coords[candidate]
                if set(lat.dims) <= set(feature_dims):
                    return lat
    raise ValueError(
        f"weights='coslat' needs a latitude among the feature dimensions {feature_dims} or "
        f"their coordinates, named one of {LATITUDE_NAMES}; pass weights= a DataArray instead"
    )


def _weights(array: xr.DataArray, feature_dims: tuple[str, ...], weights: Any) -> np.ndarray:
    """Per-feature weights, flattened like the grid."""
    grid = xr.DataArray(np.ones([array.sizes[d] for d in feature_dims]), dims=feature_dims,
                        coords={d: array.coords[d] for d in feature_dims if d in array.coords})
    if weights is None:
        return grid.values.ravel()
    if isinstance(weights, str):
        if weights != "coslat":
            raise ValueError(f"weights={weights!r}: use 'coslat', a DataArray or None")
        lat = _latitude(array, feature_dims)
        lat = lat.astype(np.float64)
        # cos(90°) is 6e-17 in floating point: the poles get the weight 0 they have
        cosine = xr.where(abs(lat) >= 90.0, 0.0, np.cos(np.deg2rad(lat)))
        factor = np.sqrt(np.clip(cosine, 0.0, None))
    elif isinstance(weights, xr.DataArray):
        extra = set(weights.dims) - set(feature_dims)
        if extra:
            raise ValueError(
                f"weights has dimensions {sorted(extra)} that are not feature dimensions "
                f"{feature_dims}"
            )
        factor = weights.astype(np.float64)
    else:
        raise TypeError(f"weights must be 'coslat', a DataArray or None, not {type(weights)}")
    factor = factor.drop_vars([c for c in factor.coords if c not in feature_dims], errors="ignore")
    weighted = (grid * factor).transpose(*feature_dims).values.ravel()
    if not np.isfinite(weighted).all() or (weighted < 0).any():
        raise ValueError("weights must be finite and non-negative")
    return weighted


@dataclass
class VariableLayout:
    """One variable's place in the feature axis and what the model sees of it.

    Attributes
    ----------
    name : str or None
        The variable's name (``None`` for a lone DataArray).
    template : xarray.DataArray
        Over the feature dimensions, with their coordinates: the scale of each feature (weight,
        divided by its standard deviation under ``standardize``), NaN where the feature is
        left out of the model.
    land : ndarray of bool
        Flat: the grid points NaN at every training sample, which new data must leave NaN.
    """

    name: str | None
    template: xr.DataArray
    land: np.ndarray

    @property
    def feature_dims(self) -> tuple[str, ...]:
        """The variable's feature (grid) dimensions."""
        return tuple(str(d) for d in self.template.dims)

    @property
    def scale(self) -> np.ndarray:
        """Flat scale of every grid point; NaN where left out."""
        return self.template.values.ravel()

    @property
    def kept(self) -> np.ndarray:
        """Flat mask of the grid points the model sees."""
        return np.isfinite(self.scale)

    @property
    def size(self) -> int:
        """Grid points."""
        return self.template.size


@dataclass
class GridLayout:
    """How fields become the model's matrix and how results go back onto the grids.

    Attributes
    ----------
    kind : {"dataarray", "dataset", "list"}
        What was fitted, and what outputs on the grid are.
    sample_dims : tuple of str
    variables : list of VariableLayout
        In the order they are joined along the features.

    Examples
    --------
    >>> field = xr.DataArray(np.arange(12.0).reshape(2, 2, 3), dims=("time", "y", "x"))
    >>> masks = [np.array([False, True, True, True, True, True])]  # (y=0, x=0) is land
    >>> layout = build_layout(field, ("time",), None, [np.ones(6)], masks, [~masks[0]])
    >>> layout.feature_dims(field), layout.matrix(field).shape, int(layout.kept.sum())
    (('y', 'x'), (2, 6), 5)
    >>> layout.on_grid(np.ones((2, 5)), {"time": None}, "ones").values[0]
    array([[nan,  1.,  1.],
           [ 1.,  1.,  1.]])
    """

    kind: str
    sample_dims: tuple[str, ...]
    variables: list[VariableLayout] = field(default_factory=list)

    @property
    def kept(self) -> np.ndarray:
        """Flat mask over all variables' grid points: those the model sees."""
        return np.concatenate([v.kept for v in self.variables])

    @property
    def scale(self) -> np.ndarray:
        """Scale of the kept features, in the model's feature order."""
        return np.concatenate([v.scale[v.kept] for v in self.variables])

    @property
    def land(self) -> np.ndarray:
        """Flat mask over all variables' grid points: NaN at every training sample."""
        return np.concatenate([v.land for v in self.variables])

    def feature_dims(self, array: xr.DataArray) -> tuple[str, ...]:
        """Return the feature dimensions of ``array``: all but the sample dimensions."""
        missing = [d for d in self.sample_dims if d not in array.dims]
        if missing:
            raise ValueError(
                f"sample dimension(s) {missing} are not dimensions of {array.name or 'the array'}"
                f" {tuple(array.dims)}"
            )
        return tuple(str(d) for d in array.dims if d not in self.sample_dims)

    def ordered(self, data: Any) -> Any:
        """Return ``data`` with a Dataset's variables in the model's order, matched by name.

        A Dataset lists its variables in any order (``open_zarr`` sorts them); the model's
        variables must all be there, and no others.

        Examples
        --------
        >>> a = xr.DataArray(np.zeros((2, 3)), dims=("time", "x"))
        >>> ds = xr.Dataset({"sst": a, "ice": a})
        >>> masks = [np.ones(3, dtype=bool)] * 2
        >>> layout = build_layout(ds, ("time",), None, [np.ones(3)] * 2, masks,
        ...                       [~m for m in masks])
        >>> list(layout.ordered(ds[["ice", "sst"]]).data_vars)
        ['sst', 'ice']
        """
        if self.kind != "dataset" or not isinstance(data, xr.Dataset):
            return data
        names = [v.name for v in self.variables]
        given = [str(n) for n in data.data_vars]
        if given == names:
            return data
        missing = [n for n in names if n not in given]
        extra = [n for n in given if n not in names]
        if missing or extra:
            raise ValueError(
                f"the model was fitted on the variables {names}; the Dataset "
                + (f"lacks {missing}" if missing else "")
                + (" and " if missing and extra else "")
                + (f"has others, {extra}" if extra else "")
                + f". Give the fitted variables, e.g. ds[{names}]."
            )
        return data[names]

    def matrix(self, data: Any) -> Any:
        """All grid points of ``data`` as ``(n_samples, n_grid_points)``, variables joined.

        Checks that ``data`` has the fitted variables, grids and coordinates.
        """
        kind, pairs = as_variables(self.ordered(data))
        if len(pairs) != len(self.variables):
            raise ValueError(
                f"the model was fitted on {len(self.variables)} variable(s), got {len(pairs)}"
            )
        blocks = []
        for index, ((name, array), layout) in enumerate(zip(pairs, self.variables, strict=True)):
            # a Dataset's variables are ordered by name above; a list's are checked where both
            # the array and the fit's were named (same-shaped grids in another order would be
            # swapped silently)
            named = kind == "dataset" or (kind == "list" and array.name is not None
                                          and layout.name != f"var{index}")
            if named and layout.name is not None and name != layout.name:
                raise ValueError(f"variable {name!r} where the model has {layout.name!r}")
            dims = self.feature_dims(array)
            if set(dims) != set(layout.feature_dims):
                raise ValueError(
                    f"{name or 'the DataArray'} has feature dimensions {dims}, the model "
                    f"{layout.feature_dims}"
                )
            shape = tuple(array.sizes[d] for d in layout.feature_dims)
            if shape != layout.template.shape:
                raise ValueError(
                    f"{name or 'the DataArray'} has a grid of shape {shape}, the model "
                    f"{layout.template.shape} over {layout.feature_dims}"
                )
            blocks.append(_flat(array, self.sample_dims, layout.feature_dims))
        check_samples_aligned(pairs, self.sample_dims)  # joined by position below
        if len(blocks) == 1:
            return blocks[0]
        lazy = any(isinstance(b, da.Array) for b in blocks)
        return da.concatenate(blocks, axis=1) if lazy else np.concatenate(blocks, axis=1)

    def features(self, full: Any) -> Any:
        """Return the kept grid points of ``matrix(data)``, scaled: what the estimator sees.

        In a floating dtype (:func:`float_dtype`): an integer field is not truncated by its
        scales, and float32 stays float32.
        """
        dtype = float_dtype(full.dtype)
        return full[:, self.kept].astype(dtype) * self.scale.astype(dtype)

    def sample_template(self, data: Any) -> xr.DataArray:
        """Return an empty DataArray over the sample dimensions, with ``data``'s coordinates."""
        _, pairs = as_variables(self.ordered(data))
        array = pairs[0][1]
        coords = {name: c for name, c in array.coords.items() if set(c.dims) <= set(self.sample_dims)}
        return xr.DataArray(np.empty([array.sizes[d] for d in self.sample_dims]),
                            dims=self.sample_dims, coords=coords)

    def on_grid(self, values: np.ndarray | da.Array, leading: dict[str, Any],
                name: str) -> Any:
        """Put ``(*leading, n_kept)`` values back onto the grids (NaN where left out).

        ``leading`` maps the leading dimensions to their coordinates (``None``: none).
        Returns a DataArray for a DataArray fit, else a Dataset (one variable per grid, a list
        fit keeping the names it was given).
        """
        sizes = tuple(values.shape[:-1])
        lead_dims = tuple(leading)
        lead_coords = {d: c for d, c in leading.items() if c is not None}
        lazy = isinstance(values, da.Array)
        out = {}
        start = 0
        for layout in self.variables:
            kept = layout.kept
            n = int(kept.sum())
            part = values[..., start:start + n]
            start += n
            if lazy:
                full = part.rechunk({part.ndim - 1: -1}).map_blocks(
                    _scatter, kept, dtype=values.dtype,
                    chunks=(*part.chunks[:-1], (layout.size,)))
            else:
                full = _scatter(part, kept)
            grid = full.reshape(*sizes, *layout.template.shape)
            coords = {**lead_coords, **{c: layout.template.coords[c]
                                        for c in layout.template.coords}}
            out[layout.name] = xr.DataArray(grid, dims=(*lead_dims, *layout.feature_dims),
                                            coords=coords, name=layout.name or name)
        if self.kind == "dataarray":
            return out[None].rename(name)
        return xr.Dataset(out)


def _scatter(part: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Spread the values of the kept grid points over all of them, NaN elsewhere."""
    full = np.full((*part.shape[:-1], kept.size), np.nan,
                   dtype=np.result_type(part.dtype, np.float32))
    full[..., kept] = part
    return full


def build_layout(
    data: Any, sample_dims: tuple[str, ...], weights: Any, scales: list[np.ndarray],
    masks: list[np.ndarray], land: list[np.ndarray],
) -> GridLayout:
    """Return the layout of the variables, their weights, extra scales and kept masks.

    ``scales`` (one flat array per variable, e.g. ``1 / std``) multiply the weights; ``masks``
    say which grid points the model sees (weight 0 leaves a point out as well); ``land``
    which ones were NaN at every training sample.
    """
    kind, pairs = as_variables(data)
    layout = GridLayout(kind, sample_dims)
    given = per_variable_weights(weights, pairs)
    for (name, array), w, scale, mask, missing in zip(pairs, given, scales, masks, land,
                                                      strict=True):
        dims = layout.feature_dims(array)
        factor = _weights(array, dims, w) * scale
        factor = np.where(mask & (factor > 0), factor, np.nan)
        template = xr.DataArray(
            factor.reshape([array.sizes[d] for d in dims]), dims=dims,
            coords={c: v for c, v in array.coords.items() if set(v.dims) <= set(dims)},
            name=name,
        )
        layout.variables.append(VariableLayout(name, template, missing))
    return layout
