"""xarray in, xarray out: kernel PCA and PCA on DataArrays, with their coordinates kept.

One dimension holds the samples (``time`` in a climate field); all the others are stacked,
in order, into features. Scores come back over ``(sample_dim, "component")`` with the sample
coordinates; for linear PCA the components come back over the original feature dimensions.
Importing :mod:`dkpca` registers the ``.dkpca`` accessor on every DataArray.

Examples
--------
>>> import numpy as np, xarray as xr, dkpca
>>> field = xr.DataArray(
...     np.random.default_rng(0).normal(size=(40, 3, 4)), dims=("time", "lat", "lon"),
...     coords={"time": np.arange(40), "lat": [10.0, 20.0, 30.0]},
... )
>>> result = field.dkpca.fit_transform(sample_dim="time", n_components=2, kernel="rbf")
>>> result.scores.dims, result.eigenvalues.dims
(('time', 'component'), ('component',))
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

if TYPE_CHECKING:  # imported lazily: `import dkpca` (and every dask worker) stays light
    from dkpca.decomposition import PCA, KernelPCA

__all__ = ["DkpcaAccessor", "fit", "fit_transform", "transform"]

_COMPONENT = "component"


def _sample_dim(data: xr.DataArray, sample_dim: str | None) -> str:
    if not isinstance(data, xr.DataArray):
        raise TypeError(f"expected an xarray.DataArray, got {type(data).__name__}")
    if sample_dim is None:
        return str(data.dims[0])
    if sample_dim not in data.dims:
        raise ValueError(f"sample_dim={sample_dim!r} is not a dimension of the DataArray {data.dims}")
    return sample_dim


def _samples_first(data: xr.DataArray, sample_dim: str) -> xr.DataArray:
    return data.transpose(sample_dim, ...)


def _coords_on(data: xr.DataArray, dims: set[str]) -> dict[str, xr.DataArray]:
    """Return the coordinates of ``data`` that lie on ``dims`` only."""
    return {name: coord for name, coord in data.coords.items() if set(coord.dims) <= dims}


def _model(model: KernelPCA | PCA | None, params: dict[str, Any]) -> KernelPCA | PCA:
    if model is None:
        from dkpca.decomposition import KernelPCA

        return KernelPCA(**params)
    if params:
        raise ValueError(
            f"give the parameters {sorted(params)} to the model itself, not beside model="
        )
    return model


def _component_index(k: int) -> np.ndarray:
    return np.arange(1, k + 1)


def fit(
    data: xr.DataArray,
    sample_dim: str | None = None,
    *,
    model: KernelPCA | PCA | None = None,
    **params: Any,
) -> KernelPCA | PCA:
    """Fit kernel PCA (or ``model``) on a DataArray, one sample per index of ``sample_dim``.

    Parameters
    ----------
    data : xarray.DataArray
        Any dimensions; numpy- or dask-backed.
    sample_dim : str, optional
        The sample dimension; the first dimension when left out.
    model : KernelPCA or PCA, optional
        The estimator to fit; by default ``KernelPCA(**params)``.
    **params
        Parameters of :class:`dkpca.KernelPCA` (only without ``model``).

    Returns
    -------
    KernelPCA or PCA
        The fitted estimator.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 2)),
    ...                      dims=("time", "y", "x"))
    >>> fit(field, "time", n_components=2).n_features_in_
    4
    """
    sample_dim = _sample_dim(data, sample_dim)
    return _model(model, params).fit(_samples_first(data, sample_dim))


def transform(
    model: KernelPCA | PCA, data: xr.DataArray, sample_dim: str | None = None
) -> xr.DataArray:
    """Scores of ``data`` on a fitted model's components, over ``(sample_dim, "component")``.

    The sample coordinates are kept. Lazy (dask-backed) when ``data`` is.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 4)),
    ...                      dims=("time", "station"), coords={"time": np.arange(30)})
    >>> model = fit(field, n_components=3)
    >>> transform(model, field.isel(time=slice(0, 5))).sizes
    Frozen({'time': 5, 'component': 3})
    """
    sample_dim = _sample_dim(data, sample_dim)
    scores = model.transform(_samples_first(data, sample_dim))
    return _scores_array(scores, data, sample_dim)


def _scores_array(scores: Any, data: xr.DataArray, sample_dim: str) -> xr.DataArray:
    coords = _coords_on(data, {sample_dim})
    coords[_COMPONENT] = _component_index(scores.shape[1])
    return xr.DataArray(scores, dims=(sample_dim, _COMPONENT), coords=coords, name="scores")


def _description(model: KernelPCA | PCA) -> dict[str, str]:
    """Attributes for results: JSON strings, so they survive ``to_zarr`` and ``to_netcdf``."""
    from dkpca._version import __version__
    from dkpca.kernels import Kernel

    params = {
        k: (v.get_config() if isinstance(v, Kernel) else v)
        for k, v in model.get_params(deep=False).items()
        if v is None or isinstance(v, bool | int | float | str | Kernel)
    }
    attrs = {"dkpca_version": __version__, "estimator": type(model).__name__,
             "params": json.dumps(params)}
    if hasattr(model, "kernel_"):
        attrs["kernel"] = json.dumps(model.kernel_.get_config())
        attrs["solver"] = model.solver_
    return attrs


def fit_transform(
    data: xr.DataArray,
    sample_dim: str | None = None,
    *,
    model: KernelPCA | PCA | None = None,
    **params: Any,
) -> xr.Dataset:
    """Fit on ``data`` and return its scores, eigenvalues (and PCA components) as a Dataset.

    Parameters
    ----------
    data : xarray.DataArray
        Any dimensions; numpy- or dask-backed.
    sample_dim : str, optional
        The sample dimension; the first dimension when left out.
    model : KernelPCA or PCA, optional
        The estimator to fit; by default ``KernelPCA(**params)``.
    **params
        Parameters of :class:`dkpca.KernelPCA` (only without ``model``).

    Returns
    -------
    xarray.Dataset
        ``scores`` over ``(sample_dim, "component")`` with the sample coordinates (lazy when
        ``data`` is dask-backed); ``eigenvalues`` (of the centred kernel matrix, or for PCA
        of the centred Gram matrix ``X_c X_cᵀ``, so a linear kernel and PCA agree),
        ``explained_variance`` and ``explained_variance_ratio`` over ``component``
        (the estimator's attributes of the same names); for :class:`dkpca.PCA` also
        ``components`` over ``("component", *feature_dims)`` and ``feature_mean`` over the
        feature dimensions, with their coordinates.
        Attributes record the estimator, its parameters, the kernel and the dkpca version.
        To project new data later, pass ``model=`` (it is fitted in place) or use :func:`fit`
        and :func:`transform`.

    Examples
    --------
    >>> import numpy as np, xarray as xr, dkpca
    >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(50, 2, 3)),
    ...                      dims=("time", "lat", "lon"), coords={"lon": [0.0, 1.0, 2.0]})
    >>> ds = fit_transform(field, "time", model=dkpca.PCA(n_components=2))
    >>> ds.components.dims, ds.components.lon.values
    (('component', 'lat', 'lon'), array([0., 1., 2.]))
    """
    sample_dim = _sample_dim(data, sample_dim)
    model = _model(model, params)
    ordered = _samples_first(data, sample_dim)
    scores = model.fit_transform(ordered)
    k = scores.shape[1]
    component = {_COMPONENT: _component_index(k)}
    variables: dict[str, xr.DataArray] = {"scores": _scores_array(scores, data, sample_dim)}
    linear = hasattr(model, "components_")
    # One meaning for both models: eigenvalues of the centred Gram (kernel) matrix, so a linear
    # kernel PCA and PCA agree; explained_variance follows each estimator's own convention.
    eigenvalues = model.singular_values_**2 if linear else model.eigenvalues_
    variables["eigenvalues"] = xr.DataArray(eigenvalues, dims=_COMPONENT, coords=component)
    variables["explained_variance"] = xr.DataArray(
        model.explained_variance_, dims=_COMPONENT, coords=component
    )
    if linear:
        feature_dims = tuple(str(d) for d in ordered.dims[1:])
        feature_shape = tuple(ordered.sizes[d] for d in feature_dims)
        feature_coords = _coords_on(ordered, set(feature_dims))
        variables["components"] = xr.DataArray(
            model.components_.reshape(k, *feature_shape), dims=(_COMPONENT, *feature_dims),
            coords={**feature_coords, **component},
        )
        variables["feature_mean"] = xr.DataArray(
            model.mean_.reshape(feature_shape), dims=feature_dims, coords=feature_coords
        )
    variables["explained_variance_ratio"] = xr.DataArray(
        model.explained_variance_ratio_, dims=_COMPONENT, coords=component
    )
    return xr.Dataset(variables, attrs=_description(model))


@xr.register_dataarray_accessor("dkpca")
class DkpcaAccessor:
    """``da.dkpca.fit(...)``, ``da.dkpca.transform(model)`` and ``da.dkpca.fit_transform(...)``.

    The same as :func:`fit`, :func:`transform` and :func:`fit_transform` with the DataArray
    as ``data``.

    Examples
    --------
    >>> import numpy as np, xarray as xr, dkpca
    >>> field = xr.DataArray(np.random.default_rng(1).normal(size=(20, 3)), dims=("t", "f"))
    >>> field.dkpca.fit_transform(n_components=2).scores.shape
    (20, 2)
    """

    def __init__(self, data: xr.DataArray):
        self._data = data

    def fit(self, sample_dim: str | None = None, **kwargs: Any) -> KernelPCA | PCA:
        """See :func:`dkpca.xarray.fit`."""
        return fit(self._data, sample_dim, **kwargs)

    def transform(self, model: KernelPCA | PCA, sample_dim: str | None = None) -> xr.DataArray:
        """See :func:`dkpca.xarray.transform`."""
        return transform(model, self._data, sample_dim)

    def fit_transform(self, sample_dim: str | None = None, **kwargs: Any) -> xr.Dataset:
        """See :func:`dkpca.xarray.fit_transform`."""
        return fit_transform(self._data, sample_dim, **kwargs)
