"""xarray in, xarray out: PCA and kernel PCA of fields on a grid, with their coordinates kept.

A field is a DataArray, a Dataset or a list of DataArrays (different grids are fine), with one
or more sample dimensions (``time``, or ``("time", "member")``); every other dimension is a
grid dimension. :class:`FieldModel` handles what real gridded data needs: land masks (grid
points NaN at every sample are left out and come back as NaN), area weights (``"coslat"`` or
the user's), standardisation, NaN policies, maps of the components on the grid, the nonlinear
patterns of kernel PCA's modes, and modes numbered from 1. The functions :func:`fit`,
:func:`transform` and :func:`fit_transform`, and the ``.dkpca`` accessor that importing
:mod:`dkpca` registers on every DataArray and Dataset, are shortcuts to it.

Examples
--------
>>> import numpy as np, xarray as xr, dkpca
>>> field = xr.DataArray(
...     np.random.default_rng(0).normal(size=(40, 3, 4)), dims=("time", "lat", "lon"),
...     coords={"time": np.arange(40), "lat": [10.0, 20.0, 30.0]},
... )
>>> result = field.dkpca.fit_transform(sample_dim="time", n_components=2, kernel="rbf")
>>> result.scores.dims, result.eigenvalues.dims
(('time', 'mode'), ('mode',))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import xarray as xr

from ._field import MODE, NAN_POLICIES, FieldModel, describe_model
from ._grid import LATITUDE_NAMES, GridLayout, VariableLayout

if TYPE_CHECKING:  # imported lazily: `import dkpca` (and every dask worker) stays light
    from dkpca.decomposition import KernelPCA
    from dkpca.linear import PCA

__all__ = [
    "LATITUDE_NAMES",
    "MODE",
    "NAN_POLICIES",
    "DkpcaAccessor",
    "FieldModel",
    "GridLayout",
    "VariableLayout",
    "describe_model",
    "fit",
    "fit_transform",
    "transform",
]


def _model(model: KernelPCA | PCA | None, params: dict[str, Any]) -> KernelPCA | PCA:
    if model is None:
        from dkpca.decomposition import KernelPCA

        return KernelPCA(**params)
    if params:
        raise ValueError(
            f"give the parameters {sorted(params)} to the model itself, not beside model="
        )
    return model


def _field_model(data: Any, sample_dim: str | Sequence[str] | None, model: Any,
                 options: dict[str, Any], params: dict[str, Any]) -> FieldModel:
    if not isinstance(data, xr.DataArray | xr.Dataset | list | tuple):
        raise TypeError(
            f"expected an xarray.DataArray, a Dataset or a list of DataArrays, got "
            f"{type(data).__name__}"
        )
    dims = [sample_dim] if isinstance(sample_dim, str) else list(sample_dim or [])
    first = data if not isinstance(data, list | tuple) else data[0]
    for dim in dims:
        if dim not in first.dims:
            raise ValueError(f"sample_dim={dim!r} is not a dimension of the data {first.dims}")
    return FieldModel(_model(model, params), sample_dim, **options)


def fit(
    data: Any,
    sample_dim: str | Sequence[str] | None = None,
    *,
    model: KernelPCA | PCA | None = None,
    weights: Any = None,
    standardize: bool = False,
    nan_policy: str = "raise",
    **params: Any,
) -> FieldModel:
    """Fit kernel PCA (or ``model``) on a field, one sample per index of ``sample_dim``.

    Parameters
    ----------
    data : DataArray, Dataset or list of DataArrays
        Any dimensions; numpy- or dask-backed.
    sample_dim : str or sequence of str, optional
        The sample dimension(s); the first dimension when left out.
    model : KernelPCA or PCA, optional
        The estimator to fit; by default ``KernelPCA(**params)``.
    weights, standardize, nan_policy
        See :class:`FieldModel`.
    **params
        Parameters of :class:`dkpca.KernelPCA` (only without ``model``).

    Returns
    -------
    FieldModel
        Fitted; ``.model_`` is the estimator.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 2)),
    ...                      dims=("time", "y", "x"))
    >>> fit(field, "time", n_components=2).model_.n_features_in_
    4
    """
    options = {"weights": weights, "standardize": standardize, "nan_policy": nan_policy}
    return _field_model(data, sample_dim, model, options, params).fit(data)


def transform(model: FieldModel, data: Any) -> xr.DataArray:
    """Scores of ``data`` on a fitted :class:`FieldModel`, over ``(*sample_dims, "mode")``.

    The sample coordinates are kept. Lazy (dask-backed) when ``data`` is.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 4)),
    ...                      dims=("time", "station"), coords={"time": np.arange(30)})
    >>> model = fit(field, n_components=3)
    >>> transform(model, field.isel(time=slice(0, 5))).sizes
    Frozen({'time': 5, 'mode': 3})
    """
    if not isinstance(model, FieldModel):
        raise TypeError(f"expected a FieldModel (from dkpca.xarray.fit), got {type(model)}")
    return model.transform(data)


def fit_transform(
    data: Any,
    sample_dim: str | Sequence[str] | None = None,
    *,
    model: KernelPCA | PCA | None = None,
    weights: Any = None,
    standardize: bool = False,
    nan_policy: str = "raise",
    **params: Any,
) -> xr.Dataset:
    """Fit on ``data`` and return its scores, eigenvalues (and PCA components) as a Dataset.

    Parameters
    ----------
    data : DataArray, Dataset or list of DataArrays
    sample_dim : str or sequence of str, optional
    model : KernelPCA or PCA, optional
    weights, standardize, nan_policy
        See :class:`FieldModel`.
    **params
        Parameters of :class:`dkpca.KernelPCA` (only without ``model``).

    Returns
    -------
    xarray.Dataset
        ``scores`` over ``(*sample_dims, "mode")`` with the sample coordinates (lazy when
        ``data`` is dask-backed); ``eigenvalues`` (of the centred kernel matrix, or for PCA
        of the centred Gram matrix ``X_c X_cᵀ``, so a linear kernel and PCA agree),
        ``explained_variance`` and ``explained_variance_ratio`` over ``mode``; for
        :class:`dkpca.PCA` of a DataArray also ``components`` over ``("mode", *grid dims)``
        (weighted space) and ``feature_mean`` over the grid. Attributes record the estimator,
        its parameters, the kernel and the dkpca version. Use :func:`fit` for a model that
        projects new fields.

    Examples
    --------
    >>> import numpy as np, xarray as xr, dkpca
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(50, 2, 3)),
    ...                      dims=("time", "lat", "lon"), coords={"lon": [0.0, 1.0, 2.0]})
    >>> ds = fit_transform(field, "time", model=dkpca.PCA(n_components=2))
    >>> ds.components.dims, ds.components.lon.values
    (('mode', 'lat', 'lon'), array([0., 1., 2.]))
    """
    options = {"weights": weights, "standardize": standardize, "nan_policy": nan_policy}
    field = _field_model(data, sample_dim, model, options, params)
    scores = field.fit_transform(data)
    fitted = field.model_
    modes = {MODE: scores[MODE].values}
    linear = hasattr(fitted, "components_")
    # One meaning for both models: eigenvalues of the centred Gram (kernel) matrix, so a linear
    # kernel PCA and PCA agree; explained_variance follows each estimator's own convention.
    eigenvalues = fitted.singular_values_**2 if linear else fitted.eigenvalues_
    variables: dict[str, Any] = {
        "scores": scores,
        "eigenvalues": xr.DataArray(eigenvalues, dims=MODE, coords=modes),
        "explained_variance": field.explained_variance(),
        "explained_variance_ratio": field.explained_variance_ratio(),
    }
    if linear and field.layout_.kind == "dataarray":
        variables["components"] = field.components()
        variables["feature_mean"] = field.layout_.on_grid(
            fitted.mean_ / field.layout_.scale, {}, "feature_mean")
    return xr.Dataset(variables, attrs=scores.attrs)


class _Accessor:
    def __init__(self, data: xr.DataArray | xr.Dataset):
        self._data = data

    def fit(self, sample_dim: str | Sequence[str] | None = None, **kwargs: Any) -> FieldModel:
        """See :func:`dkpca.xarray.fit`."""
        return fit(self._data, sample_dim, **kwargs)

    def transform(self, model: FieldModel) -> xr.DataArray:
        """See :func:`dkpca.xarray.transform`."""
        return transform(model, self._data)

    def fit_transform(self, sample_dim: str | Sequence[str] | None = None,
                      **kwargs: Any) -> xr.Dataset:
        """See :func:`dkpca.xarray.fit_transform`."""
        return fit_transform(self._data, sample_dim, **kwargs)


@xr.register_dataarray_accessor("dkpca")
class DkpcaAccessor(_Accessor):
    """``da.dkpca.fit(...)``, ``da.dkpca.transform(model)`` and ``da.dkpca.fit_transform(...)``.

    The same as :func:`fit`, :func:`transform` and :func:`fit_transform` with the DataArray
    (or, as ``ds.dkpca``, the Dataset) as ``data``.

    Examples
    --------
    >>> import numpy as np, xarray as xr, dkpca
    >>> field = xr.DataArray(np.random.default_rng(1).normal(size=(20, 3)), dims=("t", "f"))
    >>> field.dkpca.fit_transform(n_components=2).scores.shape
    (20, 2)
    """


@xr.register_dataset_accessor("dkpca")
class DkpcaDatasetAccessor(_Accessor):
    """``ds.dkpca``: the :class:`DkpcaAccessor` for a Dataset (its variables joined).

    Examples
    --------
    >>> import numpy as np, xarray as xr, dkpca
    >>> ds = xr.Dataset({"a": (("t", "x"), np.random.default_rng(1).normal(size=(20, 3))),
    ...                  "b": (("t", "y"), np.random.default_rng(2).normal(size=(20, 2)))})
    >>> maps = ds.dkpca.fit("t", model=dkpca.PCA(n_components=2)).components()
    >>> maps.a.dims, maps.b.dims
    (('mode', 'x'), ('mode', 'y'))
    """
