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
