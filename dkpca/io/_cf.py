"""CF decoding of stored values, as xarray reads a variable from Zarr (fill values, scale, offset).

Used by :func:`dkpca.io.as_dask` for Zarr arrays, so that integers packed by
``Dataset.to_zarr(encoding=...)`` come back as the physical values, and fill values as NaN.
"""

from __future__ import annotations

import base64
import math
import numbers
import struct
from typing import Any

import dask.array as da
import xarray as xr
import zarr

__all__ = ["CF_ATTRIBUTES", "cf_decoded", "cf_encoding"]


#: The attributes by which the CF conventions (and xarray, writing Zarr) encode stored values.
CF_ATTRIBUTES = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")


def cf_encoding(array: zarr.Array) -> dict[str, Any]:
    """Return the CF encoding attributes of ``array`` as xarray reads them; empty for none.

    xarray keeps a Zarr v2 variable's ``_FillValue`` as the array's ``fill_value`` (such an
    array has the ``_ARRAY_DIMENSIONS`` attribute), and a Zarr v3 one as the ``_FillValue``
    attribute, a float one base64-encoded. A fill value of NaN (float data) masks nothing and
    is left out, as is anything else when no attribute is present: the array is read as it is.
    """
    attrs = array.attrs.asdict()
    encoding = {key: attrs[key] for key in CF_ATTRIBUTES if key in attrs}
    if array.metadata.zarr_format == 2 and "_ARRAY_DIMENSIONS" in attrs:
        encoding.pop("_FillValue", None)
        if array.fill_value is not None:
            encoding["_FillValue"] = array.fill_value
    elif isinstance(encoding.get("_FillValue"), str) and array.dtype.kind == "f":
        encoding["_FillValue"] = struct.unpack(
            "<d", base64.standard_b64decode(encoding["_FillValue"]))[0]
    fill = encoding.get("_FillValue")
    if isinstance(fill, numbers.Real) and math.isnan(fill):
        del encoding["_FillValue"]
    return encoding


def cf_decoded(data: da.Array, encoding: dict[str, Any]) -> da.Array:
    """Apply CF decoding to ``data`` lazily, block by block, exactly as xarray reads it.

    Values equal to ``_FillValue`` or ``missing_value`` become NaN, then ``scale_factor`` and
    ``add_offset`` apply. The result is floating, of the dtype xarray chooses (float32 for
    integers of up to 16 bits without scale and offset, float64 with JSON-stored ones).
    """
    if not encoding:
        return data
    dims = tuple(f"dim_{i}" for i in range(data.ndim))
    variables = xr.Dataset({"data": xr.Variable(dims, data, attrs=encoding)})
    decoded = xr.decode_cf(variables, decode_times=False, decode_timedelta=False,
                           decode_coords=False, concat_characters=False)
    return decoded["data"].data
