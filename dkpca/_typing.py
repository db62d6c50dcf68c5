"""Type aliases shared across dkpca."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, Union

import numpy as np

if TYPE_CHECKING:
    import dask.array as da
    import xarray as xr

ArrayLike: TypeAlias = Union[np.ndarray, "da.Array", "xr.DataArray", Any]
"""Anything :func:`dkpca.io.as_dask` accepts: numpy, dask, xarray or nested sequences."""

RandomStateLike: TypeAlias = int | np.random.Generator | np.random.RandomState | None
"""A seed, a generator, a legacy ``RandomState`` or ``None`` (fresh entropy)."""
