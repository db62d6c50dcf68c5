"""dkpca.xarray.FieldModel on real gridded data: land, weights, NaN policies, shapes, xeofs."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from conftest import raise_if_dask_computes

import dkpca
from dkpca.xarray import FieldModel


def same_up_to_sign(a: np.ndarray, b: np.ndarray, axis: int = 0) -> np.ndarray:
    """``a`` with each slice along ``axis`` flipped to agree with ``b``."""
    a, b = np.moveaxis(a, axis, 0), np.moveaxis(b, axis, 0)
    flat_a, flat_b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    signs = np.sign(np.nansum(flat_a * flat_b, axis=1))
    return np.moveaxis(a * signs.reshape(-1, *([1] * (a.ndim - 1))), 0, axis)


@pytest.fixture(scope="module")
def sst() -> xr.DataArray:
    eofs = pytest.importorskip("eofs.examples")
    return xr.open_dataset(eofs.example_data_path("sst_ndjfm_anom.nc"))["sst"].load()


@pytest.fixture
def field() -> xr.DataArray:
    """time × lat × lon with land (NaN at every time) in two corners."""
    rng = np.random.default_rng(3)
    time = pd.date_range("2000-01-01", periods=60, freq="MS")
    lat, lon = np.array([-40.0, -10.0, 20.0, 50.0]), np.arange(0.0, 50.0, 10.0)
    values = rng.normal(size=(60, 4, 5)) @ np.diag([3.0, 2.0, 1.0, 1.0, 0.5])
    values[:, 0, 0] = values[:, 3, 4] = np.nan
    return xr.DataArray(values, dims=("time", "lat", "lon"), name="sst",
                        coords={"time": time, "lat": lat, "lon": lon})


def ocean_matrix(field: xr.DataArray, weights: np.ndarray | None = None) -> np.ndarray:
    flat = field.values.reshape(field.sizes["time"], -1)
    ocean = ~np.isnan(flat).all(axis=0)
    X = flat[:, ocean]
    return X * (weights.ravel()[ocean] if weights is not None else 1.0)


def coslat(field: xr.DataArray) -> np.ndarray:
    w = np.sqrt(np.clip(np.cos(np.deg2rad(field.lat.values)), 0, None))
    return np.broadcast_to(w[:, None], (field.sizes["lat"], field.sizes["lon"]))


# ------------------------------------------------------------------------- the SST field

def test_sst_eofs_match_xeofs(sst):
    xeofs = pytest.importorskip("xeofs.single")
    reference = xeofs.EOF(n_modes=4, use_coslat=True)
    reference.fit(sst, dim="time")
    ours = FieldModel(dkpca.PCA(n_components=4), "time", weights="coslat").fit(sst)
    ratios = ours.explained_variance_ratio()
    np.testing.assert_allclose(ratios, reference.explained_variance_ratio(), atol=1e-4)
    np.testing.assert_allclose(ratios, [0.4899, 0.1292, 0.0713, 0.0639], atol=1e-4)
    assert ratios["mode"].values.tolist() == [1, 2, 3, 4]
    components = ours.components()
    expected = reference.components().transpose("mode", "latitude", "longitude").values
    land = sst.isnull().all("time").values
    assert components.dims == ("mode", "latitude", "longitude")
    np.testing.assert_array_equal(np.isnan(components.values), np.broadcast_to(land, (4, *land.shape)))
    np.testing.assert_allclose(same_up_to_sign(components.values, expected), expected, atol=1e-6)
    np.testing.assert_array_equal(components.latitude, sst.latitude)


def test_sst_standardized_eofs_match_xeofs(sst):
    """xeofs standardises with the ddof=0 standard deviation: the same numbers, not n/(n-1)."""
    xeofs = pytest.importorskip("xeofs.single")
    reference = xeofs.EOF(n_modes=3, use_coslat=True, standardize=True, solver="full")
    reference.fit(sst, dim="time")
    ours = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat",
                      standardize=True).fit(sst)
    np.testing.assert_allclose(ours.explained_variance(), reference.explained_variance(),
                               rtol=1e-7)  # ddof=1 is 2 % off (n = 50)
    expected = reference.scores(normalized=False).transpose("time", "mode").values
    np.testing.assert_allclose(same_up_to_sign(ours.scores_.values, expected, axis=1),
                               expected, rtol=1e-6, atol=1e-8 * np.abs(expected).max())


def test_sst_full_rank_reconstruction(sst):
    model = FieldModel(dkpca.PCA(), "time", weights="coslat").fit(sst)
    rebuilt = model.inverse_transform(model.transform(sst)).transpose(*sst.dims)
    np.testing.assert_array_equal(np.isnan(rebuilt.values), np.isnan(sst.values))
    np.testing.assert_allclose(rebuilt.values, sst.values, atol=1e-10)
    np.testing.assert_array_equal(rebuilt.time, sst.time)


def test_sst_dask_fit_runs_two_computes(sst):
    class Counter(dask.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.count = 0

        def _start(self, dsk):
            self.count += 1

    lazy = sst.chunk({"time": 10})
    with Counter() as counter:
        model = FieldModel(dkpca.PCA(n_components=4), "time", weights="coslat").fit(lazy)
    assert counter.count <= 2
    eager = FieldModel(dkpca.PCA(n_components=4), "time", weights="coslat").fit(sst)
    np.testing.assert_allclose(model.explained_variance_ratio(),
                               eager.explained_variance_ratio(), rtol=1e-10)
    with raise_if_dask_computes():
        scores = model.transform(lazy)
    assert isinstance(scores.data, da.Array)
    np.testing.assert_allclose(scores.values, eager.transform(sst).values, atol=1e-10)


# ------------------------------------------------------------------- weights and scaling

def test_coslat_and_user_weights_equal_weighting_by_hand(field):
    w = coslat(field)
    by_hand = dkpca.PCA(n_components=3).fit(ocean_matrix(field, w))
    for weights in ("coslat", xr.DataArray(w[:, 0], dims="lat", coords={"lat": field.lat})):
        model = FieldModel(dkpca.PCA(n_components=3), "time", weights=weights).fit(field)
        np.testing.assert_allclose(model.explained_variance_ratio(),
                                   by_hand.explained_variance_ratio_, rtol=1e-10)
        np.testing.assert_allclose(
            model.scores_.values, by_hand.transform(ocean_matrix(field, w)), atol=1e-10)


def test_coslat_needs_a_latitude(field):
    with pytest.raises(ValueError, match="needs a latitude"):
        FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field.rename(lat="row"))


def test_standardize_and_weights_are_undone_on_the_grid(field):
    model = FieldModel(dkpca.PCA(), "time", weights="coslat", standardize=True).fit(field)
    X = ocean_matrix(field)
    # ddof=0, as xeofs and StandardScaler; eigenvalues of the covariance (n - 1) by numpy
    standardised = X / X.std(axis=0, ddof=0) * ocean_matrix(field.isel(time=[0]) * 0 + 1,
                                                            coslat(field))[0]
    eigenvalues = np.linalg.eigvalsh(np.cov(standardised, rowvar=False))[::-1]
    np.testing.assert_allclose(model.explained_variance(), eigenvalues, rtol=1e-10)
    np.testing.assert_allclose(model.explained_variance_ratio(),
                               eigenvalues / eigenvalues.sum(), rtol=1e-10)
    rebuilt = model.inverse_transform(model.scores_)
    np.testing.assert_allclose(rebuilt.transpose(*field.dims).values, field.values, atol=1e-10)
    unweighted = model.components(weighted=False)
    ratio = model.components() / unweighted
    np.testing.assert_allclose(ratio.isel(mode=0).values, model.layout_.variables[0].template)


# ---------------------------------------------------------------------------- NaN cases

def test_land_is_left_out_and_restored(field):
    model = FieldModel(dkpca.PCA(n_components=2), "time").fit(field)
    reference = dkpca.PCA(n_components=2).fit(ocean_matrix(field))
    assert model.model_.n_features_in_ == 18
    np.testing.assert_allclose(model.scores_.values, reference.transform(ocean_matrix(field)),
                               atol=1e-10)
    components = model.components()
    assert np.isnan(components[:, 0, 0]).all() and np.isnan(components[:, 3, 4]).all()
    assert np.isfinite(components.values).sum() == 2 * 18


def test_empty_samples_get_nan_scores(field):
    gappy = field.copy()
    gappy[[5, 17]] = np.nan
    model = FieldModel(dkpca.PCA(n_components=2), "time").fit(gappy)
    kept = np.setdiff1d(np.arange(60), [5, 17])
    reference = FieldModel(dkpca.PCA(n_components=2), "time").fit(field.isel(time=kept))
    assert model.scores_.sizes["time"] == 60
    assert np.isnan(model.scores_[[5, 17]]).all()
    np.testing.assert_allclose(model.scores_.isel(time=kept), reference.scores_, atol=1e-10)
    projected = model.transform(gappy)
    assert projected.sizes["time"] == 60 and np.isnan(projected[[5, 17]]).all()
    assert np.isfinite(projected.isel(time=kept)).all()


@pytest.mark.parametrize("grid", ["shifted coordinates", "other size", "no coordinates"])
def test_weights_on_another_grid_are_a_clear_error(grid, field):
    lat = field.lat.values
    weights = {
        "shifted coordinates": xr.DataArray(np.ones(4), dims="lat", coords={"lat": lat + 5.0}),
        "other size": xr.DataArray(np.ones(3), dims="lat", coords={"lat": lat[:3]}),
        "no coordinates": xr.DataArray(np.ones(3), dims="lat"),
    }[grid]
    with pytest.raises(ValueError, match=r"weights are on another grid than the field along "
                       r"'lat'.*the field's lat is \[-40.0, -10.0, 20.0, 50.0\].*"
                       r"weights.interp_like\(field\)") as err:
        FieldModel(dkpca.PCA(2), "time", weights=weights).fit(field)
    assert "weights' lat is " in str(err.value)
    assert not isinstance(err.value, xr.AlignmentError)


def test_weights_covering_more_than_the_field_are_selected_at_its_grid(field):
    wide = xr.DataArray(np.cos(np.deg2rad(np.linspace(-80.0, 80.0, 17))), dims="lat",
                        coords={"lat": np.linspace(-80.0, 80.0, 17)})
    exact = wide.sel(lat=[-40.0, -10.0, 20.0, 50.0])
    a = FieldModel(dkpca.PCA(2), "time", weights=wide.sel(lat=slice(-50, 60))).fit(field)
    b = FieldModel(dkpca.PCA(2), "time", weights=exact).fit(field)
    xr.testing.assert_allclose(a.scores_, b.scores_)


@pytest.fixture
def scattered(field) -> xr.DataArray:
    gappy = field.copy()
    gappy[7, 1, 2] = np.nan
    gappy[30, 2, 3] = np.nan
    return gappy


def test_scattered_nans_raise_by_default_naming_them(scattered):
    with pytest.raises(ValueError, match=r"scattered.*lat=-10\.0, lon=20\.0.*time=2000-08-01"):
        FieldModel(dkpca.PCA(2), "time").fit(scattered)


def test_scattered_nans_drop_samples(scattered, field):
    model = FieldModel(dkpca.PCA(2), "time", nan_policy="drop_samples").fit(scattered)
    kept = np.setdiff1d(np.arange(60), [7, 30])
    reference = FieldModel(dkpca.PCA(2), "time").fit(field.isel(time=kept))
    np.testing.assert_allclose(model.explained_variance_ratio(),
                               reference.explained_variance_ratio(), rtol=1e-10)
    assert np.isnan(model.scores_[[7, 30]]).all()
    assert np.isnan(model.transform(scattered)[[7, 30]]).all()


def test_scattered_nans_drop_features(scattered, field):
    model = FieldModel(dkpca.PCA(2), "time", nan_policy="drop_features").fit(scattered)
    blanked = field.copy()
    blanked[:, 1, 2] = blanked[:, 2, 3] = np.nan
    reference = FieldModel(dkpca.PCA(2), "time").fit(blanked)
    np.testing.assert_allclose(model.scores_, reference.scores_, atol=1e-10)
    assert np.isnan(model.components()[:, 1, 2]).all()
    assert model.transform(scattered).notnull().all()  # those points are not used


def test_new_field_with_nan_in_a_new_place(field):
    model = FieldModel(dkpca.PCA(2), "time").fit(field)
    new = field.isel(time=slice(0, 5)).copy()
    new[2, 1, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN where the model has data.*lat=-10\.0, lon=10\.0"):
        model.transform(new)
    wet = field.isel(time=slice(0, 5)).copy()
    wet[:, 0, 0] = 1.0
    with pytest.raises(ValueError, match=r"values where the model has no data.*lat=-40\.0"):
        model.transform(wet)
    with pytest.raises(ValueError, match="NaN where the model has data"):
        model.transform(new.chunk({"time": 2})).compute()


# ------------------------------------------------------------------------------- shapes

def test_several_sample_dims(field):
    members = xr.concat([field, field * 0.5 + 1.0, -field], dim="member")
    model = FieldModel(dkpca.PCA(n_components=3), ("time", "member")).fit(members)
    scores = model.scores_
    assert scores.dims == ("time", "member", "mode")
    stacked = members.transpose("time", "member", "lat", "lon").values.reshape(180, 20)
    ocean = ~np.isnan(stacked).all(axis=0)
    reference = dkpca.PCA(n_components=3).fit(stacked[:, ocean])
    np.testing.assert_allclose(scores.values.reshape(180, 3),
                               reference.transform(stacked[:, ocean]), atol=1e-10)
    np.testing.assert_array_equal(scores.time, field.time)
    lazy = model.transform(members.chunk({"time": 20}))
    np.testing.assert_allclose(lazy.values, scores.values, atol=1e-10)


def test_dataset_of_two_grids_round_trips(field):
    rng = np.random.default_rng(1)
    wind = xr.DataArray(rng.normal(size=(60, 3)), dims=("time", "station"),
                        coords={"time": field.time, "station": ["a", "b", "c"]})
    ds = xr.Dataset({"sst": field, "wind": wind})
    model = FieldModel(dkpca.PCA(), "time").fit(ds)
    components = model.components()
    assert components.sst.dims == ("mode", "lat", "lon") and components.wind.dims == ("mode", "station")
    assert np.isnan(components.sst[:, 0, 0]).all()
    rebuilt = model.inverse_transform(model.scores_)
    assert set(rebuilt.data_vars) == {"sst", "wind"}
    np.testing.assert_allclose(rebuilt.sst.transpose(*field.dims).values, field.values, atol=1e-10)
    np.testing.assert_allclose(rebuilt.wind.values, wind.values, atol=1e-10)
    listed = FieldModel(dkpca.PCA(), "time").fit([field, wind.rename("wind")])
    np.testing.assert_allclose(listed.scores_, model.scores_, atol=1e-10)
    via_accessor = ds.dkpca.fit("time", model=dkpca.PCA(2))
    np.testing.assert_allclose(via_accessor.scores_, model.scores_.isel(mode=[0, 1]), atol=1e-10)


# ------------------------------------------------------------------------------ outputs

def test_signs_and_modes(field):
    pca = FieldModel(dkpca.PCA(3), "time").fit(field)
    flat = pca.components().values.reshape(3, -1)
    biggest = np.nanargmax(np.abs(flat), axis=1)
    assert (flat[np.arange(3), biggest] > 0).all()
    kpca = FieldModel(dkpca.KernelPCA(3, kernel="rbf", gamma=0.02), "time").fit(field)
    scores = kpca.scores_.values
    assert (scores[np.abs(scores).argmax(axis=0), np.arange(3)] > 0).all()
    assert kpca.scores_["mode"].values.tolist() == [1, 2, 3]
    assert kpca.scores_.attrs["estimator"] == "KernelPCA" and "rbf" in kpca.scores_.attrs["kernel"]


def test_patterns(field):
    pca = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
    patterns = pca.patterns([-1.0, 2.0])
    assert patterns.dims == ("mode", "position", "lat", "lon")
    mean = pca.inverse_transform(xr.zeros_like(pca.scores_.isel(time=[0])))
    sigma = np.sqrt(pca.explained_variance().values)
    expected = mean.isel(time=0) + 2.0 * sigma[0] * pca.components(weighted=False).isel(mode=0)
    np.testing.assert_allclose(patterns.isel(mode=0, position=1), expected, atol=1e-10)
    kpca = FieldModel(dkpca.KernelPCA(2, kernel="rbf", gamma=0.02), "time").fit(field)
    curved = kpca.patterns()
    assert curved.sizes == {"mode": 2, "position": 4, "lat": 4, "lon": 5}
    assert np.isnan(curved[:, :, 0, 0]).all() and np.isfinite(curved[:, :, 1, 1]).all()
    with pytest.raises(ValueError, match="no linear components"):
        kpca.components()


def test_coslat_leaves_the_poles_out():
    """cos(90°) is 6e-17, not 0: the poles must still get weight 0 and come back as NaN."""
    rng = np.random.default_rng(0)
    field = xr.DataArray(rng.normal(size=(20, 5, 4)), dims=("time", "lat", "lon"),
                         coords={"lat": [-90.0, -45, 0, 45, 90], "lon": np.arange(4.0)})
    eof = FieldModel(dkpca.PCA(n_components=2), "time", weights="coslat").fit(field)
    kept = eof.layout_.kept.reshape(5, 4)
    assert not kept[[0, 4]].any() and kept[1:4].all()
    unweighted = eof.components(weighted=False)
    assert np.isnan(unweighted.sel(lat=[-90.0, 90.0])).all()
    assert np.isfinite(unweighted.sel(lat=[-45.0, 0.0, 45.0])).all()


def test_a_list_of_named_variables_is_matched_by_name():
    """Two same-shaped grids in another order were swapped silently; named ones are checked,
    unnamed ones are taken in the fit's order."""
    rng = np.random.default_rng(0)
    sst = xr.DataArray(rng.normal(size=(30, 4)), dims=("time", "x"), name="sst")
    t2m = xr.DataArray(10 * rng.normal(size=(30, 4)), dims=("time", "x"), name="t2m")
    model = FieldModel(dkpca.PCA(n_components=2), "time").fit([sst, t2m])
    with pytest.raises(ValueError, match="variable 't2m' where the model has 'sst'"):
        model.transform([t2m, sst])
    np.testing.assert_array_equal(model.transform([sst, t2m]).values,
                                  model.transform([sst.rename(None), t2m.rename(None)]).values)
    unnamed = FieldModel(dkpca.PCA(n_components=2), "time").fit([sst.rename(None), t2m])
    assert unnamed.transform([sst, t2m]).shape == (30, 2)


# ----------------------------------------------------------- dtypes, labels, names, weights

@pytest.mark.parametrize("options", [{"weights": "coslat"}, {"standardize": True}])
@pytest.mark.parametrize("dtype", [np.int32, np.int16])
def test_an_integer_field_is_the_float_field(options, dtype):
    """The scales (sqrt(cos lat) < 1, 1 / std) were cast to the field's integer dtype: 0."""
    rng = np.random.default_rng(0)
    counts = xr.DataArray(rng.integers(0, 50, size=(40, 3, 4)), dims=("time", "lat", "lon"),
                          coords={"lat": [-60.0, 0.0, 45.0], "lon": np.arange(4.0)})
    field = counts.astype(dtype)
    model = FieldModel(dkpca.PCA(n_components=3), "time", **options).fit(field)
    X = counts.values.reshape(40, -1).astype(np.float64)
    w = coslat(counts).ravel() if "weights" in options else 1.0 / X.std(axis=0)
    eigenvalues = np.linalg.eigvalsh(np.cov(X * w, rowvar=False))[::-1][:3]
    np.testing.assert_allclose(model.explained_variance(), eigenvalues, rtol=1e-5)
    assert model.scores_.dtype == model.transform(field).dtype
    np.testing.assert_allclose(model.scores_, model.transform(field), rtol=1e-4,
                               atol=1e-4 * float(np.abs(model.scores_).max()))


@pytest.mark.parametrize("estimator", [dkpca.PCA(2), dkpca.KernelPCA(2, kernel="rbf", gamma=0.1)],
                         ids=["pca", "kpca"])
def test_float32_in_float32_out(field, estimator):
    """scores_ and transform agree in dtype: float32 for a float32 field, as dkpca.PCA."""
    single = field.astype(np.float32)
    model = FieldModel(estimator, "time").fit(single)
    assert model.scores_.dtype == np.float32
    assert model.transform(single).dtype == np.float32
    assert model.transform(single.chunk({"time": 20})).dtype == np.float32
    np.testing.assert_allclose(model.transform(single), model.scores_, atol=1e-4)
    assert FieldModel(estimator, "time").fit(field).transform(field).dtype == np.float64


def test_inverse_transform_matches_modes_by_label(field):
    model = FieldModel(dkpca.PCA(n_components=3), "time", weights="coslat").fit(field)
    scores = model.scores_
    whole = model.inverse_transform(scores)
    xr.testing.assert_allclose(model.inverse_transform(scores.isel(mode=[2, 0, 1])), whole)
    # modes left out count as 0: the same as zeroing them by hand
    zeroed = scores.copy(data=scores.values * np.array([0.0, 1.0, 1.0]))
    xr.testing.assert_allclose(model.inverse_transform(scores.sel(mode=[3, 2])),
                               model.inverse_transform(zeroed))
    unlabelled = scores.drop_vars("mode")  # no labels: taken in order
    xr.testing.assert_allclose(model.inverse_transform(unlabelled), whole)
    with pytest.raises(ValueError, match=r"modes \[4\] that the model lacks"):
        model.inverse_transform(scores.assign_coords(mode=[2, 3, 4]))


def test_fit_leaves_the_estimator_given_as_it_was(field):
    """Two FieldModels sharing one estimator: fitting the second changed the first's model_."""
    shared = dkpca.PCA(n_components=2)
    other = field.isel(time=slice(0, 30)) * 3.0 + field.isel(time=slice(30, 60)).values
    a = FieldModel(shared, "time").fit(field)
    before = a.transform(field)
    b = FieldModel(shared, "time").fit(other)
    assert not hasattr(shared, "n_features_in_")
    assert a.model_ is not b.model_ and a.model is shared
    xr.testing.assert_identical(a.transform(field), before)
    xr.testing.assert_allclose(a.scores_, a.transform(field))


def test_dataset_variables_are_matched_by_name(field):
    """open_zarr may list the variables alphabetically: the model must take them by name."""
    rng = np.random.default_rng(1)
    ice = xr.DataArray(rng.normal(size=field.shape), dims=field.dims, coords=field.coords)
    ds = xr.Dataset({"sst": field, "ice": ice.where(field.notnull())})
    model = FieldModel(dkpca.PCA(n_components=3), "time").fit(ds)
    expected = model.transform(ds)
    xr.testing.assert_identical(model.transform(ds[["ice", "sst"]]), expected)
    lazy = model.transform(ds[["ice", "sst"]].chunk({"time": 16}))
    xr.testing.assert_allclose(lazy.compute(), expected)
    with pytest.raises(ValueError, match=r"the Dataset lacks \['ice'\].*ds\[\['sst', 'ice'\]\]"):
        model.transform(ds[["sst"]])
    with pytest.raises(ValueError, match=r"has others, \['wind'\]"):
        model.transform(ds.assign(wind=field))


def test_standardize_with_drop_samples_uses_the_samples_fitted(scattered, field):
    """The standard deviation over the samples the model is fitted on, not those left out."""
    scattered = scattered.copy()
    scattered[12, 2, 2] = 1e3  # an outlier in a sample left out must not shrink that point
    scattered[12, 1, 1] = np.nan
    model = FieldModel(dkpca.PCA(), "time", standardize=True,
                       nan_policy="drop_samples").fit(scattered)
    kept = np.setdiff1d(np.arange(60), [7, 12, 30])
    X = ocean_matrix(field.isel(time=kept))
    eigenvalues = np.linalg.eigvalsh(np.cov(X / X.std(axis=0), rowvar=False))[::-1]
    np.testing.assert_allclose(model.explained_variance(), eigenvalues, rtol=1e-10)
    lazy = FieldModel(dkpca.PCA(), "time", standardize=True,
                      nan_policy="drop_samples").fit(scattered.chunk({"time": 16}))
    np.testing.assert_allclose(lazy.explained_variance(), eigenvalues, rtol=1e-10)


def test_weights_dict_keys_must_name_variables(field):
    ds = xr.Dataset({"sst": field, "t2m": field * 2.0})
    with pytest.raises(ValueError, match=r"keys \['SST'\] that name no variable; the variables "
                                         r"are \['sst', 't2m'\]"):
        FieldModel(dkpca.PCA(2), "time", weights={"SST": "coslat"}).fit(ds)
    # a lone DataArray is matched by its name
    by_name = FieldModel(dkpca.PCA(2), "time", weights={"sst": "coslat"}).fit(field)
    direct = FieldModel(dkpca.PCA(2), "time", weights="coslat").fit(field)
    xr.testing.assert_allclose(by_name.scores_, direct.scores_)
    with pytest.raises(ValueError, match=r"keys \['t2m'\].*the variables are \['sst'\]"):
        FieldModel(dkpca.PCA(2), "time", weights={"t2m": "coslat"}).fit(field)
    with pytest.raises(ValueError, match=r"keys \['sst'\]\) but the DataArray has no name.*"
                                         r"field.rename\('sst'\)"):
        FieldModel(dkpca.PCA(2), "time", weights={"sst": "coslat"}).fit(field.rename(None))


# ------------------------------------------------------- refused fits, alignment, messages

def test_a_refused_refit_leaves_the_model_as_it_was(field):
    """A refit refused by the estimator (too many modes) left the new layout beside the old
    estimator: transform then scaled by the new standard deviations."""
    model = FieldModel(dkpca.PCA(6), "time", standardize=True).fit(field)
    layout, estimator, scores = model.layout_, model.model_, model.scores_
    with pytest.raises(ValueError, match="n_components"):
        model.fit(field.isel(time=slice(0, 5)))
    assert model.layout_ is layout and model.model_ is estimator and model.scores_ is scores
    fresh = FieldModel(dkpca.PCA(6), "time", standardize=True).fit(field)
    xr.testing.assert_identical(model.transform(field), fresh.transform(field))


def test_a_list_is_joined_by_sample_coordinates():
    """A list's variables were joined by position: slp a month ahead of sst was accepted."""
    rng = np.random.default_rng(0)
    sst = xr.DataArray(rng.normal(size=(30, 3)), dims=("time", "x"), name="sst",
                       coords={"time": np.arange(30)})
    slp = xr.DataArray(rng.normal(size=(30, 2)), dims=("time", "y"), name="slp",
                       coords={"time": np.arange(1, 31)})
    with pytest.raises(ValueError, match=r"'slp' has other samples than the first variable, "
                                         r"'sst': along 'time', 'sst' has \[0, 1, 2, 3, 4\] "
                                         r"and 'slp' \[1, 2, 3, 4, 5\]"):
        FieldModel(dkpca.PCA(2), "time").fit([sst, slp])
    with pytest.raises(ValueError, match=r"'time'.*only in 'sst': \[0, 1\]; only in 'slp': "
                                         r"\[30\]"):
        FieldModel(dkpca.PCA(2), "time").fit([sst, slp.isel(time=slice(1, None))])
    aligned = slp.assign_coords(time=sst.time)
    model = FieldModel(dkpca.PCA(2), "time").fit([sst, aligned])
    with pytest.raises(ValueError, match=r"'slp' has other samples.*along 'time'"):
        model.transform([sst, slp])
    with pytest.raises(ValueError, match=r"'sst' has 30 samples, 'slp' 29"):
        model.transform([sst.drop_vars("time"), aligned.isel(time=slice(1, None))])
    xr.testing.assert_identical(model.transform([sst, aligned]), model.scores_)


def test_lazy_transform_errors_name_the_coordinates(field):
    """Chunked data said "1 samples of this block" where numpy data name the coordinates."""
    model = FieldModel(dkpca.PCA(2), "time").fit(field)
    new = field.copy()
    new[37, 1, 1] = np.nan  # in the fourth block of 10: named at its place in the whole
    with pytest.raises(ValueError, match="NaN where the model has data") as eager:
        model.transform(new)
    with pytest.raises(ValueError, match="NaN where the model has data") as lazy:
        model.transform(new.chunk({"time": 10})).compute()
    assert str(lazy.value) == str(eager.value)
    assert f"time={field.time.values[37]}" in str(lazy.value)
    assert "grid points (lat=-10.0, lon=10.0)" in str(lazy.value)


def test_scattered_nans_in_a_dataset_name_the_variable(field):
    ds = xr.Dataset({"sst": field, "t2m": field.copy()})
    ds["t2m"][5, 1, 2] = np.nan
    with pytest.raises(ValueError, match=r"scattered among valid data: at t2m points "
                                         r"\(lat=-10\.0, lon=20\.0\), at samples"):
        FieldModel(dkpca.PCA(2), "time").fit(ds)


@pytest.mark.parametrize("options", [{}, {"weights": "coslat", "standardize": True}])
def test_float32_outputs_on_the_grid_stay_float32(field, options):
    """inverse_transform, patterns and components(weighted=False) were float64 (the scales)."""
    model = FieldModel(dkpca.PCA(2), "time", **options).fit(field.astype(np.float32))
    reference = FieldModel(dkpca.PCA(2), "time", **options).fit(field)
    outputs = {
        "inverse": lambda m: m.inverse_transform(m.scores_),
        "lazy inverse": lambda m: m.inverse_transform(m.scores_.chunk({"time": 20})),
        "patterns": lambda m: m.patterns(),
        "components": lambda m: m.components(weighted=False),
    }
    for name, output in outputs.items():
        single, double = output(model), output(reference)
        assert single.dtype == np.float32, name
        scale = float(np.abs(double).max())
        np.testing.assert_allclose(single, double, atol=1e-4 * scale, err_msg=name)


def test_inverse_transform_keeps_the_sample_coordinates(field):
    """transform keeps a month on time; inverse_transform dropped it."""
    months = field.assign_coords(month=("time", field.time.dt.month.values))
    model = FieldModel(dkpca.PCA(2), "time").fit(months)
    scores = model.transform(months)
    rebuilt = model.inverse_transform(scores)
    xr.testing.assert_identical(rebuilt.month, months.month)
    lazy = model.inverse_transform(scores.chunk({"time": 20}))
    xr.testing.assert_identical(lazy.month, months.month)
