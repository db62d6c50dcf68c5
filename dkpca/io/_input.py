"""Turning user input into one validated, row-chunked dask array.

Every entry point calls :func:`as_dask` once, so the rest of the library sees a single kind of
input: a 2-D ``(n_samples, n_features)`` floating dask array whose rows are the parallel axis and
whose features sit in one chunk. Inputs: numpy arrays (and nested sequences), dask arrays, xarray
DataArrays (a sample dimension; every other dimension stacked into features), Zarr arrays, and
Zarr paths or URLs (``file://``, ``memory://`` and any fsspec protocol whose package is
installed), optionally naming an array inside a group. Zarr arrays are CF-decoded as xarray
decodes them (fill values to NaN, scale factor and offset applied; see :func:`as_dask`).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse
import xarray as xr
import zarr

from dkpca._typing import ArrayLike
from dkpca.io._cf import cf_decoded, cf_encoding
from dkpca.io._completion import require_complete
from dkpca.io._finite import finite_block, nonfinite_message
from dkpca.io._location import Location
from dkpca.io._views import view_blocks

__all__ = [
    "as_array",
    "as_dask",
    "default_row_chunk",
    "is_lazy",
    "is_sparse",
    "nonfinite_message",
    "open_zarr",
    "require_known_rows",
]

#: Target size of one row chunk of in-memory input.
ROW_CHUNK_BYTES = 64 * 2**20


def default_row_chunk(n_features: int, itemsize: int, target_bytes: int = ROW_CHUNK_BYTES) -> int:
    """Rows per chunk so that one chunk of data holds about ``target_bytes``.

    Examples
    --------
    >>> default_row_chunk(64, 8)
    131072
    """
    return max(1, int(target_bytes // max(1, n_features * itemsize)))


def open_zarr(
    source: str | os.PathLike | zarr.Array,
    *,
    component: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> zarr.Array:
    """Open a Zarr array for reading: a path or URL to an array, or to a group and a component.

    Parameters
    ----------
    source : str, path or zarr.Array
        A local path, a ``file://`` URL or any fsspec URL (``memory://``, ``s3://`` with s3fs
        installed, ...).
    component : str, optional
        The array's path inside the group at ``source`` (``"data"``, ``"a/b"``). May be left
        out when the group holds exactly one array.
    storage_options : mapping, optional
        Passed to the fsspec file system of a URL (credentials, ``anon=True``, ...).

    Returns
    -------
    zarr.Array

    Raises
    ------
    FileNotFoundError
        Nothing at ``source``, or no array ``component`` in the group.
    dkpca.io.IncompleteResultError
        ``source`` is a result still being copied to an object store, or whose writer was
        stopped doing so (a :class:`FileNotFoundError`).
    ValueError
        A group without ``component`` that holds several arrays (or none).
    dkpca.io.NotAZarrStoreError
        ``source`` is a plain file or a folder that is not a Zarr store (a ``ValueError``).

    Examples
    --------
    >>> import numpy as np, zarr
    >>> group = zarr.open_group("memory://doc/open.zarr", mode="w")
    >>> group.create_array("X", data=np.ones((4, 2))).shape
    (4, 2)
    >>> open_zarr("memory://doc/open.zarr").shape
    (4, 2)
    """
    if isinstance(source, zarr.Array):
        if component is not None:
            raise ValueError(
                f"component={component!r} (--component on the command line) given, but the "
                "input is already an array"
            )
        return source
    location = Location(source, storage_options)
    require_complete(location)
    try:
        node = zarr.open(store=location.store, mode="r", **location.open_options)
    except (FileNotFoundError, zarr.errors.NodeNotFoundError) as err:
        raise FileNotFoundError(f"no Zarr array or group at {location}") from err
    if isinstance(node, zarr.Array):
        if component is not None:
            raise ValueError(
                f"{location} is an array, not a group; drop component={component!r} "
                "(--component on the command line)"
            )
        return node
    if component is None:
        arrays = sorted(node.array_keys())
        if len(arrays) != 1:
            listing = ", ".join(arrays) if arrays else "none"
            raise ValueError(
                f"{location} is a Zarr group; name the array to read with component= "
                f"(--component on the command line). Arrays in it: {listing}"
            )
        component = arrays[0]
    try:
        array = node[component]
    except KeyError as err:
        available = ", ".join(sorted(node.array_keys())) or "none"
        raise FileNotFoundError(
            f"no array {component!r} in the Zarr group {location} (arrays: {available})"
        ) from err
    if not isinstance(array, zarr.Array):
        raise ValueError(f"{component!r} in {location} is a group, not an array")  # noqa: TRY004
    return array


def _dimension_names(array: zarr.Array) -> tuple[str, ...] | None:
    names = getattr(array.metadata, "dimension_names", None)  # Zarr v3
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")  # Zarr v2, as xarray writes it
    if names is None or any(name is None for name in names):
        return None
    return tuple(names)


def _sample_axis(dims: tuple[str, ...] | None, ndim: int, sample_dim: str | None, what: str) -> int:
    if sample_dim is None:
        return 0
    if dims is None:
        raise ValueError(
            f"sample_dim={sample_dim!r} given, but {what} has no dimension names; leave "
            f"sample_dim out to take the first axis as the samples."
        )
    if sample_dim not in dims:
        raise ValueError(f"sample_dim={sample_dim!r} is not a dimension of {what} {dims}")
    return dims.index(sample_dim)


def _rows_first(X: Any, axis: int) -> Any:
    """Move the sample axis first and flatten every other axis into features."""
    if X.ndim < 2 or (X.ndim == 2 and axis == 0):
        return X
    if axis != 0:
        X = np.moveaxis(X, axis, 0) if isinstance(X, np.ndarray) else da.moveaxis(X, axis, 0)
    if isinstance(X, da.Array):
        X = X.rechunk({i: -1 for i in range(1, X.ndim)})  # then reshape is blockwise
    return X.reshape(X.shape[0], math.prod(X.shape[1:]))


def _zarr_to_dask(array: zarr.Array, sample_dim: str | None) -> da.Array:
    axis = _sample_axis(_dimension_names(array), array.ndim, sample_dim, "the Zarr array")
    stored = array.shards or array.chunks  # a shard is the unit one task should read
    chunks = tuple(stored[i] if i == axis else -1 for i in range(array.ndim))
    data = cf_decoded(da.from_zarr(array, chunks=chunks), cf_encoding(array))
    return _rows_first(data, axis)


def _dataarray_to_2d(data: xr.DataArray, sample_dim: str | None) -> Any:
    axis = _sample_axis(tuple(map(str, data.dims)), data.ndim, sample_dim, "the DataArray")
    values = data.data
    if values.ndim == 1:  # no other dimension: one feature
        return values.reshape(-1, 1)
    return _rows_first(values, axis)


def _floating_dtype(dtype: np.dtype, name: str) -> np.dtype:
    # ValueError, as scikit-learn raises for these dtypes (its estimator checks expect it).
    if np.issubdtype(dtype, np.complexfloating):
        raise ValueError(
            f"Complex data not supported: {name} has complex dtype {dtype}; PCA needs real "
            f"numbers. "
            f"Pass the real part (X.real) or stack real and imaginary parts as features."
        )
    if dtype == object:  # numbers stored as objects convert; anything else fails there
        return np.dtype(np.float64)
    if not (np.issubdtype(dtype, np.number) or np.issubdtype(dtype, np.bool_)):
        raise ValueError(
            f"{name} has non-numeric dtype {dtype}; convert it to float first "
            f"(e.g. X.astype('float64'))."
        )
    return np.dtype(np.float32) if dtype in (np.float16, np.float32) else np.dtype(np.float64)


def is_sparse(X: Any) -> bool:
    """Whether ``X`` is a ``scipy.sparse`` matrix or array, or a dask array of them.

    Examples
    --------
    >>> import numpy as np, scipy.sparse, dask.array as da
    >>> S = scipy.sparse.csr_matrix(np.eye(3))
    >>> is_sparse(S), is_sparse(da.from_array(S, asarray=False)), is_sparse(np.eye(3))
    (True, True, False)
    """
    if isinstance(X, da.Array):
        return scipy.sparse.issparse(X._meta)
    return scipy.sparse.issparse(X)


def _sparse_rows(X: Any, name: str, check_finite: bool) -> Any:
    """Return ``X`` as a validated floating CSR matrix (the caller's own if nothing changes)."""
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(_empty_message(name, X.shape))
    dtype = _floating_dtype(X.dtype, name)
    X = X.tocsr()  # rows are the parallel axis: CSR slices them without copying the rest
    if X.dtype != dtype:
        X = X.astype(dtype)
    if check_finite and not np.isfinite(X.data).all():
        raise ValueError(nonfinite_message(X, name))
    return X


def _empty_message(name: str, shape: tuple[int, ...]) -> str:
    # scikit-learn's wording (its estimator checks match it), then what is missing.
    if len(shape) == 2 and shape[0] > 0:
        return (f"Found array with 0 feature(s) (shape={shape}) while a minimum of 1 is "
                f"required: {name} has no features.")
    return (f"Found array with 0 sample(s) (shape={shape}) while a minimum of 1 is "
            f"required: {name} is empty.")


def as_array(
    X: ArrayLike | str | os.PathLike,
    *,
    name: str = "X",
    check_finite: bool = True,
    sample_dim: str | None = None,
    component: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    accept_sparse: bool = False,
) -> Any:
    """Validate ``X`` as a 2-D floating array, keeping in-memory data in memory.

    The same checks and conversions as :func:`as_dask` (which see for the parameters), but
    numpy (and in-memory xarray) input comes back as a numpy array, without a copy when its
    dtype already fits; ``scipy.sparse`` input as a CSR matrix or array (the caller's own when
    it is already a floating CSR); lazy input (dask, Zarr) as a dask array.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.ones((4, 3))
    >>> as_array(X) is X
    True
    """
    if isinstance(X, str | os.PathLike | zarr.Array):
        X = _zarr_to_dask(
            open_zarr(X, component=component, storage_options=storage_options), sample_dim
        )
    elif component is not None or storage_options is not None:
        raise ValueError("component and storage_options apply to Zarr input only")
    elif isinstance(X, xr.DataArray):
        X = _dataarray_to_2d(X, sample_dim)
    elif sample_dim is not None:
        raise ValueError("sample_dim applies to xarray and Zarr input only")
    if isinstance(X, numbers.Number | bytes):  # a scalar is a shape error, as in sklearn
        raise ValueError(f"{name} must be a 2-D array (n_samples, n_features), got a scalar")  # noqa: TRY004
    if is_sparse(X) and not accept_sparse:
        raise ValueError(
            f"{name} is a sparse matrix, and sparse input is not supported here; pass "
            f"X.toarray() (dense), or use KernelPCA, which takes sparse data."
        )
    if scipy.sparse.issparse(X):
        return _sparse_rows(X, name, check_finite)
    if not isinstance(X, da.Array):
        X = np.asarray(X)
    dtype = _floating_dtype(X.dtype, name)
    if X.ndim != 2:
        hint = (" Reshape your data with X.reshape(-1, 1) for a single feature, or "
                "X.reshape(1, -1) for a single sample.") if X.ndim == 1 else ""
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features), got {X.ndim}-D with shape "
            f"{X.shape}.{hint}"
        )
    if 0 in X.shape:
        raise ValueError(_empty_message(name, X.shape))
    if isinstance(X, np.ndarray):
        X = X.astype(dtype, copy=False)
        if check_finite and not np.isfinite(X).all():
            raise ValueError(nonfinite_message(X, name))
        return X
    if X.dtype != dtype:
        X = X.astype(dtype)
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    if check_finite:
        X = X.map_blocks(finite_block, label=name, dtype=X.dtype, meta=X._meta,
                         token="dkpca-check-finite")
    return X


def as_dask(
    X: ArrayLike | str | os.PathLike,
    *,
    name: str = "X",
    check_finite: bool = True,
    sample_dim: str | None = None,
    component: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    accept_sparse: bool = False,
) -> da.Array:
    """Validate ``X`` and return it as a 2-D, row-chunked floating dask array.

    Parameters
    ----------
    X : array-like, scipy.sparse matrix, xarray.DataArray, zarr.Array, or a Zarr path or URL
        The data. numpy, sparse and dask arrays must be ``(n_samples, n_features)``; sparse
        input (any format, made CSR) becomes a dask array of CSR row blocks, and dask arrays
        of sparse blocks are accepted as they are. A DataArray or a
        Zarr array may have more dimensions: the sample dimension becomes the rows and all the
        others are stacked, in order, into features.
    name : str, default="X"
        The name used in error messages.
    check_finite : bool, default=True
        Check in-memory input for NaN and infinity now. Lazy input (dask, Zarr) is checked
        where it is first computed (during ``fit``), so the check costs no extra pass.
    sample_dim : str, optional
        The sample dimension of a DataArray or of a Zarr array with dimension names; the first
        dimension when left out.
    component : str, optional
        For a Zarr group: the array inside it (see :func:`open_zarr`).
    storage_options : mapping, optional
        For a Zarr URL: options of its fsspec file system.
    accept_sparse : bool, default=False
        Accept sparse input; otherwise it raises a ``ValueError`` that says so (the caller's
        algorithm needs dense blocks).

    Returns
    -------
    dask.array.Array
        ``float32`` stays ``float32``; other numeric dtypes become ``float64``. Features are in
        one chunk. Row chunks are kept when the input is already chunked; a Zarr array's
        on-disk chunks (or shards) become the row chunks. In-memory input whose dtype is kept
        is not copied: its blocks are views of the caller's array (see
        ``dkpca.io._views.view_blocks``).

    Notes
    -----
    A Zarr array is CF-decoded as xarray reads it (``xarray.open_zarr``), lazily, block by
    block: values equal to its ``_FillValue`` or ``missing_value`` become NaN, then its
    ``scale_factor`` and ``add_offset`` apply, so that integers packed by
    ``Dataset.to_zarr(encoding=...)`` come back as the physical values, in float64 (float32
    for an int8 or int16 array with a ``_FillValue`` but no scale or offset). The fill value is
    the ``_FillValue`` attribute of a Zarr v3 array, and the ``fill_value`` of a Zarr v2 array
    written by xarray (one with the ``_ARRAY_DIMENSIONS`` attribute); an array without these
    attributes is read as stored. NaN from masked values is refused like any other NaN (with
    ``check_finite``, when the data is computed): mask such data with :mod:`dkpca.xarray`.

    Raises
    ------
    ValueError
        Non-numeric or complex dtype; not 2-D (numpy, dask), empty, or (in-memory input)
        containing NaN or infinity.
    FileNotFoundError
        No Zarr array at the path or URL.

    Examples
    --------
    >>> import numpy as np
    >>> X = as_dask(np.ones((4, 3), dtype=np.float32))
    >>> X.shape, X.dtype, X.chunks
    ((4, 3), dtype('float32'), ((4,), (3,)))

    A DataArray ``(time, lat, lon)`` becomes ``(time, lat * lon)``:

    >>> import xarray as xr
    >>> field = xr.DataArray(np.zeros((5, 2, 3)), dims=("time", "lat", "lon"))
    >>> as_dask(field, sample_dim="time").shape
    (5, 6)
    """
    X = as_array(
        X, name=name, check_finite=check_finite, sample_dim=sample_dim, component=component,
        storage_options=storage_options, accept_sparse=accept_sparse,
    )
    if isinstance(X, np.ndarray):
        rows = default_row_chunk(X.shape[1], X.dtype.itemsize)
        return view_blocks(X, (rows, -1))  # views of the caller's array, not a copy
    if scipy.sparse.issparse(X):  # chunks of CSR rows, sized by their stored entries
        per_row = max(1.0, X.nnz / X.shape[0])
        rows = default_row_chunk(1, int(per_row * (X.dtype.itemsize + 4)))
        return view_blocks(X, (rows, -1))
    return X


def require_known_rows(X: da.Array, name: str = "X", owner: str = "fit") -> da.Array:
    """Return ``X``, or refuse a dask array whose row chunk sizes are unknown (NaN).

    Boolean indexing (``X[X[:, 0] > 0]``) and some dask dataframe conversions give such
    arrays. A transform handles them as they are (each block is projected whatever its
    length), but a fit needs the number of samples before it starts, and finding it costs a
    pass over the data: the caller makes that pass, once, where it chooses.

    Raises
    ------
    ValueError
        Unknown row chunk sizes, with the one-line fix ``X = X.compute_chunk_sizes()``.

    Examples
    --------
    >>> import dask.array as da
    >>> X = da.ones((4, 2), chunks=2)
    >>> require_known_rows(X) is X
    True
    >>> require_known_rows(X[X[:, 0] > 0], owner="PCA.fit")
    Traceback (most recent call last):
    ...
    ValueError: PCA.fit: X has unknown chunk sizes (shape (nan, 2), chunks ((nan, nan), (2,))), as boolean indexing gives; compute them first with X = X.compute_chunk_sizes() (one pass over the data).
    """
    if isinstance(X, da.Array) and any(math.isnan(c) for c in X.chunks[0]):
        raise ValueError(
            f"{owner}: {name} has unknown chunk sizes (shape {X.shape}, chunks {X.chunks}), as "
            f"boolean indexing gives; compute them first with {name} = "
            f"{name}.compute_chunk_sizes() (one pass over the data).")
    return X


def is_lazy(X: Any) -> bool:
    """Whether ``X`` is lazy input (dask, dask-backed xarray, Zarr) rather than in memory.

    Estimators return lazy results for lazy input and numpy for in-memory input.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> is_lazy(np.ones(2)), is_lazy(da.ones(2)), is_lazy("data.zarr")
    (False, True, True)
    """
    if isinstance(X, xr.DataArray):
        X = X.data
    return isinstance(X, da.Array | str | os.PathLike | zarr.Array)
