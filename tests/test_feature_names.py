"""dkpca._feature_names: a DataArray's feature dimensions, recorded at fit, checked after."""

import warnings

import numpy as np
import pytest
import xarray as xr
from sklearn.base import clone

import dkpca
from dkpca import PCA, KernelPCA

ESTIMATORS = [pytest.param(lambda: PCA(2), id="PCA"),
              pytest.param(lambda: KernelPCA(2, solver="exact"), id="KernelPCA")]


@pytest.fixture(scope="module")
def field() -> xr.DataArray:
    values = np.random.default_rng(11).normal(size=(30, 3, 4))
    return xr.DataArray(values, dims=("time", "lat", "lon"))


@pytest.mark.parametrize("make", ESTIMATORS)
def test_transposed_feature_dimensions_are_refused_with_the_fix(make, field):
    model = make().fit(field)
    assert model.feature_dims_in_ == (("lat", 3), ("lon", 4))
    reference = model.transform(field.values.reshape(30, 12))  # the stacking fit used
    np.testing.assert_allclose(model.transform(field), reference, rtol=1e-12, atol=1e-12)
    swapped = field.transpose("time", "lon", "lat")
    with pytest.raises(ValueError, match=r"\(lon: 4, lat: 3\).*\(lat: 3, lon: 4\).*"
                       r"X\.transpose\('time', 'lat', 'lon'\)"):
        model.transform(swapped)
    np.testing.assert_allclose(model.transform(swapped.transpose("time", "lat", "lon")),
                               reference, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize("other", [
    pytest.param(lambda f: f.rename(lon="x"), id="other names"),
    pytest.param(lambda f: xr.DataArray(f.values.reshape(30, 4, 3), dims=f.dims),
                 id="other sizes"),
    pytest.param(lambda f: xr.DataArray(f.values.reshape(30, 12), dims=("time", "cell")),
                 id="stacked"),
])
def test_another_grid_is_refused(make, other, field):
    model = make().fit(field)
    with pytest.raises(ValueError, match="regrid it to the fitted grid, or refit"):
        model.transform(other(field))


@pytest.mark.parametrize("make", ESTIMATORS)
def test_other_input_kinds_pass_silently(make, field):
    """numpy after a DataArray fit, a DataArray after a numpy fit: as before, no warning."""
    matrix = field.values.reshape(30, 12)
    model = make().fit(field)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(model.transform(matrix), model.transform(field),
                                   rtol=1e-12, atol=1e-12)
        model.fit(matrix)
        assert not hasattr(model, "feature_dims_in_")  # a refit forgets the dimensions
        model.transform(field.transpose("time", "lon", "lat"))


def test_later_batches_and_scores_are_checked(field):
    model = PCA(2).partial_fit(field.isel(time=slice(0, 15)))
    swapped = field.isel(time=slice(15, None)).transpose("time", "lon", "lat")
    with pytest.raises(ValueError, match="transpose it first"):
        model.partial_fit(swapped)
    assert model.n_samples_seen_ == 15  # the refused batch changed nothing
    with pytest.raises(ValueError, match="transpose it first"):
        model.score_samples(swapped)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_save_load_and_clone_keep_the_contract(make, field, tmp_path):
    model = make().fit(field)
    dkpca.save(model, tmp_path / "model.zarr")
    loaded = dkpca.load(tmp_path / "model.zarr")
    assert loaded.feature_dims_in_ == model.feature_dims_in_
    with pytest.raises(ValueError, match="transpose it first"):
        loaded.transform(field.transpose("time", "lon", "lat"))
    copy = clone(model)
    assert copy.get_params() == make().get_params()
    assert not hasattr(copy, "feature_dims_in_")
