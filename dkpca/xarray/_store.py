"""A fitted :class:`FieldModel` in a Zarr group, beside its estimator (see :mod:`dkpca.persistence`).

DataArrays (each variable's grid template, user weights, the training scores) are stored as a
``values`` array in a subgroup, and their dimensions, name and coordinates as JSON, so that
datetimes (time-zone aware ones as UTC and their zone), strings and numbers round-trip without
pickle::

    field.zarr/                 attrs["dkpca"] = {..., "estimator": "FieldModel", "field": {...}}
      estimator/                the fitted KernelPCA or PCA, as dkpca.save writes it
      variables/0/              one group per variable: values (the scale), land
      weights/0/                user weights, when given as DataArrays
      scores/                   the training scores
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr

from ._field import FieldModel
from ._grid import GridLayout, VariableLayout

__all__ = ["read_field", "write_field"]

#: Every chunk is written, even one equal to the fill value: a missing chunk is then damage.
_WRITE_ALL = {"write_empty_chunks": True}

#: Read the array at a path in a group (``dkpca.load`` passes one that verifies checksums).
Reader = Callable[[zarr.Group, str], np.ndarray]


def _plain_read(group: zarr.Group, path: str) -> np.ndarray:
    return np.asarray(group[path][...])


def _coordinate(coord: xr.DataArray) -> dict[str, Any]:
    if isinstance(coord.dtype, pd.DatetimeTZDtype):  # tz-aware: UTC integers and the zone
        times = pd.DatetimeIndex(coord.to_index())
        utc = times.tz_convert(None).to_numpy()
        return {"dims": [str(d) for d in coord.dims], "dtype": utc.dtype.str,
                "tz": str(times.tz), "values": utc.astype(np.int64).tolist()}
    values = coord.values
    if values.dtype.kind in "Mm":  # datetimes and durations: integers of their unit
        listed = values.astype(np.int64).tolist()
    elif values.dtype.kind in "OUST":  # strings of any kind come back as numpy str
        return {"dims": [str(d) for d in coord.dims], "dtype": "str",
                "values": [str(v) for v in values.ravel().tolist()], "shape": list(values.shape)}
    else:
        listed = values.tolist()
    return {"dims": [str(d) for d in coord.dims], "dtype": values.dtype.str, "values": listed}


def _coordinate_values(encoded: dict[str, Any]) -> np.ndarray:
    if encoded["dtype"] == "str":
        return np.asarray(encoded["values"], dtype=str).reshape(encoded["shape"])
    dtype = np.dtype(encoded["dtype"])
    if dtype.kind in "Mm":
        values = np.asarray(encoded["values"], dtype=np.int64).astype(dtype)
        if "tz" in encoded:  # tz-aware (one dimension, as pandas holds them)
            return pd.DatetimeIndex(values).tz_localize("UTC").tz_convert(encoded["tz"])
        return values
    return np.asarray(encoded["values"], dtype=dtype)


def _write_array(group: zarr.Group, path: str, array: xr.DataArray) -> dict[str, Any]:
    sub = group.require_group(path)
    sub.create_array("values", data=np.asarray(array.values), config=_WRITE_ALL)
    return {"group": path, "dims": [str(d) for d in array.dims],
            "name": None if array.name is None else str(array.name),
            "coords": {str(n): _coordinate(c) for n, c in array.coords.items()}}


def _read_array(group: zarr.Group, encoded: dict[str, Any], read: Reader) -> xr.DataArray:
    values = read(group, f"{encoded['group']}/values")
    coords = {n: (c["dims"], _coordinate_values(c)) for n, c in encoded["coords"].items()}
    return xr.DataArray(values, dims=encoded["dims"], coords=coords, name=encoded["name"])


def write_field(model: FieldModel, group: zarr.Group) -> dict[str, Any]:
    """Write ``model``'s layout, weights and training scores; return their JSON description.

    The estimator is written by the caller (into ``group["estimator"]``).

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarr, dkpca
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(10, 3)), dims=("t", "x"))
    >>> fitted = FieldModel(dkpca.PCA(2), "t").fit(field)
    >>> group = zarr.open_group("memory://doc/field-layout.zarr", mode="w")
    >>> sorted(write_field(fitted, group))
    ['given_sample_dims', 'kind', 'nan_policy', 'sample_dims', 'scores', 'standardize',
     'variables', 'weights']
    """
    layout = model.layout_
    variables = []
    for i, variable in enumerate(layout.variables):
        encoded = _write_array(group, f"variables/{i}", variable.template)
        group[f"variables/{i}"].create_array("land", data=variable.land, config=_WRITE_ALL)
        variables.append(encoded)
    weights = model.weights
    if isinstance(weights, xr.DataArray):
        weights = {"array": _write_array(group, "weights/0", weights)}
    elif isinstance(weights, dict):
        weights = {"per_variable": {
            str(name): (w if isinstance(w, str | None) else
                        {"array": _write_array(group, f"weights/{i}", w)})
            for i, (name, w) in enumerate(weights.items())}}
    sample_dims = model.sample_dims
    return {
        "kind": layout.kind, "sample_dims": list(layout.sample_dims),
        "given_sample_dims": sample_dims if isinstance(sample_dims, str | None)
        else list(sample_dims),
        "weights": weights, "standardize": bool(model.standardize),
        "nan_policy": model.nan_policy, "variables": variables,
        "scores": _write_array(group, "scores", model.scores_.compute()),
    }


def _weights(group: zarr.Group, encoded: Any, read: Reader) -> Any:
    if encoded is None or isinstance(encoded, str):
        return encoded
    if "array" in encoded:
        return _read_array(group, encoded["array"], read)
    return {name: _weights(group, w, read) for name, w in encoded["per_variable"].items()}


def read_field(group: zarr.Group, encoded: dict[str, Any], estimator: Any,
               read: Reader | None = None) -> FieldModel:
    """Rebuild the fitted :class:`FieldModel` that :func:`write_field` described.

    ``read(group, path)`` reads an array (``dkpca.load`` passes one that verifies it); by
    default the array is read as it is.

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarr, dkpca
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(10, 3)), dims=("t", "x"))
    >>> fitted = FieldModel(dkpca.PCA(2), "t").fit(field)
    >>> group = zarr.open_group("memory://doc/field-read.zarr", mode="w")
    >>> again = read_field(group, write_field(fitted, group), fitted.model_)
    >>> again.scores_.dims
    ('t', 'mode')
    """
    read = _plain_read if read is None else read
    given = encoded.get("given_sample_dims", encoded["sample_dims"])
    model = FieldModel(estimator, given if isinstance(given, str | None) else tuple(given),
                       weights=_weights(group, encoded["weights"], read),
                       standardize=encoded["standardize"], nan_policy=encoded["nan_policy"])
    if not isinstance(model.standardize, bool):
        raise ValueError(f"standardize={model.standardize!r} is not a boolean")  # noqa: TRY004
    layout = GridLayout(encoded["kind"], tuple(encoded["sample_dims"]))
    for i, variable in enumerate(encoded["variables"]):
        template = _read_array(group, variable, read)
        land = read(group, f"variables/{i}/land").astype(bool)
        if land.shape != (template.size,) and land.shape != template.shape:
            raise ValueError(f"variables/{i}/land has shape {land.shape}, its grid "
                             f"{template.shape}")
        layout.variables.append(VariableLayout(variable["name"], template, land))
    n_features = getattr(estimator, "n_features_in_", None)
    if n_features is not None and int(layout.kept.sum()) != n_features:
        raise ValueError(f"the grids keep {int(layout.kept.sum())} points, but the estimator "
                         f"was fitted on {n_features} features")
    model.layout_ = layout
    model.model_ = estimator
    model.scores_ = _read_array(group, encoded["scores"], read).assign_attrs(model._attrs())
    return model
