"""A fitted FieldModel saved with dkpca.save and loaded with dkpca.load transforms identically."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dkpca
from dkpca.xarray import FieldModel


def ocean(seed: int = 0, members: bool = False) -> xr.DataArray:
    rng = np.random.default_rng(seed)
    time = pd.date_range("1990-01-01", periods=36, freq="MS")
    values = rng.normal(size=(36, 4, 5))
    values[:, 0, :2] = np.nan  # land
    field = xr.DataArray(values, dims=("time", "lat", "lon"), name="sst",
                         coords={"time": time, "lat": [-30.0, 0.0, 30.0, 60.0],
                                 "lon": np.arange(5) * 10.0, "region": ("lon", list("abcde"))})
    if members:
        field = xr.concat([field, field * 0.3], dim=pd.Index(["m1", "m2"], name="member"))
    return field


MODELS = {
    "pca": lambda: dkpca.PCA(n_components=3),
    "kpca": lambda: dkpca.KernelPCA(3, kernel="rbf", gamma=0.05),
}


def assert_same(a, b):
    xr.testing.assert_identical(a, b) if isinstance(a, xr.Dataset) else xr.testing.assert_equal(a, b)


@pytest.mark.parametrize("estimator", sorted(MODELS))
def test_round_trip(estimator, tmp_path):
    field = ocean()
    model = FieldModel(MODELS[estimator](), "time", weights="coslat").fit(field)
    dkpca.save(model, tmp_path / "field.zarr")
    again = dkpca.load(tmp_path / "field.zarr")
    assert isinstance(again, FieldModel) and type(again.model_) is type(model.model_)
    new = ocean(seed=1)
    xr.testing.assert_identical(again.transform(new), model.transform(new))
    xr.testing.assert_identical(again.scores_, model.scores_)
    xr.testing.assert_identical(again.explained_variance_ratio(), model.explained_variance_ratio())
    xr.testing.assert_identical(again.inverse_transform(model.scores_),
                                model.inverse_transform(model.scores_))
    xr.testing.assert_identical(again.patterns(), model.patterns())
    if estimator == "pca":
        xr.testing.assert_identical(again.components(), model.components())
    lazy = again.transform(new.chunk({"time": 12}))
    assert isinstance(lazy.data, da.Array)
    np.testing.assert_allclose(lazy.values, model.transform(new).values, atol=1e-12)
    with pytest.raises(ValueError, match="values where the model has no data"):
        again.transform(new.fillna(0.0))


def test_dataset_members_and_user_weights(tmp_path):
    field = ocean(members=True)
    wind = xr.DataArray(np.random.default_rng(2).normal(size=(36, 2, 3)),
                        dims=("time", "member", "station"),
                        coords={"time": field.time, "member": field.member})
    ds = xr.Dataset({"sst": field, "wind": wind})
    weights = {"sst": "coslat", "wind": xr.DataArray([1.0, 0.5, 2.0], dims="station")}
    model = FieldModel(dkpca.PCA(4), ("time", "member"), weights=weights,
                       standardize=True).fit(ds)
    dkpca.save(model, tmp_path / "ds.zarr")
    again = dkpca.load(tmp_path / "ds.zarr")
    assert again.layout_.sample_dims == ("time", "member")
    xr.testing.assert_identical(again.transform(ds), model.transform(ds))
    assert_same(again.components(), model.components())
    xr.testing.assert_identical(again.weights["wind"], weights["wind"])
    refitted = again.fit(ds)  # the saved weights, not silently others
    np.testing.assert_allclose(refitted.explained_variance_ratio(),
                               model.explained_variance_ratio(), rtol=1e-12)


def test_refused_save_leaves_nothing(tmp_path):
    field = ocean()
    with pytest.raises(Exception, match="not fitted"):
        dkpca.save(FieldModel(dkpca.PCA(2), "time"), tmp_path / "unfitted.zarr")
    callable_kernel = FieldModel(
        dkpca.KernelPCA(2, kernel=lambda X, Y: X @ Y.T), "time").fit(field.fillna(0.0))
    with pytest.raises(ValueError, match="callable"):
        dkpca.save(callable_kernel, tmp_path / "callable.zarr")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage", ["scores chunk", "estimator chunk", "estimator parameter",
                                    "field description"])
def test_a_damaged_field_model_is_one_clear_error_at_load(damage, tmp_path):
    import json
    import shutil

    path = tmp_path / "field.zarr"
    dkpca.save(FieldModel(dkpca.PCA(3), "time", weights="coslat").fit(ocean()), path)
    if damage == "scores chunk":
        next(p for p in sorted((path / "scores/values/c").rglob("*")) if p.is_file()).unlink()
        part = "scores/values"
    elif damage == "estimator chunk":
        shutil.rmtree(path / "estimator/components_")
        part = "estimator/components_"
    else:
        where = path / ("estimator" if damage == "estimator parameter" else "") / "zarr.json"
        meta = json.loads(where.read_text())
        if damage == "estimator parameter":
            meta["attributes"]["dkpca"]["params"]["n_components"] = {"value": "three"}
            part = "n_components='three'"
        else:
            meta["attributes"]["dkpca"]["field"]["nan_policy"] = "ignore"
            part = "field description"
        where.write_text(json.dumps(meta))
    with pytest.raises(dkpca.DamagedModelError) as err:
        dkpca.load(path)
    message = str(err.value)
    assert str(path) in message and part in message and "refit or restore it" in message.lower()


def test_repr_and_info_of_a_saved_field_model(tmp_path, capsys):
    from dkpca.cli import main

    model = FieldModel(dkpca.KernelPCA(3, kernel="rbf", gamma=0.05), "time", weights="coslat")
    assert repr(model) == ("FieldModel(KernelPCA(gamma=0.05, n_components=3), "
                           "sample_dims='time', weights='coslat')")
    dkpca.save(model.fit(ocean()), tmp_path / "field.zarr")
    assert main(["info", str(tmp_path / "field.zarr")]) == 0
    out = capsys.readouterr().out
    assert ("estimator:  FieldModel(KernelPCA(gamma=0.05, n_components=3), sample_dims='time', "
            "weights='coslat')") in out
    assert "trained on: 36 samples x 18 features" in out  # 20 grid points, 2 of them land
    assert "FieldModel with 3 components" in out


@pytest.mark.parametrize("tz", ["UTC", "Europe/Paris"])
def test_tz_aware_sample_coordinates_round_trip(tz, tmp_path):
    """tz-aware times came back as strings, and the next partial_fit raised a TypeError."""
    field = ocean()
    field = field.assign_coords(time=field.indexes["time"].tz_localize(tz))
    model = FieldModel(dkpca.PCA(n_components=3), "time").partial_fit(field.isel(time=slice(24)))
    dkpca.save(model, tmp_path / "field.zarr")
    again = dkpca.load(tmp_path / "field.zarr")
    assert again.scores_.indexes["time"].equals(model.scores_.indexes["time"])
    assert again.scores_.time.dtype == field.time.dtype
    later = field.isel(time=slice(24, None))
    xr.testing.assert_identical(again.partial_fit(later).scores_,
                                model.partial_fit(later).scores_)
