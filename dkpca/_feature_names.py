"""A DataFrame's column names, recorded at fit and checked afterwards, as scikit-learn does.

A model fitted on a DataFrame (pandas, polars: anything with string ``columns``) keeps them as
``feature_names_in_``; a later ``transform`` of columns with other names, or in another order,
raises ``ValueError`` instead of projecting the wrong columns. Input without names where the fit
had them, or the reverse, only warns (numpy arrays carry no names). scikit-learn's messages,
so that code written against its estimators reads ours the same way.

A model fitted on an xarray DataArray likewise keeps the names and sizes of its feature
dimensions (every dimension after the first, the samples') as ``feature_dims_in_``; a later
DataArray whose feature dimensions differ in order, names or sizes raises ``ValueError``
rather than being transposed: the stacked features would be other grid points. Other input
after a DataArray fit, or a DataArray after a fit on other input, is taken silently.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["check_feature_names", "feature_dims", "feature_names"]


def feature_names(X: Any) -> np.ndarray | None:
    """Return the string column names of a DataFrame-like ``X`` (object array), or ``None``.

    ``None`` for anything without ``columns`` and for columns that are not strings (a
    DataFrame with integer column labels, as scikit-learn treats it). Mixed string and other
    labels raise ``TypeError``: which would be meant is unclear.

    Examples
    --------
    >>> import pandas as pd
    >>> feature_names(pd.DataFrame({"a": [1.0], "b": [2.0]})).tolist()
    ['a', 'b']
    >>> feature_names(pd.DataFrame([[1.0, 2.0]])) is None, feature_names(np.ones((1, 2))) is None
    (True, True)
    """
    columns = getattr(X, "columns", None)
    if columns is None or isinstance(X, np.ndarray):
        return None
    names = np.asarray(list(columns), dtype=object)
    strings = np.array([isinstance(c, str) for c in names], dtype=bool)
    if not len(names) or not strings.any():
        return None
    if not strings.all():
        kinds = sorted({type(c).__name__ for c in names})
        raise TypeError(
            f"Feature names are only supported if all input features have string names, but "
            f"your input has {kinds} as feature name / column name types. Convert them all "
            f"to strings, e.g. X.columns = X.columns.astype(str).")
    return names


def feature_dims(X: Any) -> tuple[tuple[str, int], ...] | None:
    """Return the ``(name, size)`` of each feature dimension of a DataArray ``X``, or ``None``.

    The feature dimensions are those after the first, which the estimators take as the
    samples (:func:`dkpca.io.as_array` stacks them, in order, into features). ``None`` for
    anything but a DataArray.

    Examples
    --------
    >>> import xarray as xr
    >>> feature_dims(xr.DataArray(np.zeros((5, 2, 3)), dims=("time", "lat", "lon")))
    (('lat', 2), ('lon', 3))
    >>> feature_dims(np.zeros((5, 6))) is None
    True
    """
    if not isinstance(X, xr.DataArray):
        return None
    return tuple((str(dim), int(size)) for dim, size in zip(X.dims[1:], X.shape[1:], strict=True))


def _check_dims(estimator: Any, X: Any) -> None:
    """Raise when DataArray ``X``'s feature dimensions are not those the fit recorded."""
    fitted, dims = getattr(estimator, "feature_dims_in_", None), feature_dims(X)
    if fitted is None or dims is None:
        return
    fitted = tuple((str(dim), int(size)) for dim, size in fitted)  # loaded: JSON lists
    if dims == fitted:
        return
    owner, sample = type(estimator).__name__, str(X.dims[0])
    if sorted(dims) == sorted(fitted):
        order = ", ".join(repr(dim) for dim in (sample, *(name for name, _ in fitted)))
        fix = f"transpose it first: X.transpose({order})"
    else:
        fix = "regrid it to the fitted grid, or refit"
    raise ValueError(
        f"X's feature dimensions {_sizes(dims)} (after its sample dimension {sample!r}) are "
        f"not those {owner} was fitted with, {_sizes(fitted)}: its stacked features would be "
        f"other grid points; {fix}.")


def _sizes(dims: tuple[tuple[str, int], ...]) -> str:
    """``(lat: 2, lon: 3)``, as xarray shows sizes."""
    return "(" + ", ".join(f"{name}: {size}" for name, size in dims) + ")"


def check_feature_names(estimator: Any, X: Any, *, reset: bool) -> None:
    """Record ``X``'s column names on ``estimator`` (``reset``: in fit) or check them against it.

    A DataArray's feature dimensions are recorded (``feature_dims_in_``) and checked too.

    Raises
    ------
    ValueError
        Column names other than the fitted ones, or in another order; a DataArray whose
        feature dimensions differ from the fitted DataArray's in order, names or sizes (the
        message gives the ``X.transpose(...)`` that restores the fitted order, where one does).

    Examples
    --------
    >>> import pandas as pd
    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace()
    >>> check_feature_names(model, pd.DataFrame({"a": [1.0], "b": [2.0]}), reset=True)
    >>> model.feature_names_in_.tolist()
    ['a', 'b']
    >>> check_feature_names(model, pd.DataFrame({"b": [1.0], "a": [2.0]}), reset=False)
    Traceback (most recent call last):
    ...
    ValueError: The feature names should match those that were passed during fit.
    Feature names must be in the same order as they were in fit.

    >>> import xarray as xr
    >>> field = xr.DataArray(np.zeros((4, 2, 3)), dims=("time", "lat", "lon"))
    >>> check_feature_names(model, field, reset=True)
    >>> model.feature_dims_in_
    (('lat', 2), ('lon', 3))
    >>> check_feature_names(model, field.transpose("time", "lon", "lat"), reset=False)
    Traceback (most recent call last):
    ...
    ValueError: X's feature dimensions (lon: 3, lat: 2) (after its sample dimension 'time') are not those SimpleNamespace was fitted with, (lat: 2, lon: 3): its stacked features would be other grid points; transpose it first: X.transpose('time', 'lat', 'lon').
    """
    names = feature_names(X)
    if reset:
        for attribute, value in (("feature_names_in_", names),
                                 ("feature_dims_in_", feature_dims(X))):
            if value is None:
                vars(estimator).pop(attribute, None)
            else:
                setattr(estimator, attribute, value)
        return
    _check_dims(estimator, X)
    fitted = getattr(estimator, "feature_names_in_", None)
    owner = type(estimator).__name__
    if names is None and fitted is None:
        return
    if fitted is None:
        warnings.warn(f"X has feature names, but {owner} was fitted without feature names",
                      UserWarning, stacklevel=3)
        return
    if names is None:
        warnings.warn(f"X does not have valid feature names, but {owner} was fitted with "
                      "feature names", UserWarning, stacklevel=3)
        return
    if len(names) == len(fitted) and (names == fitted).all():
        return
    message = "The feature names should match those that were passed during fit.\n"
    unexpected, missing = sorted(set(names) - set(fitted)), sorted(set(fitted) - set(names))
    if unexpected:
        message += "Feature names unseen at fit time:\n" + _listed(unexpected)
    if missing:
        message += "Feature names seen at fit time, yet now missing:\n" + _listed(missing)
    if not unexpected and not missing:
        message += "Feature names must be in the same order as they were in fit.\n"
    raise ValueError(message)


def _listed(names: list, most: int = 5) -> str:
    """One ``- name`` line per name, the first ``most`` of them."""
    lines = [f"- {name}\n" for name in names[:most]]
    return "".join(lines) + ("- ...\n" if len(names) > most else "")
