"""Data in and out: input of every kind as one dask array, atomic Zarr output, saved models.

Examples
--------
>>> import numpy as np
>>> from dkpca.io import as_dask
>>> as_dask(np.zeros((3, 2))).shape
(3, 2)
"""

from dkpca.io._input import as_array, as_dask, default_row_chunk, is_lazy, open_zarr
from dkpca.io._location import Location
from dkpca.io._model import FORMAT_VERSION, load, save
from dkpca.io._zarr import atomic_group, atomic_location, check_destination, store_array

__all__ = [
    "FORMAT_VERSION",
    "Location",
    "as_array",
    "as_dask",
    "atomic_group",
    "atomic_location",
    "check_destination",
    "default_row_chunk",
    "is_lazy",
    "load",
    "open_zarr",
    "save",
    "store_array",
]
