"""Incremental fitting of a :class:`FieldModel`: new samples (a new month) added to the fit.

:meth:`FieldModel.partial_fit` is the method; this module holds its steps. The first call lays
the fields out as ``fit`` does (variables, grids, land mask, weights) and starts the
estimator's ``partial_fit``; each later call checks that the new fields fit that layout — the
same grids, NaN exactly at the land — before the estimator sees them, so that a refused batch
leaves the model as it was. The estimator's statistics are sums over rows, which makes the
model after any number of calls the fit on all the samples seen.

The training scores (``scores_``) grow along the sample dimension; each sample's scores are
those of the model just after its own call, and the ``n_samples_seen`` coordinate says which
model that was (see the Notes of :meth:`FieldModel.partial_fit`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import xarray as xr

from dkpca._estimator import available_when

from ._checks import NAMED, check_grids, check_nan_pattern
from ._grid import as_variables
from ._training import all_rows, sample_template

if TYPE_CHECKING:
    from ._field import FieldModel

__all__ = ["SEEN", "estimator_has", "partial_fit"]

#: Coordinate of the scores after ``partial_fit``: how many samples the model that computed
#: them had seen (the estimator's ``n_samples_seen_`` just after that call).
SEEN = "n_samples_seen"


def estimator_has(name: str) -> available_when:
    """Make a FieldModel method exist only where its estimator has the method of that name.

    ``hasattr(field_model, name)`` is then what it is for the estimator (the fitted one, or the
    one given), and reaching the method where the estimator lacks it raises the estimator's
    own ``AttributeError``, which says why and which solvers have it.

    Examples
    --------
    >>> import dkpca
    >>> from dkpca.xarray import FieldModel
    >>> hasattr(FieldModel(dkpca.PCA(2)), "partial_fit")
    True
    >>> FieldModel(dkpca.PCA(2, solver="gram")).partial_fit
    Traceback (most recent call last):
    ...
    AttributeError: PCA: partial_fit needs solver='covariance' (or 'auto'), whose statistics are a sum over rows; solver='gram' needs every row at once.
    """

    def check(instance: Any) -> None:
        estimator = instance.__dict__.get("model_")
        getattr(instance._estimator() if estimator is None else estimator, name)

    return available_when(check)


def partial_fit(model: FieldModel, data: Any) -> None:
    """Add the samples of ``data`` to ``model`` (the body of :meth:`FieldModel.partial_fit`)."""
    if model.standardize:
        raise ValueError(
            "FieldModel.partial_fit cannot standardize: each grid point's standard deviation "
            "changes with every batch, so the model would not be the fit on all the samples. "
            "Divide the field by a fixed standard deviation (a climatology's) first and pass "
            "standardize=False, or fit on all the samples at once."
        )
    if "model_" not in model.__dict__:
        _start(model, data)
    else:
        _continue(model, data)


def _start(model: FieldModel, data: Any) -> None:
    """First call: lay the fields out as ``fit`` does and start a clone of the estimator."""
    from sklearn.base import clone

    # a clone, as fit does: the estimator given stays as it was (fitted elsewhere, or shared
    # with another FieldModel), and a refused first batch leaves nothing behind
    estimator = clone(model._estimator())
    layout, X, rows, template = model._lay_out(data)
    batch = X[rows] if not rows.all() else X
    estimator.partial_fit(batch)
    scores = all_rows(estimator.transform(batch), rows, X.dtype)
    model.layout_, model.model_ = layout, estimator
    model.scores_ = _scored(model, scores, template)


def _continue(model: FieldModel, data: Any) -> None:
    """Later calls: check ``data`` against the layout, update the estimator, append scores.

    Every check, the join of the new samples' coordinates to the scores' included, comes
    before the estimator's ``partial_fit`` (which leaves the estimator as it was when it
    refuses a batch): a refused batch leaves the model as it was.
    """
    layout, estimator = model.layout_, model.model_
    data = layout.ordered(data)
    _, pairs = as_variables(data)
    full = layout.matrix(data)  # the variables, their feature dimensions and grid shapes
    check_grids(layout, pairs)
    template = sample_template(pairs[0][1], layout.sample_dims)
    dim = _append_dim(model.scores_, template)
    rows = _usable_rows(model, full, template, pairs)
    previous = _seen(model)
    old = model.scores_
    if SEEN not in old.coords:  # all computed by the model as it was before this call
        old = old.assign_coords({SEEN: (old.dims[:-1], np.full(old.shape[:-1], previous))})
    trial = np.full((rows.size, old.shape[-1]), np.nan, dtype=old.dtype)
    _join(old, _scored(model, trial, template), dim)  # refused here, not after the update
    if rows.any():
        batch = layout.features(full)
        batch = batch[rows] if not rows.all() else batch
        estimator.partial_fit(batch)
        scores = all_rows(estimator.transform(batch), rows, batch.dtype)
    else:  # samples NaN everywhere (a missing month): nothing to learn, NaN scores
        scores = np.full((rows.size, estimator.n_components_), np.nan, dtype=old.dtype)
    new = _scored(model, scores, template)
    model.scores_ = _join(old, new, dim).assign_attrs(new.attrs)


def _join(old: xr.DataArray, new: xr.DataArray, dim: str) -> xr.DataArray:
    """Append the new samples' scores along ``dim``; refuse other sample coordinates."""
    try:
        return xr.concat([old, new], dim=dim, coords="different", compat="equals",
                         join="exact", combine_attrs="override")
    except (ValueError, KeyError) as error:
        mode = old.dims[-1]
        names = sorted(str(c) for c in old.coords if c not in (mode, SEEN))
        given = sorted(str(c) for c in new.coords if c not in (mode, SEEN))
        raise ValueError(
            f"the new samples' coordinates do not match those of the samples seen ({error}): "
            f"the scores have the coordinates {names}, the new field {given}. Give the new "
            f"field the same sample coordinates (e.g. its time index, and no others), or drop "
            f"the extra ones with field.drop_vars(...). The model is unchanged."
        ) from error


def _seen(model: FieldModel) -> int:
    """Return the number of samples the estimator has seen."""
    seen = getattr(model.model_, "n_samples_seen_", None)
    return int(model.n_samples_ if seen is None else seen)


def _scored(model: FieldModel, scores: Any, template: xr.DataArray) -> xr.DataArray:
    """Scores over the sample dimensions, with the :data:`SEEN` coordinate of the model now."""
    out = model._scores_array(scores, template)
    return out.assign_coords({SEEN: (template.dims,
                                     np.full(template.shape, _seen(model), dtype=np.int64))})


def _append_dim(old: xr.DataArray, template: xr.DataArray) -> str:
    """Return the sample dimension the new samples extend; the others must be as fitted.

    Refuses samples already seen (they would count twice) and samples that extend no single
    dimension (a new month for only some members of an ensemble fitted over all of them).
    """
    dims = tuple(str(d) for d in template.dims)

    def same(d: str) -> bool:
        if d in old.indexes and d in template.indexes:
            return bool(old.indexes[d].equals(template.indexes[d]))
        return old.sizes[d] == template.sizes[d]

    def repeated(d: str) -> list:
        if d in old.indexes and d in template.indexes:
            return old.indexes[d].intersection(template.indexes[d]).tolist()
        return []

    candidates = [d for d in dims if all(same(o) for o in dims if o != d)]
    if not candidates:
        sizes = ", ".join(f"{d}: {old.sizes[d]} fitted, {template.sizes[d]} new" for d in dims)
        raise ValueError(
            f"the new samples must extend one of the sample dimensions {dims}, with the others "
            f"as fitted ({sizes}); give a new month for every member, say, or fit anew."
        )
    for d in candidates:
        if not repeated(d):
            return d
    seen = repeated(candidates[0])
    shown = ", ".join(str(v) for v in seen[:NAMED]) + (
        f" and {len(seen) - NAMED} more" if len(seen) > NAMED else "")
    raise ValueError(
        f"the new field repeats samples the model has already seen: {candidates[0]}={shown}. "
        f"partial_fit adds new samples only (one given twice would count twice); leave them "
        f"out, e.g. field.drop_sel({candidates[0]}=model.scores_[{candidates[0]!r}].values, "
        f"errors='ignore'), "
        f"or fit anew on all the samples."
    )


def _usable_rows(model: FieldModel, full: Any, template: xr.DataArray, pairs: list) -> np.ndarray:
    """Check that new rows are NaN exactly where the model has no data; return those to fit.

    As ``transform`` checks them (values on the land, NaN among the kept grid points, named by
    their coordinates), in one pass (one compute for dask data). Rows NaN everywhere, and under
    ``nan_policy="drop_samples"`` rows with any NaN, are left out (NaN scores).
    """
    from dkpca.blocked import compute

    layout = model.layout_
    kept, land = layout.kept, layout.land
    xp = da if isinstance(full, da.Array) else np
    isnan = xp.isnan(full)
    gaps = isnan[:, kept]
    empty = isnan.all(axis=1)
    flags = [(~isnan[:, land]).any(axis=0), gaps.any(axis=1), empty,
             (gaps & ~empty[:, None]).any(axis=0)]
    if xp is da:
        flags = compute(*flags)
    wet, gapped, empty, gap_columns = (np.asarray(f) for f in flags)
    check_nan_pattern(
        wet, gapped & ~empty, gap_columns, land, kept, model.nan_policy == "drop_samples",
        model._describer(template, pairs),
        land_hint=(". partial_fit keeps the land mask of its first call: set these points to "
                   "NaN, or fit anew on all the samples."),
    )
    return ~gapped
