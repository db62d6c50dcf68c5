"""Turning user input into one validated, row-chunked dask array.

Every entry point calls :func:`as_dask` once, so the rest of the library sees a single kind of
input: a 2-D ``(n_samples, n_features)`` floating dask array whose rows are the parallel axis and
whose features sit in one chunk.
"""

from __future__ import annotations

import numbers

import dask.array as da
import numpy as np

from ._typing import ArrayLike

__all__ = ["as_dask", "default_row_chunk"]

#: Target size of one row chunk of the input data.
ROW_CHUNK_BYTES = 64 * 2**20


def default_row_chunk(n_features: int, itemsize: int, target_bytes: int = ROW_CHUNK_BYTES) -> int:
    """Rows per chunk so that one chunk of data holds about ``target_bytes``.

    Examples
    --------
    >>> default_row_chunk(64, 8)
    131072
    """
    return max(1, int(target_bytes // max(1, n_features * itemsize)))


def _floating_dtype(dtype: np.dtype, name: str) -> np.dtype:
    if np.issubdtype(dtype, np.complexfloating):
        raise TypeError(
            f"{name} has complex dtype {dtype}; kernel PCA needs real numbers. "
            f"Pass the real part (X.real) or stack real and imaginary parts as features."
        )
    if not (np.issubdtype(dtype, np.number) or np.issubdtype(dtype, np.bool_)):
        raise TypeError(
            f"{name} has non-numeric dtype {dtype}; convert it to float first "
            f"(e.g. X.astype('float64'))."
        )
    return np.dtype(np.float32) if dtype in (np.float16, np.float32) else np.dtype(np.float64)


def as_dask(X: ArrayLike, *, name: str = "X", check_finite: bool = True) -> da.Array:
    """Validate ``X`` and return it as a 2-D, row-chunked floating dask array.

    Parameters
    ----------
    X : numpy array, dask array, xarray.DataArray or nested sequence
        The data, ``(n_samples, n_features)``.
    name : str, default="X"
        The name used in error messages.
    check_finite : bool, default=True
        Check in-memory input for NaN and infinity now. Lazy (dask) input is checked where it
        is first computed (during ``fit``), so that the check costs no extra pass.

    Returns
    -------
    dask.array.Array
        ``float32`` stays ``float32``; other numeric dtypes become ``float64``. Features are in
        one chunk; row chunks are kept when the input is already chunked.

    Raises
    ------
    TypeError
        Non-numeric or complex dtype.
    ValueError
        Not 2-D, empty, or (in-memory input) containing NaN or infinity.

    Examples
    --------
    >>> import numpy as np
    >>> X = as_dask(np.ones((4, 3), dtype=np.float32))
    >>> X.shape, X.dtype, X.chunks
    ((4, 3), dtype('float32'), ((4,), (3,)))
    """
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover - xarray is a core dependency
        xr = None
    if xr is not None and isinstance(X, xr.DataArray):
        X = X.data
    if isinstance(X, numbers.Number | str | bytes):  # a scalar is a shape error, as in sklearn
        raise ValueError(f"{name} must be a 2-D array (n_samples, n_features), got a scalar")  # noqa: TRY004
    if not isinstance(X, da.Array):
        X = np.asarray(X)
    dtype = _floating_dtype(X.dtype, name)
    if X.ndim != 2:
        hint = " Reshape it with X.reshape(-1, 1) for a single feature." if X.ndim == 1 else ""
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features), got {X.ndim}-D with shape "
            f"{X.shape}.{hint}"
        )
    if 0 in X.shape:
        raise ValueError(f"{name} is empty (shape {X.shape}); it needs samples and features.")
    if isinstance(X, np.ndarray):
        X = X.astype(dtype, copy=False)
        if check_finite and not np.isfinite(X).all():
            raise ValueError(
                f"{name} contains NaN or infinity; remove or impute those values first."
            )
        rows = default_row_chunk(X.shape[1], dtype.itemsize)
        return da.from_array(X, chunks=(rows, -1), name=False)
    if X.dtype != dtype:
        X = X.astype(dtype)
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X
