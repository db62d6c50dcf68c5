"""dkpca.xarray: DataArrays in, DataArrays out, coordinates kept, lazy when the input is."""

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from conftest import match_signs, raise_if_dask_computes

import dkpca
from dkpca.xarray import fit, fit_transform, transform


@pytest.fixture(scope="module")
def field() -> xr.DataArray:
    rng = np.random.default_rng(5)
    time = pd.date_range("2001-01-01", periods=80, freq="D")
    lat, lon = np.array([-10.0, 0.0, 10.0]), np.array([100.0, 110.0, 120.0, 130.0])
    values = rng.normal(size=(80, 3, 4))
    return xr.DataArray(
        values, dims=("time", "lat", "lon"), name="t2m",
        coords={"time": time, "lat": lat, "lon": lon,
                "season": ("time", (time.month % 12) // 3),
                "land": (("lat", "lon"), rng.random((3, 4)) > 0.5)},
        attrs={"units": "K"},
    )


def test_kernel_pca_scores_keep_the_sample_coordinates(field):
    ds = field.dkpca.fit_transform(sample_dim="time", n_components=3, kernel="rbf", gamma=0.1)
    reference = dkpca.KernelPCA(3, kernel="rbf", gamma=0.1).fit(field.values.reshape(80, 12))
    scores = ds.scores
    assert scores.dims == ("time", "mode")
    assert scores.indexes["time"].equals(field.indexes["time"])
    np.testing.assert_array_equal(scores.season, field.season)
    assert list(ds["mode"].values) == [1, 2, 3] and "lat" not in scores.coords
    np.testing.assert_allclose(ds.eigenvalues, reference.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(scores, reference.transform(field.values.reshape(80, 12)),
                               atol=1e-10)
    assert ds.eigenvalues.dims == ("mode",)
    assert ds.attrs["estimator"] == "KernelPCA" and "rbf" in ds.attrs["kernel"]


def test_linear_pca_components_come_back_on_the_grid(field):
    ds = fit_transform(field, "time", model=dkpca.PCA(n_components=2))
    assert ds.components.dims == ("mode", "lat", "lon")
    np.testing.assert_array_equal(ds.components.lon, field.lon)
    np.testing.assert_array_equal(ds.components.land, field.land)
    flat = field.values.reshape(80, 12)
    reference = dkpca.PCA(n_components=2).fit(flat)
    np.testing.assert_allclose(ds.components.values.reshape(2, 12), reference.components_,
                               atol=1e-12)
    np.testing.assert_allclose(ds.feature_mean.values, flat.mean(axis=0).reshape(3, 4),
                               atol=1e-12)
    # With every component, scores times components plus the mean rebuild the field: the
    # grid layout of the components is the input's.
    full = fit_transform(field, "time", model=dkpca.PCA())
    rebuilt = full.scores.dot(full.components, dim="mode") + full.feature_mean
    np.testing.assert_allclose(rebuilt.transpose(*field.dims).values, field.values, atol=1e-10)


def test_sample_dim_need_not_come_first(field):
    moved = field.transpose("lat", "time", "lon")
    a = fit_transform(moved, "time", n_components=2, gamma=0.1)
    b = fit_transform(field, "time", n_components=2, gamma=0.1)
    xr.testing.assert_allclose(a.scores, b.scores)
    with pytest.raises(ValueError, match="'depth' is not a dimension"):
        fit_transform(field, "depth")


def test_lazy_in_lazy_out(field):
    chunked = field.chunk({"time": 20})
    ds = fit_transform(chunked, "time", n_components=2, gamma=0.1)
    assert isinstance(ds.scores.data, da.Array)
    model = fit(chunked, "time", n_components=2, gamma=0.1)
    with raise_if_dask_computes():
        projected = chunked.dkpca.transform(model)
    assert isinstance(projected.data, da.Array) and projected.chunks[0] == (20,) * 4
    eager = transform(model, field)
    assert isinstance(eager.data, np.ndarray)
    np.testing.assert_allclose(match_signs(projected.values, eager.values), eager.values,
                               atol=1e-10)


def test_transform_new_data_and_errors(field):
    model = field.isel(time=slice(0, 60)).dkpca.fit("time", n_components=2, gamma=0.1)
    held_out = transform(model, field.isel(time=slice(60, None)))
    assert held_out.sizes == {"time": 20, "mode": 2}
    assert held_out.indexes["time"].equals(field.indexes["time"][60:])
    with pytest.raises(ValueError, match="feature dimensions"):
        transform(model, field.isel(lon=0))
    with pytest.raises(ValueError, match=r"grid of shape \(3, 2\)"):
        transform(model, field.isel(lon=slice(0, 2)))
    with pytest.raises(ValueError, match="to the model itself"):
        fit_transform(field, "time", model=dkpca.PCA(2), n_components=3)
    with pytest.raises(TypeError, match="expected an xarray.DataArray, a Dataset"):
        fit(field.values, "time")


def test_results_write_to_zarr(field, tmp_path):
    ds = fit_transform(field, "time", n_components=2, gamma=0.1)
    ds.to_zarr(tmp_path / "out.zarr", consolidated=False)
    back = xr.open_zarr(tmp_path / "out.zarr", consolidated=False)
    xr.testing.assert_allclose(back.scores.load(), ds.scores)
    assert back.attrs["estimator"] == "KernelPCA"


def test_eigenvalues_mean_the_same_for_pca_and_a_linear_kernel(field):
    linear = fit_transform(field, "time", model=dkpca.PCA(n_components=3))
    kernel = fit_transform(field, "time", model=dkpca.KernelPCA(3, kernel="linear"))
    np.testing.assert_allclose(linear.eigenvalues, kernel.eigenvalues, rtol=1e-8)
    np.testing.assert_allclose(linear.explained_variance * 79, linear.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(kernel.explained_variance * 80, kernel.eigenvalues, rtol=1e-12)
