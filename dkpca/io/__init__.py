"""Data in and out: input of every kind as one dask array, Zarr locations, atomic Zarr output.

Saved models are :mod:`dkpca.persistence` (``dkpca.save``/``dkpca.load``), which sits above
the estimators; nothing here imports them.

Examples
--------
>>> import numpy as np
>>> from dkpca.io import as_dask
>>> as_dask(np.zeros((3, 2))).shape
(3, 2)
"""

from dkpca.io._completion import IncompleteResultError, NotAZarrStoreError, require_complete
from dkpca.io._input import (
    as_array,
    as_dask,
    default_row_chunk,
    is_lazy,
    is_sparse,
    nonfinite_message,
    open_zarr,
    require_known_rows,
)
from dkpca.io._location import Location, url_options
from dkpca.io._zarr import (
    atomic_group,
    atomic_location,
    check_destination,
    stop_writers_before_cleanup,
    store_array,
    write_file,
)

__all__ = [
    "IncompleteResultError",
    "Location",
    "NotAZarrStoreError",
    "as_array",
    "as_dask",
    "atomic_group",
    "atomic_location",
    "check_destination",
    "default_row_chunk",
    "is_lazy",
    "is_sparse",
    "nonfinite_message",
    "open_zarr",
    "require_complete",
    "require_known_rows",
    "stop_writers_before_cleanup",
    "store_array",
    "url_options",
    "write_file",
]
