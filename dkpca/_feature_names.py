"""A DataFrame's column names, recorded at fit and checked afterwards, as scikit-learn does.

A model fitted on a DataFrame (pandas, polars: anything with string ``columns``) keeps them as
``feature_names_in_``; a later ``transform`` of columns with other names, or in another order,
raises ``ValueError`` instead of projecting the wrong columns. Input without names where the fit
had them, or the reverse, only warns (numpy arrays carry no names). scikit-learn's messages,
so that code written against its estimators reads ours the same way.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = ["check_feature_names", "feature_names"]


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


def check_feature_names(estimator: Any, X: Any, *, reset: bool) -> None:
    """Record ``X``'s column names on ``estimator`` (``reset``: in fit) or check them against it.

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
    """
    names = feature_names(X)
    if reset:
        if names is None:
            vars(estimator).pop("feature_names_in_", None)
        else:
            estimator.feature_names_in_ = names
        return
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
