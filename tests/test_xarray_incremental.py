"""FieldModel.partial_fit: monthly batches of a gridded field equal one fit on all of them."""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dkpca
from dkpca.options import Nystrom
from dkpca.xarray import FieldModel

N_MONTHS = 60


def gridded(seed: int = 3) -> xr.DataArray:
    """time × lat × lon, monthly, with land (NaN at every month) in two corners."""
    rng = np.random.default_rng(seed)
    time = pd.date_range("2000-01-01", periods=N_MONTHS, freq="MS")
    lat, lon = np.array([-40.0, -10.0, 20.0, 50.0]), np.arange(0.0, 50.0, 10.0)
    values = rng.normal(size=(N_MONTHS, 4, 5)) @ np.diag([3.0, 2.0, 1.0, 1.0, 0.5])
    values[:, 0, 0] = values[:, 3, 4] = np.nan
    return xr.DataArray(values, dims=("time", "lat", "lon"), name="sst",
                        coords={"time": time, "lat": lat, "lon": lon})


@pytest.fixture
def field() -> xr.DataArray:
    return gridded()


def weighted_rows(field: xr.DataArray) -> np.ndarray:
    """What the estimator sees: ocean points, times sqrt(cos(lat))."""
    w = np.sqrt(np.cos(np.deg2rad(field.lat.values)))[:, None] * np.ones(field.sizes["lon"])
    flat = (field.values * w).reshape(field.sizes["time"], -1)
    return flat[:, ~np.isnan(flat).all(axis=0)]


ESTIMATORS = {
    "pca": lambda field: dkpca.PCA(n_components=3),
    "nystrom": lambda field: dkpca.KernelPCA(
        3, kernel="rbf", gamma=0.02, solver=Nystrom(landmarks=weighted_rows(field)[::3])),
}


def batches(field: xr.DataArray, n: int) -> list[xr.DataArray]:
    return [field.isel(time=idx) for idx in np.array_split(np.arange(field.sizes["time"]), n)]


def flipped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` with each mode (last axis) flipped to agree with ``b``."""
    signs = np.sign(np.nansum(a * b, axis=tuple(range(a.ndim - 1))))
    return a * signs


def assert_same_model(part: FieldModel, whole: FieldModel, field: xr.DataArray) -> None:
    assert part.n_samples_ == whole.n_samples_
    np.testing.assert_allclose(part.explained_variance(), whole.explained_variance(),
                               rtol=1e-10)
    np.testing.assert_allclose(part.explained_variance_ratio(),
                               whole.explained_variance_ratio(), rtol=1e-10)
    expected = whole.transform(field).values
    np.testing.assert_allclose(flipped(part.transform(field).values, expected), expected,
                               atol=1e-10)
    if hasattr(whole.model_, "components_"):
        eofs = whole.components().transpose(..., "mode").values
        got = part.components().transpose(..., "mode").values
        np.testing.assert_array_equal(np.isnan(got), np.isnan(eofs))
        np.testing.assert_allclose(flipped(got, eofs), eofs, atol=1e-10)


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
@pytest.mark.parametrize("n_batches", [1, 2, 10])
def test_monthly_batches_equal_fit_on_all(field, estimator, n_batches):
    whole = FieldModel(ESTIMATORS[estimator](field), "time", weights="coslat").fit(field)
    part = FieldModel(ESTIMATORS[estimator](field), "time", weights="coslat")
    seen = []
    for batch in batches(field, n_batches):
        assert part.partial_fit(batch) is part
        seen.append(part.n_samples_)
    assert_same_model(part, whole, field)
    # Every sample's scores, by the model just after its own batch: the last batch's are the
    # final model's (the fit's, up to sign); the coordinate says which model scored which.
    scores = part.scores_
    assert scores.dims == ("time", "mode") and scores.indexes["time"].equals(field.indexes["time"])
    sizes = [b.sizes["time"] for b in batches(field, n_batches)]
    np.testing.assert_array_equal(scores.n_samples_seen, np.repeat(seen, sizes))
    last = scores.isel(time=slice(-sizes[-1], None)).values
    expected = whole.scores_.isel(time=slice(-sizes[-1], None)).values
    np.testing.assert_allclose(flipped(last, expected), expected, atol=1e-10)
    assert scores.attrs["estimator"] == type(whole.model_).__name__


def test_a_fitted_model_continues_and_keeps_its_scores(field):
    whole = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat").fit(field)
    part = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat")
    part.fit(field.isel(time=slice(0, 48)))
    before = part.scores_.copy()
    part.partial_fit(field.isel(time=slice(48, None)))
    assert_same_model(part, whole, field)
    np.testing.assert_array_equal(part.scores_.isel(time=slice(0, 48)).values, before.values)
    assert part.scores_.n_samples_seen.values.tolist() == [48] * 48 + [60] * 12


def test_dask_batches_equal_numpy_batches(field):
    eager = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat")
    lazy = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat")
    for batch in batches(field, 3):
        eager.partial_fit(batch)
        lazy.partial_fit(batch.chunk({"time": 7}))
    np.testing.assert_allclose(lazy.explained_variance(), eager.explained_variance(),
                               rtol=1e-12)
    assert isinstance(lazy.scores_.data, dask.array.Array)
    np.testing.assert_allclose(lazy.scores_.values, eager.scores_.values, atol=1e-12)


def test_several_variables_and_members():
    ocean = gridded()
    members = xr.concat([ocean, 0.5 * ocean + gridded(4)], dim=pd.Index(["a", "b"], name="member"))
    data = xr.Dataset({"sst": members, "slp": members.isel(lat=slice(1, 3)).fillna(0.0) * 2})
    dims = ("time", "member")
    whole = FieldModel(dkpca.PCA(n_components=4), dims, weights="coslat").fit(data)
    part = FieldModel(dkpca.PCA(n_components=4), dims, weights="coslat")
    for idx in np.array_split(np.arange(N_MONTHS), 3):  # new months of every member
        part.partial_fit(data.isel(time=idx))
    np.testing.assert_allclose(part.explained_variance(), whole.explained_variance(),
                               rtol=1e-10)
    assert part.scores_.sizes == {"time": N_MONTHS, "member": 2, "mode": 4}
    with pytest.raises(ValueError, match="extend one of the sample dimensions"):
        part.partial_fit(data.isel(time=[0], member=[0]).assign_coords(
            time=[np.datetime64("2010-01-01")]))


# ---------------------------------------------------------------------- refused batches

def later(field: xr.DataArray, months: int = 2) -> xr.DataArray:
    """Months after the field's, same grid."""
    new = field.isel(time=slice(0, months)).copy(deep=True)
    return new.assign_coords(time=pd.date_range("2010-01-01", periods=months, freq="MS"))


def test_a_new_nan_pattern_names_the_grid_points(field):
    model = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat").partial_fit(field)
    scores = model.scores_
    gap = later(field)
    gap[1, 2, 3] = np.nan  # a new NaN in the ocean
    with pytest.raises(ValueError, match=r"NaN where the model has data: samples \(time="
                                         r"2010-02-01.*; grid points \(lat=20.0, lon=30.0\)"):
        model.partial_fit(gap)
    wet = later(field)
    wet[:, 0, 0] = 1.0  # a value on the land of the first call
    with pytest.raises(ValueError, match=r"no data .*grid points \(lat=-40.0, lon=0.0\)\. "
                                         r"partial_fit keeps the land mask of its first call"):
        model.partial_fit(wet)
    with pytest.raises(ValueError, match=r"grid points \(lat=-40.0, lon=0.0\)"):  # lazily too
        model.partial_fit(wet.chunk({"time": 1}))
    assert model.n_samples_ == N_MONTHS  # refused batches leave the model as it was
    xr.testing.assert_identical(model.scores_, scores)


def test_empty_and_dropped_samples_get_nan_scores(field):
    kwargs = {"weights": "coslat", "nan_policy": "drop_samples"}
    gappy = field.copy(deep=True)
    gappy[40, 1, 1] = np.nan
    gappy[50] = np.nan  # a missing month
    whole = FieldModel(dkpca.PCA(n_components=3), "time", **kwargs).fit(gappy)
    part = FieldModel(dkpca.PCA(n_components=3), "time", **kwargs)
    for batch in batches(gappy, 6):
        part.partial_fit(batch)
    assert_same_model(part, whole, field)
    nan = np.isnan(part.scores_.values).all(axis=1)
    assert np.flatnonzero(nan).tolist() == [40, 50]
    part.partial_fit(later(field).where(False))  # a batch of missing months only
    assert part.n_samples_ == whole.n_samples_ and np.isnan(part.scores_[-2:]).all()


def test_another_grid_is_refused(field):
    model = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat").partial_fit(field)
    moved = later(field).assign_coords(lon=field.lon + 2.5)
    with pytest.raises(ValueError, match=r"another grid than the model along 'lon'.*"
                                         r"\[0.0, 10.0, 20.0, 30.0, 40.0\].*\[2.5, 12.5.*"
                                         r"interp_like\(grid\)"):
        model.partial_fit(moved)
    with pytest.raises(ValueError, match=r"grid of shape \(3, 5\)"):
        model.partial_fit(later(field).isel(lat=slice(0, 3)))
    with pytest.raises(ValueError, match="1 variable"):
        model.partial_fit(xr.Dataset({"a": later(field), "b": later(field)}))
    with pytest.raises(ValueError, match="another grid than the model along 'lon'"):
        model.transform(moved)  # the same shape elsewhere would give wrong scores silently


def test_samples_already_seen_are_refused(field):
    model = FieldModel(dkpca.PCA(n_components=3), "time").partial_fit(field.isel(time=slice(0, 30)))
    overlapping = field.isel(time=slice(20, 40)).drop_sel(time=field.time[22:25])
    with pytest.raises(ValueError, match=r"already seen: time=2001-09-01 00:00:00, 2001-10-01"
                                         r".* and 2 more\. .*drop_sel") as refused:
        model.partial_fit(overlapping)
    assert model.n_samples_ == 30
    assert "field.drop_sel(time=model.scores_['time'].values, errors='ignore')" in str(
        refused.value)
    model.partial_fit(overlapping.drop_sel(time=model.scores_["time"].values, errors="ignore"))
    assert model.n_samples_ == 40


def test_standardize_is_refused(field):
    with pytest.raises(ValueError, match="cannot standardize.*standardize=False"):
        FieldModel(dkpca.PCA(n_components=3), "time", standardize=True).partial_fit(field)


@pytest.mark.parametrize("estimator, message", [
    (dkpca.PCA(2, solver="gram"), "PCA: partial_fit needs solver='covariance'"),
    (dkpca.KernelPCA(2, solver="exact"), "KernelPCA: partial_fit needs solver='nystrom'"),
    (None, "KernelPCA: partial_fit needs solver='nystrom'"),  # the default KernelPCA()
])
def test_an_estimator_without_partial_fit_says_so(field, estimator, message):
    model = FieldModel(estimator, "time")
    assert not hasattr(model, "partial_fit")
    with pytest.raises(AttributeError, match=message):
        model.partial_fit(field)
    assert not hasattr(model.fit(field.isel(time=slice(0, 20))), "partial_fit")


def test_an_estimator_fitted_elsewhere_starts_afresh(field):
    pca = dkpca.PCA(n_components=3).fit(np.random.default_rng(0).normal(size=(10, 18)))
    part = FieldModel(pca, "time", weights="coslat").partial_fit(field)
    whole = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat").fit(field)
    assert_same_model(part, whole, field)


# ---------------------------------------------------------------------- save, load, go on

@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_saved_model_continues_after_loading(field, estimator, tmp_path):
    whole = FieldModel(ESTIMATORS[estimator](field), "time", weights="coslat").fit(field)
    first, *rest = batches(field, 3)
    part = FieldModel(ESTIMATORS[estimator](field), "time", weights="coslat")
    part.partial_fit(first)
    dkpca.save(part, tmp_path / "field.zarr")
    for batch in rest:  # each month's job: load, add the new samples, save
        part = dkpca.load(tmp_path / "field.zarr").partial_fit(batch)
        dkpca.save(part, tmp_path / "field.zarr", overwrite=True)
    assert_same_model(part, whole, field)
    xr.testing.assert_identical(dkpca.load(tmp_path / "field.zarr").scores_, part.scores_)
    assert part.scores_.n_samples_seen.values[[0, 20, 59]].tolist() == [20, 40, 60]


# ------------------------------------------------------------- refused batches, estimators

@pytest.mark.parametrize("change", ["no time index", "an extra coordinate"])
def test_a_batch_with_other_coordinates_leaves_the_model_unchanged(field, change):
    """The estimator was updated before the scores were joined, which then failed."""
    whole = FieldModel(dkpca.PCA(n_components=3), "time").fit(field)
    model = FieldModel(dkpca.PCA(n_components=3), "time").partial_fit(field.isel(time=slice(0, 30)))
    before = model.scores_.copy()
    rest = field.isel(time=slice(30, 60))
    bad = (rest.drop_vars("time") if change == "no time index" else
           rest.assign_coords(month=("time", rest.time.dt.month.values)))
    with pytest.raises(ValueError, match=r"coordinates do not match.*The model is unchanged"):
        model.partial_fit(bad)
    assert model.n_samples_ == 30
    xr.testing.assert_identical(model.scores_, before)
    model.partial_fit(rest)  # the corrected batch counts once
    assert_same_model(model, whole, field)


def test_partial_fit_leaves_the_estimator_given_as_it_was(field):
    given = dkpca.PCA(n_components=3)
    model = FieldModel(given, "time").partial_fit(field.isel(time=slice(0, 30)))
    assert not hasattr(given, "n_features_in_") and model.model_ is not given
    model.partial_fit(field.isel(time=slice(30, 60)))
    assert not hasattr(given, "n_features_in_")


def test_an_integer_field_is_the_float_field(field):
    """The coslat weights were cast to the field's integer dtype (all 0 or 1)."""
    counts = (field.fillna(0.0) * 10).round().astype(np.int32)
    counts = counts.isel(lat=slice(1, 3))  # no land: integers have no NaN
    whole = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat").fit(
        counts.astype(np.float64))
    part = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat")
    for batch in batches(counts, 3):
        part.partial_fit(batch)
    assert_same_model(part, whole, counts.astype(np.float64))
    np.testing.assert_allclose(part.scores_.isel(time=slice(40, 60)),
                               part.transform(counts.isel(time=slice(40, 60))), atol=1e-10)


def test_a_dataset_batch_is_matched_by_name(field):
    ice = (field * 0.5 + 1.0).rename("ice")
    ds = xr.Dataset({"sst": field, "ice": ice})
    whole = FieldModel(dkpca.PCA(n_components=3), "time").fit(ds)
    part = FieldModel(dkpca.PCA(n_components=3), "time").partial_fit(ds.isel(time=slice(0, 30)))
    part.partial_fit(ds[["ice", "sst"]].isel(time=slice(30, 60)))
    np.testing.assert_allclose(part.explained_variance(), whole.explained_variance(),
                               rtol=1e-10)
    expected = whole.transform(ds).values
    np.testing.assert_allclose(flipped(part.transform(ds[["ice", "sst"]]).values, expected),
                               expected, atol=1e-10)
