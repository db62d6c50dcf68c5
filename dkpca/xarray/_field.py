"""Decomposition of fields on a grid: :class:`FieldModel`, an estimator fitted on xarray data.

Over 500 lines, for one reason: ``FieldModel`` is one class whose public methods each carry a
doctested example (the API pages document a class's own methods, not a mixin's). The layout of
the training fields is in ``_training``, the grids in ``_grid``, the checks in ``_checks``,
``partial_fit`` in ``_incremental`` and saving in ``_store``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

from ._checks import NAMED, Describer, check_grids, clean_block
from ._grid import GridLayout, as_variables, float_dtype
from ._incremental import estimator_has
from ._training import all_rows, lay_out, sample_template

if TYPE_CHECKING:  # imported lazily: `import dkpca` (and every dask worker) stays light
    from dkpca.decomposition import KernelPCA
    from dkpca.linear import PCA

__all__ = ["MODE", "NAN_POLICIES", "FieldModel", "describe_model"]

#: The dimension of the modes (components), numbered from 1 as in xeofs and eofs.
MODE = "mode"

#: What to do with NaNs scattered among valid data (see :class:`FieldModel`).
NAN_POLICIES = ("raise", "drop_samples", "drop_features")



def describe_model(model: KernelPCA | PCA) -> dict[str, str]:
    """Attributes for results: JSON strings, so they survive ``to_zarr`` and ``to_netcdf``.

    Examples
    --------
    >>> from dkpca import PCA
    >>> sorted(describe_model(PCA(n_components=2)))
    ['dkpca_version', 'estimator', 'params']
    """
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
        try:
            attrs["kernel"] = json.dumps(model.kernel_.get_config())
        except ValueError:  # a Python function: no config, its description instead
            attrs["kernel"] = repr(model.kernel_)
        attrs["solver"] = model.solver_
    return attrs


class FieldModel:
    """PCA or kernel PCA of fields on a grid, with land masks, area weights and maps.

    Parameters
    ----------
    model : KernelPCA or PCA, optional
        The estimator, fitted on the fields' sample × grid-point matrix; by default
        ``KernelPCA()``.
    sample_dims : str or sequence of str, optional
        The sample dimension(s), e.g. ``"time"`` or ``("time", "member")``; every other
        dimension is a feature (grid) dimension. By default the first dimension.
    weights : {"coslat"}, DataArray, dict or None, default=None
        Feature weights, applied to the data before the model sees it. ``"coslat"`` is
        ``sqrt(cos(latitude))`` clipped at 0, the latitude found among the feature
        dimensions or coordinates by its usual names (``lat``, ``latitude``, ...); a DataArray
        broadcasts over the feature dimensions; a dict gives one per variable, keyed by the
        variables' names (a lone DataArray's ``name``; a key naming no variable is an error,
        a variable without a key is unweighted). Grid points of weight 0 are left out (NaN in
        outputs).
    standardize : bool, default=False
        Divide each grid point by its standard deviation (``ddof=0``, as xeofs and
        scikit-learn's ``StandardScaler``) over the training samples the model is fitted on
        (NaN ignored; under ``nan_policy="drop_samples"``, the samples left out are not
        counted) before weighting; constant grid points are left out.
    nan_policy : {"raise", "drop_samples", "drop_features"}, default="raise"
        Grid points NaN at every training sample (land) are always left out, and restored as
        NaN on the grid in every output; samples NaN everywhere are left out of the fit and get
        NaN scores. NaNs scattered among valid data raise an error naming where they are
        (``"raise"``), leave their samples out of the fit and give them NaN scores
        (``"drop_samples"``), or leave their grid points out (``"drop_features"``).

    Attributes
    ----------
    model_ : KernelPCA or PCA
        The fitted estimator: a clone of ``model``, which is left as it was (so one estimator
        may serve several FieldModels).
    layout_ : GridLayout
        The sample dimensions, each variable's grid and what the model sees of it.
    scores_ : xarray.DataArray
        The training scores over ``(*sample_dims, "mode")``; NaN for samples left out. After
        :meth:`partial_fit`, those of every sample seen, each computed by the model just after
        its call (its coordinate ``n_samples_seen`` says which).

    Notes
    -----
    Components and scores are those of the weighted (and standardised) data, as in xeofs:
    the components are orthonormal in that space. ``components(weighted=False)`` divides the
    weights out again, which gives the patterns in the data's units. Every output on the grid
    (``components``, ``patterns``, ``inverse_transform``) is in the original layout: a
    DataArray, or a Dataset with one variable per field, NaN where the model saw nothing. Each
    mode's sign is fixed: its largest component entry (PCA) or its largest training score
    (kernel PCA) is positive.

    Examples
    --------
    >>> import numpy as np, xarray as xr, dkpca
    >>> rng = np.random.default_rng(0)
    >>> sst = xr.DataArray(rng.normal(size=(40, 3, 4)), dims=("time", "lat", "lon"),
    ...                    coords={"lat": [-10.0, 0.0, 10.0]})
    >>> sst[:, 0, 0] = np.nan  # land
    >>> eof = FieldModel(dkpca.PCA(n_components=2), "time", weights="coslat").fit(sst)
    >>> eof.components().dims, bool(np.isnan(eof.components()[:, 0, 0]).all())
    (('mode', 'lat', 'lon'), True)
    >>> eof.scores_.dims, eof.explained_variance_ratio().mode.values.tolist()
    (('time', 'mode'), [1, 2])
    """

    def __init__(
        self,
        model: KernelPCA | PCA | None = None,
        sample_dims: str | Sequence[str] | None = None,
        *,
        weights: str | xr.DataArray | dict | None = None,
        standardize: bool = False,
        nan_policy: str = "raise",
    ) -> None:
        if nan_policy not in NAN_POLICIES:
            raise ValueError(f"nan_policy={nan_policy!r}; use one of {NAN_POLICIES}")
        self.model = model
        self.sample_dims = sample_dims
        self.weights = weights
        self.standardize = standardize
        self.nan_policy = nan_policy

    def __repr__(self) -> str:
        """Return the class name and the parameters that differ from their defaults.

        Examples
        --------
        >>> import dkpca
        >>> FieldModel(dkpca.PCA(n_components=4), "time", weights="coslat")
        FieldModel(PCA(n_components=4), sample_dims='time', weights='coslat')
        """
        parts = [] if self.model is None else [repr(self.model)]
        defaults = {"sample_dims": None, "weights": None, "standardize": False,
                    "nan_policy": "raise"}
        for name, default in defaults.items():
            value = getattr(self, name)
            if isinstance(value, str | bool | None) and value == default and \
                    type(value) is type(default):
                continue
            parts.append(f"{name}={_short_repr(value)}")
        return f"{type(self).__name__}({', '.join(parts)})"

    # Fitted attributes of the estimator, for code (such as ``dkpca info``) that reads them
    # from any fitted dkpca model. Each raises AttributeError when the FieldModel is not fitted
    # or its estimator lacks it, so ``hasattr`` tells.

    def _fitted(self, name: str) -> Any:
        model = self.__dict__.get("model_")
        if model is None or not hasattr(model, name):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}"
                                 + ("" if model is not None else " (not fitted)"))
        return getattr(model, name)

    @property
    def n_features_in_(self) -> int:
        """Number of grid points the estimator sees (all variables; land and weight 0 left out).

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 4)), dims=("t", "x"))
        >>> FieldModel(dkpca.PCA(2), "t").fit(field).n_features_in_
        4
        """
        return self._fitted("n_features_in_")

    @property
    def n_components_(self) -> int:
        """Number of modes (the estimator's ``n_components_``)."""
        return self._fitted("n_components_")

    @property
    def explained_variance_ratio_(self) -> np.ndarray:
        """Fraction of the variance along each mode, as a numpy array (the estimator's)."""
        return self._fitted("explained_variance_ratio_")

    @property
    def eigenvalues_(self) -> np.ndarray:
        """Eigenvalues of the centred training kernel matrix (kernel PCA only)."""
        return self._fitted("eigenvalues_")

    @property
    def kernel_(self) -> Any:
        """The fitted kernel (kernel PCA only)."""
        return self._fitted("kernel_")

    @property
    def solver_(self) -> str:
        """The solver the estimator used."""
        return self._fitted("solver_")

    @property
    def n_iter_(self) -> int:
        """Passes over the data the estimator's solver made (kernel PCA only)."""
        return self._fitted("n_iter_")

    @property
    def n_samples_(self) -> int:
        """Number of training samples the estimator was fitted on (samples left out excluded).

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 4)), dims=("t", "x"))
        >>> FieldModel(dkpca.KernelPCA(2), "t").fit(field).n_samples_
        30
        """
        if hasattr(self.__dict__.get("model_"), "n_samples_"):
            return self._fitted("n_samples_")
        return self._fitted("basis_").n_samples

    # ------------------------------------------------------------------------------ fit

    def _resolve_sample_dims(self, data: Any) -> tuple[str, ...]:
        _, pairs = as_variables(data)
        if self.sample_dims is None:
            return (str(pairs[0][1].dims[0]),)
        if isinstance(self.sample_dims, str):
            return (self.sample_dims,)
        return tuple(self.sample_dims)

    def fit(self, data: Any) -> FieldModel:
        """Fit on ``data`` (DataArray, Dataset or list of DataArrays). Returns ``self``.

        The estimator fitted, :attr:`model_`, is a clone of ``model``; ``model`` itself is
        left as it was. A Dataset's variables are matched by name in ``transform`` and
        ``partial_fit``, whatever their order; a list's variables are joined sample by sample,
        so they must have the same sample coordinates (an error names those that differ). A
        refused fit (too many components for the samples, say) leaves the FieldModel as it
        was.

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
        ...                      dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]})
        >>> model = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
        >>> model.model_.n_features_in_
        6
        """
        self._fit(data)
        return self

    def fit_transform(self, data: Any) -> xr.DataArray:
        """Fit on ``data`` and return the training scores (:attr:`scores_`).

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 4)), dims=("t", "x"))
        >>> FieldModel(dkpca.PCA(2), "t").fit_transform(field).dims
        ('t', 'mode')
        """
        return self._fit(data)

    def _fit(self, data: Any) -> xr.DataArray:
        from sklearn.base import clone

        # a clone: the estimator given is left as it was, so that two FieldModels sharing one
        # (or a FieldModel refitted on other fields) never change each other's model_
        model = clone(self._estimator())
        layout, X, rows, template = self._lay_out(data)
        training = model.fit_transform(X[rows] if not rows.all() else X)
        scores = self._scores_array(all_rows(training, rows, X.dtype), template,
                                    self._attrs(model, layout))
        # set only now: a refused fit (too many components, say) leaves the model as it was
        self.layout_, self.model_, self.scores_ = layout, model, scores
        return scores

    @estimator_has("partial_fit")
    def partial_fit(self, data: Any) -> FieldModel:
        """Add new samples (a new month) to the fit: the model becomes the fit on all seen.

        The first call on an unfitted FieldModel lays the fields out as :meth:`fit` does: it
        fixes the variables, their grids, the land mask (grid points NaN at every sample of
        this first batch), the weights and what ``nan_policy`` leaves out. Each later call
        takes fields on the same grids, NaN exactly at that land, and appends their samples.
        The estimator's ``partial_fit`` does the fitting (:class:`~dkpca.PCA` with the
        covariance solver; :class:`~dkpca.KernelPCA` with ``solver="nystrom"`` or
        ``"fixed_size"``), so after any number of calls the model equals :meth:`fit` on all
        the samples seen, to rounding. A FieldModel fitted by :meth:`fit`, or loaded with
        :func:`dkpca.load`, continues the same way.

        Parameters
        ----------
        data : DataArray, Dataset or list of DataArrays
            The new samples, with the model's variables on its grids (equal coordinates).
            With several sample dimensions they extend one of them, the others as fitted (a
            new month of every member, say).

        Returns
        -------
        self : FieldModel

        Raises
        ------
        AttributeError
            The estimator has no ``partial_fit`` (another solver): its own message, which
            names the solvers that have one; ``hasattr(model, "partial_fit")`` is then false.
        ValueError
            Other variables or another grid; values on the land or NaN where the model has
            data (the grid points named by their coordinates); samples already seen;
            ``standardize=True`` (each grid point's standard deviation changes with every
            batch). A refused batch leaves the model as it was.

        Notes
        -----
        *Scores.* :attr:`scores_` grows with every call: the new samples' scores, computed by
        the model just updated with them, are appended along the sample dimension, and a
        coordinate ``n_samples_seen`` gives, for every sample, the number of samples the model
        that scored it had seen. Earlier samples keep the scores of the model as it was then,
        as a monthly index is produced operationally: they are not recomputed, since the data
        is not kept. With a well-sampled first fit they drift little, but a mode whose
        eigenvalue is close to another's can change sign or order. For the scores of every
        sample under the current model, ``transform`` the whole field (from Zarr: lazily, one
        pass); ``scores_.where(scores_.n_samples_seen == model.n_samples_)`` keeps those of
        the current model.

        *Landmarks.* ``KernelPCA(solver=Nystrom(landmarks=...))`` takes rows of the
        estimator's matrix: the kept grid points, weighted. By default the first call chooses the landmarks among its
        samples, so it should hold enough of them.

        *Cost.* Per call, one pass over the new samples to check their NaNs (one compute for
        dask data) and one for the estimator's statistics; memory that of the estimator
        (``d × d`` for PCA with ``d`` grid points, ``m × m`` with ``m`` landmarks), plus the
        scores.

        Examples
        --------
        >>> import numpy as np, pandas as pd, xarray as xr, dkpca
        >>> time = pd.date_range("2000-01-01", periods=36, freq="MS")
        >>> sst = xr.DataArray(np.random.default_rng(0).normal(size=(36, 3, 4)),
        ...                    dims=("time", "lat", "lon"),
        ...                    coords={"time": time, "lat": [-10.0, 0.0, 10.0]})
        >>> sst[:, 0, 0] = np.nan  # land
        >>> eof = FieldModel(dkpca.PCA(n_components=2), "time", weights="coslat")
        >>> for year in (2000, 2001, 2002):
        ...     eof = eof.partial_fit(sst.sel(time=str(year)))
        >>> whole = FieldModel(dkpca.PCA(n_components=2), "time", weights="coslat").fit(sst)
        >>> bool(np.allclose(eof.explained_variance(), whole.explained_variance()))
        True
        >>> eof.scores_.sizes, eof.scores_.n_samples_seen.values[[0, 12, 35]].tolist()
        (Frozen({'time': 36, 'mode': 2}), [12, 24, 36])
        >>> month = sst.isel(time=[0]).assign_coords(time=[np.datetime64("2003-01-01")])
        >>> eof.partial_fit(month.fillna(0.0))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: the new field has values where the model has no data (...): grid points (lat=-10.0, lon=0). ...
        """
        from ._incremental import partial_fit

        partial_fit(self, data)
        return self

    def _lay_out(self, data: Any) -> tuple[GridLayout, Any, np.ndarray, xr.DataArray]:
        """Lay out the training fields as :meth:`fit` does (:func:`._training.lay_out`)."""
        return lay_out(data, self._resolve_sample_dims(data), self.weights, self.standardize,
                       self.nan_policy)

    def _estimator(self) -> KernelPCA | PCA:
        """Return the estimator given, or ``KernelPCA()``."""
        from dkpca.decomposition import KernelPCA

        return KernelPCA() if self.model is None else self.model

    def _modes(self, k: int | None = None) -> np.ndarray:
        k = self.model_.n_components_ if k is None else k
        return np.arange(1, k + 1)

    def _scores_array(self, scores: Any, template: xr.DataArray,
                      attrs: dict[str, Any] | None = None) -> xr.DataArray:
        k = scores.shape[1]
        shape = (*template.shape, k)
        if isinstance(scores, da.Array):
            scores = scores.rechunk({1: -1})
            if template.ndim > 1:
                scores = scores.rechunk({0: -1})
        values = scores.reshape(shape)
        return xr.DataArray(values, dims=(*template.dims, MODE),
                            coords={**dict(template.coords), MODE: self._modes(k)},
                            name="scores", attrs=self._attrs() if attrs is None else attrs)

    def _attrs(self, model: KernelPCA | PCA | None = None,
               layout: GridLayout | None = None) -> dict[str, Any]:
        """Attributes of results: those of ``model`` and ``layout`` (by default the fitted)."""
        model = self.model_ if model is None else model
        layout = self.layout_ if layout is None else layout
        weights = self.weights if isinstance(self.weights, str | None) else "user"
        return {**describe_model(model),
                "sample_dims": json.dumps(list(layout.sample_dims)),
                "weights": json.dumps(weights), "standardize": int(self.standardize),
                "nan_policy": self.nan_policy}

    # ------------------------------------------------------------------------ project

    def _check(self) -> None:
        from dkpca._validation import check_is_fitted

        check_is_fitted(self, "model_")

    def transform(self, data: Any) -> xr.DataArray:
        """Scores of new fields over ``(*sample_dims, "mode")``; lazy for dask-backed data.

        The new fields must be NaN exactly where the model has no data (land): a value there,
        or a NaN inside the model's grid points, is an error naming the coordinates (for dask
        data, when the first offending block is computed), except that samples NaN everywhere
        (or, under ``nan_policy="drop_samples"``, NaN anywhere) get NaN scores. A list's
        variables must share their sample coordinates (they are joined sample by sample).

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
        ...                      dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]})
        >>> model = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
        >>> model.transform(field.isel(time=slice(0, 4))).sizes
        Frozen({'time': 4, 'mode': 2})
        """
        self._check()
        layout = self.layout_
        data = layout.ordered(data)  # a Dataset's variables by name
        full = layout.matrix(data)
        _, pairs = as_variables(data)
        check_grids(layout, pairs)  # same shape, other coordinates: scores would be wrong
        template = sample_template(pairs[0][1], layout.sample_dims)
        kept, land = layout.kept, layout.land
        scale = layout.scale
        drop = self.nan_policy == "drop_samples"
        if isinstance(full, da.Array):
            # each block names its offending samples and grid points as the eager path does
            cleaned = full.rechunk({1: -1}).map_blocks(
                clean_block, kept, land, scale, drop, self._describer(template, pairs),
                dtype=float_dtype(full.dtype), chunks=(full.chunks[0], (int(kept.sum()) + 1,)))
            X, ok = cleaned[:, :-1], cleaned[:, -1] > 0
            scores = self.model_.transform(X).astype(X.dtype)  # as scores_ (see all_rows)
            scores = da.where(ok[:, None], scores, np.nan)
        else:
            describe = self._describer(template, pairs)
            cleaned = clean_block(full, kept, land, scale, drop, describe)
            X, ok = cleaned[:, :-1], cleaned[:, -1] > 0
            # the training matrix's dtype, as scores_: float32 data give float32 scores
            scores = np.array(self.model_.transform(X), dtype=X.dtype)
            scores[~ok] = np.nan
        return self._scores_array(scores, template)

    def _describer(self, template: xr.DataArray, pairs: list) -> Describer:
        """Turn flat row and column masks into coordinates, for error messages.

        Only the index coordinates are kept (no data), so that dask blocks can use it.
        """
        layout = self.layout_

        def index(array: xr.DataArray, dims: Sequence[str]) -> dict[str, Any]:
            return {d: array.coords[d].variable for d in dims if d in array.coords}

        grids = [(variable.name or "grid", variable.template.shape, variable.feature_dims,
                  index(array, variable.feature_dims))
                 for variable, (_, array) in zip(layout.variables, pairs, strict=True)]
        return Describer(template.shape, layout.sample_dims,
                         index(template, layout.sample_dims), grids)

    def inverse_transform(self, scores: xr.DataArray) -> Any:
        """Fields from scores over ``(..., "mode")``: back onto the grid, weights undone.

        NaN where the model has no data, and for scores that are NaN. Scores are matched to
        the model's modes by their ``mode`` labels, in any order; modes left out count as 0
        (the mean along them), so ``scores.sel(mode=[1, 2])`` gives the reconstruction from
        the first two modes. Scores without ``mode`` labels are taken in order. The scores'
        sample coordinates come along (a ``month`` on ``time`` too, as :meth:`transform`
        keeps them), and so does their dtype: float32 scores give float32 fields.

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
        ...                      dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]})
        >>> model = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
        >>> model.inverse_transform(model.scores_).dims
        ('time', 'lat', 'lon')
        >>> first = model.inverse_transform(model.scores_.sel(mode=[1]))  # mode 2 counts as 0
        >>> bool(np.allclose(first, model.inverse_transform(model.scores_.where(
        ...     model.scores_["mode"] == 1, 0.0))))
        True
        """
        self._check()
        if MODE not in scores.dims:
            raise ValueError(f"scores need a {MODE!r} dimension, got {scores.dims}")
        scores = self._by_mode(scores)
        lead = [d for d in scores.dims if d != MODE]
        ordered = scores.transpose(*lead, MODE)
        values = ordered.data
        shape = values.shape[:-1]
        Z = values.reshape(-1, values.shape[-1]) if values.ndim != 2 else values
        lazy = isinstance(Z, da.Array)
        ok = ~(da if lazy else np).isnan(Z).any(axis=1)
        clean = (da if lazy else np).where(ok[:, None], Z, 0.0)
        X = self.model_.inverse_transform(clean)
        X = X / self.layout_.scale.astype(X.dtype)  # float32 scores: float32 fields
        X = (da if lazy else np).where(ok[:, None], X, np.nan)
        X = X.reshape(*shape, X.shape[-1]) if len(shape) != 1 else X
        leading = {d: ordered.coords.get(d) for d in lead}
        out = self.layout_.on_grid(X, leading, "reconstruction")
        # the samples' other coordinates (a month on time, say), as transform keeps them
        extra = {n: c for n, c in ordered.coords.items()
                 if n not in lead and set(c.dims) <= set(lead)}
        return out.assign_coords(extra) if extra else out

    def _by_mode(self, scores: xr.DataArray) -> xr.DataArray:
        """Return ``scores`` over the model's modes, in order, by their ``mode`` labels.

        Modes missing from ``scores`` get the score 0 (the mean along them); scores without
        ``mode`` labels are taken in order.
        """
        if MODE not in scores.indexes:
            return scores
        modes = self._modes()
        labels = scores.indexes[MODE]
        unknown = [m for m in labels.tolist() if m not in set(modes.tolist())]
        if unknown:
            raise ValueError(
                f"the scores have modes {unknown[:NAMED]} that the model lacks; its modes are "
                f"{modes[0]} to {modes[-1]}. Select them, e.g. scores.sel(mode=model."
                f"explained_variance()['mode'])."
            )
        if labels.has_duplicates:
            raise ValueError(f"the scores' modes are repeated: {labels.tolist()}")
        if labels.equals(pd.Index(modes)):
            return scores
        return scores.reindex({MODE: modes}, fill_value=0.0)

    # ------------------------------------------------------------------------ outputs

    def components(self, weighted: bool = True) -> Any:
        """Return the components as maps over ``("mode", *grid dims)`` (linear PCA only).

        ``weighted=True``: in the weighted space the model saw (orthonormal there, as xeofs);
        ``False``: with the weights divided out. In the model's dtype (float32 for float32
        data).

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
        ...                      dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]})
        >>> model = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
        >>> model.components().dims
        ('mode', 'lat', 'lon')
        """
        self._check()
        if not hasattr(self.model_, "components_"):
            raise ValueError(
                "kernel PCA has no linear components; patterns() gives the pre-images of "
                "points along each mode (the nonlinear patterns)"
            )
        values = self.model_.components_
        if not weighted:
            values = values / self.layout_.scale.astype(values.dtype)  # float32 stays
        out = self.layout_.on_grid(values, {MODE: self._modes()}, "components")
        return out.assign_attrs(self._attrs())

    def patterns(self, positions: Sequence[float] = (-2.0, -1.0, 1.0, 2.0)) -> Any:
        """Fields at points along each mode's axis: the (nonlinear) patterns of the modes.

        For each mode and position ``p``, the pre-image of the point whose score on that mode
        is ``p`` standard deviations of the training scores, and 0 on the others, in the data's
        units. For PCA these are ``mean + p σ component``; for kernel PCA they trace the curved
        path of the mode through the data (the model's pre-image method is used). In the
        model's dtype (float32 for float32 data, as :attr:`scores_`).

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
        ...                      dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]})
        >>> model = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
        >>> model.patterns([-1.0, 1.0]).sizes
        Frozen({'mode': 2, 'position': 2, 'lat': 2, 'lon': 3})
        """
        self._check()
        k = self.model_.n_components_
        positions = np.asarray(positions, dtype=np.float64)
        std = np.sqrt(self.model_.explained_variance_)
        dtype = self.scores_.dtype  # the model's (float32 data: float32 patterns)
        Z = np.zeros((k, positions.size, k), dtype=dtype)
        Z[np.arange(k), :, np.arange(k)] = positions[None, :] * std[:, None]
        X = np.asarray(self.model_.inverse_transform(Z.reshape(-1, k)))
        X = X / self.layout_.scale.astype(X.dtype)
        out = self.layout_.on_grid(X.reshape(k, positions.size, -1),
                                   {MODE: self._modes(), "position": positions}, "patterns")
        return out.assign_attrs(self._attrs())

    def explained_variance(self) -> xr.DataArray:
        """Variance along each mode (the estimator's ``explained_variance_``).

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
        ...                      dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]})
        >>> model = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
        >>> model.explained_variance().dims
        ('mode',)
        """
        self._check()
        return xr.DataArray(self.model_.explained_variance_, dims=MODE,
                            coords={MODE: self._modes()}, name="explained_variance",
                            attrs=self._attrs())

    def explained_variance_ratio(self) -> xr.DataArray:
        """Fraction of the total (weighted) variance along each mode.

        Examples
        --------
        >>> import numpy as np, xarray as xr, dkpca
        >>> field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
        ...                      dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]})
        >>> model = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
        >>> model.explained_variance_ratio()["mode"].values.tolist()
        [1, 2]
        """
        self._check()
        return xr.DataArray(self.model_.explained_variance_ratio_, dims=MODE,
                            coords={MODE: self._modes()}, name="explained_variance_ratio",
                            attrs=self._attrs())


def _short_repr(value: Any) -> str:
    """Return a one-line repr of a parameter value (a DataArray as its dimensions and sizes)."""
    if isinstance(value, xr.DataArray):
        sizes = ", ".join(f"{d}: {n}" for d, n in value.sizes.items())
        return f"<DataArray ({sizes})>"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_short_repr(v)}" for k, v in value.items()) + "}"
    return repr(value)
