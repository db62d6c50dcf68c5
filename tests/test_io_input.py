"""dkpca.io input: every input kind gives one dask array and the same model."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse
import xarray as xr
import zarr

import dkpca
from dkpca import PCA, KernelPCA
from dkpca.io import as_array, as_dask, is_lazy, open_zarr


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return np.random.default_rng(7).normal(size=(120, 6))


def _fit(X, **kwargs):
    return KernelPCA(n_components=3, kernel="rbf", gamma=0.2, solver="exact").fit(X, **kwargs)


def _write(store, X, **kwargs):
    return zarr.create_array(store, data=X, overwrite=True, **kwargs)


def test_every_input_kind_gives_the_same_model(data, tmp_path):
    field = data.reshape(120, 2, 3)
    group = zarr.open_group(tmp_path / "group.zarr", mode="w")
    group.create_array("inner/X", data=data, chunks=(50, 6))
    _write(tmp_path / "x.zarr", data, chunks=(32, 4))  # features chunked on disk too
    _write("memory://io-test/x.zarr", data, chunks=(40, 6))
    inputs = {
        "list": data.tolist(),
        "dask": da.from_array(data, chunks=(25, 6)),
        "DataArray": xr.DataArray(data, dims=("sample", "feature")),
        "DataArray 3-D": xr.DataArray(field, dims=("time", "lat", "lon")),
        "DataArray dask": xr.DataArray(field, dims=("time", "lat", "lon")).chunk({"time": 30}),
        "Zarr path": str(tmp_path / "x.zarr"),
        "Zarr pathlib": tmp_path / "x.zarr",
        "file URL": f"file://{tmp_path / 'x.zarr'}",
        "memory URL": "memory://io-test/x.zarr",
        "zarr.Array": zarr.open_array(tmp_path / "x.zarr", mode="r"),
    }
    reference = _fit(data)
    expected = reference.transform(data)
    for kind, X in inputs.items():
        model = _fit(X)
        np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-12,
                                   err_msg=kind)
        np.testing.assert_allclose(np.asarray(model.transform(X)), expected, atol=1e-10,
                                   err_msg=kind)
    grouped = KernelPCA(n_components=3, gamma=0.2).fit(
        as_dask(tmp_path / "group.zarr", component="inner/X")
    )
    np.testing.assert_allclose(grouped.eigenvalues_, reference.eigenvalues_, rtol=1e-12)


def test_zarr_chunks_become_row_chunks(tmp_path):
    X = np.arange(200.0).reshape(50, 4)
    _write(tmp_path / "a.zarr", X, chunks=(8, 2))
    Xd = as_dask(tmp_path / "a.zarr")
    assert Xd.chunks == ((8,) * 6 + (2,), (4,))
    np.testing.assert_array_equal(Xd.compute(), X)
    _write(tmp_path / "s.zarr", X, chunks=(5, 4), shards=(20, 4))
    assert as_dask(tmp_path / "s.zarr").chunks[0] == (20, 20, 10)  # a task reads a shard


def test_zarr_dimension_names_pick_the_sample_axis(tmp_path):
    cube = np.random.default_rng(0).normal(size=(3, 10, 4))  # (lat, time, lon)
    _write(tmp_path / "c.zarr", cube, chunks=(3, 5, 4), dimension_names=("lat", "time", "lon"))
    Xd = as_dask(tmp_path / "c.zarr", sample_dim="time")
    expected = np.moveaxis(cube, 1, 0).reshape(10, 12)
    np.testing.assert_array_equal(Xd.compute(), expected)
    assert Xd.chunks == ((5, 5), (12,))
    np.testing.assert_array_equal(as_dask(tmp_path / "c.zarr").compute(), cube.reshape(3, 40))
    with pytest.raises(ValueError, match="'depth' is not a dimension"):
        as_dask(tmp_path / "c.zarr", sample_dim="depth")


def test_xarray_written_store_is_read_by_variable(tmp_path):
    field = xr.DataArray(np.random.default_rng(1).normal(size=(12, 2, 3)),
                         dims=("time", "lat", "lon"), coords={"time": np.arange(12)})
    field.to_dataset(name="t2m").to_zarr(tmp_path / "ds.zarr", consolidated=False)
    Xd = as_dask(tmp_path / "ds.zarr", component="t2m", sample_dim="time")
    np.testing.assert_array_equal(Xd.compute(), field.values.reshape(12, 6))
    v2 = tmp_path / "v2.zarr"
    field.transpose("lat", "time", "lon").to_dataset(name="t2m").to_zarr(
        v2, consolidated=False, zarr_format=2
    )
    np.testing.assert_array_equal(
        as_dask(v2, component="t2m", sample_dim="time").compute(), field.values.reshape(12, 6)
    )


def test_dataarray_sample_dim_anywhere():
    cube = np.random.default_rng(2).normal(size=(3, 7, 2))
    field = xr.DataArray(cube, dims=("lat", "time", "lon"))
    np.testing.assert_array_equal(as_array(field, sample_dim="time"),
                                  np.moveaxis(cube, 1, 0).reshape(7, 6))
    series = xr.DataArray(np.arange(5.0), dims="time")
    assert as_array(series).shape == (5, 1)
    with pytest.raises(ValueError, match="sample_dim applies to xarray and Zarr"):
        as_dask(np.ones((3, 2)), sample_dim="time")


def test_in_memory_input_is_not_copied():
    X = np.ones((5, 2))
    assert as_array(X) is X
    assert as_array(xr.DataArray(X, dims=("a", "b"))) is X
    assert not is_lazy(X) and is_lazy(da.ones((2, 2))) and is_lazy("x.zarr")


def test_zarr_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Zarr array or group at"):
        as_dask(tmp_path / "missing.zarr")
    with pytest.raises(FileNotFoundError, match="no Zarr array or group at memory://"):
        open_zarr("memory://io-test/nothing-here.zarr")
    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    group.create_array("a", data=np.ones((3, 2)))
    group.create_array("b", data=np.ones((3, 2)))
    group.create_group("sub")
    with pytest.raises(ValueError, match="name the array to read with component=.*a, b"):
        as_dask(tmp_path / "g.zarr")
    with pytest.raises(FileNotFoundError, match="no array 'c' in the Zarr group"):
        as_dask(tmp_path / "g.zarr", component="c")
    with pytest.raises(ValueError, match="is a group, not an array"):
        as_dask(tmp_path / "g.zarr", component="sub")
    with pytest.raises(ValueError, match="is an array, not a group"):
        as_dask(tmp_path / "g.zarr" / "a", component="x")
    with pytest.raises(ValueError, match="storage_options apply to URLs only"):
        as_dask(tmp_path / "g.zarr", component="a", storage_options={"anon": True})
    with pytest.raises(ValueError, match="apply to Zarr input only"):
        as_dask(np.ones((3, 2)), component="a")
    _write(tmp_path / "one.zarr", np.arange(4.0))
    with pytest.raises(ValueError, match="must be 2-D"):
        as_dask(tmp_path / "one.zarr")
    _write(tmp_path / "nan.zarr", np.array([[1.0, np.nan], [0.0, 1.0], [2.0, 2.0]]))
    with pytest.raises(ValueError, match="NaN or infinity"):
        KernelPCA(n_components=1).fit(tmp_path / "nan.zarr")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("kind", ["dask", "zarr", "dask of sparse"])
def test_lazy_input_is_checked_as_numpy_input_is_with_the_row(tmp_path, bad, kind):
    """NaN or infinity in lazy input raise at compute, naming the first bad row."""
    X = np.random.default_rng(0).normal(size=(200, 4))
    model = KernelPCA(2).fit(X)
    Y = X.copy()
    Y[137, 2] = bad
    if kind == "zarr":
        _write(tmp_path / "y.zarr", Y, chunks=(50, 4))
        lazy = str(tmp_path / "y.zarr")
    elif kind == "dask":
        lazy = da.from_array(Y, chunks=(50, 4))
    else:
        lazy = da.from_array(scipy.sparse.csr_matrix(Y), chunks=(50, 4), asarray=False)
    with pytest.raises(ValueError, match="NaN or infinity"):
        model.transform(Y)  # numpy input: at once
    scores = model.transform(lazy)  # lazy: nothing computed yet
    with pytest.raises(ValueError, match=r"contains NaN or infinity at row 137 \(the first in rows 100 to 149;"):
        np.asarray(scores)
    np.testing.assert_allclose(model.transform(da.from_array(X, chunks=(50, 4))).compute(),
                               model.transform(X))


def test_a_command_on_lazy_input_with_nan_fails_with_one_line(tmp_path, capfd):
    import dkpca
    from dkpca.cli import main

    X = np.random.default_rng(0).normal(size=(100, 3))
    dkpca.save(KernelPCA(2).fit(X), tmp_path / "m.zarr")
    X[42, 0] = np.nan
    _write(tmp_path / "y.zarr", X, chunks=(25, 3))
    status = main(["transform", str(tmp_path / "m.zarr"), str(tmp_path / "y.zarr"), "--out",
                   str(tmp_path / "s.zarr"), "--quiet", "--workers", "1",
                   "--threads-per-worker", "1"])
    err = capfd.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "at row 42 (the first in rows 25 to 49;" in err[0], err
    assert not (tmp_path / "s.zarr").exists()


def test_unknown_row_chunks_are_refused_with_the_fix(data):
    from dkpca.io import require_known_rows

    X = da.from_array(data, chunks=(30, -1))
    assert require_known_rows(X) is X
    masked = X[X[:, 0] > 0]
    with pytest.raises(ValueError, match=r"KernelPCA.fit: X has unknown chunk sizes .*"
                       r"X = X.compute_chunk_sizes\(\)"):
        require_known_rows(masked, owner="KernelPCA.fit")
    assert require_known_rows(masked.compute_chunk_sizes()).shape == (int((data[:, 0] > 0).sum()), 6)


@pytest.mark.parametrize("fit", [
    pytest.param(lambda X: KernelPCA(2, solver="exact").fit(X), id="exact fit"),
    pytest.param(lambda X: KernelPCA(2, solver="randomized").fit(X), id="randomized fit"),
    pytest.param(lambda X: KernelPCA(2, solver="nystrom").fit(X), id="nystrom fit"),
    pytest.param(lambda X: KernelPCA(2, solver="nystrom").partial_fit(X), id="partial_fit"),
    # compute_chunk_sizes works in place: the first batch is a copy, so X stays unknown
    pytest.param(lambda X: KernelPCA(2, solver="nystrom").partial_fit(
        X.copy().compute_chunk_sizes()).partial_fit(X), id="partial_fit, a later batch"),
    pytest.param(lambda X: PCA(2).fit(X), id="PCA fit"),
    pytest.param(lambda X: PCA(2).partial_fit(X), id="PCA partial_fit"),
    pytest.param(lambda X: dkpca.select_model(X, n_train=50, n_draws=2), id="select_model"),
])
def test_fits_refuse_unknown_row_chunks_with_the_fix(fit, data):
    X = da.from_array(data, chunks=(30, -1))
    with pytest.raises(ValueError, match=r"compute_chunk_sizes\(\)"):
        fit(X[X[:, 0] > -0.5])


def test_transforms_take_unknown_row_chunks(data):
    """A transform projects each block whatever its length: no pass to find the lengths."""
    model = _fit(data)
    X = da.from_array(data, chunks=(30, -1))
    keep = data[:, 0] > 0
    np.testing.assert_allclose(model.transform(X[X[:, 0] > 0]).compute(),
                               model.transform(data[keep]), rtol=1e-12, atol=1e-12)


_CF_ENCODINGS = {
    "int16 scaled, _FillValue": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0,
                                 "_FillValue": -9999},
    "int16 scaled, missing_value": {"dtype": "int16", "scale_factor": 0.01,
                                    "add_offset": 280.0, "missing_value": -1},
    "int16, _FillValue": {"dtype": "int16", "_FillValue": -9999},
    "float32, _FillValue": {"dtype": "float32", "_FillValue": -9999.0},
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # xarray casting NaN to int16 at write
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("encoding", list(_CF_ENCODINGS))
def test_cf_encoded_zarr_is_decoded_as_xarray_decodes_it(tmp_path, zarr_format, encoding):
    """Packed integers, fill values and missing values read as xarray reads them, lazily."""
    field = xr.DataArray(np.random.default_rng(3).normal(size=(12, 2, 3)) * 10 + 280,
                         dims=("time", "lat", "lon"))
    field[:, 0, 0] = np.nan  # land: written as the fill (or missing) value
    field[0, 1, 2] = np.nan
    store = tmp_path / "cf.zarr"
    field.to_dataset(name="t2m").to_zarr(
        store, consolidated=False, zarr_format=zarr_format,
        encoding={"t2m": {**_CF_ENCODINGS[encoding], "chunks": (5, 2, 3)}})
    expected = xr.open_zarr(store, consolidated=False)["t2m"]
    Xd = as_dask(store, component="t2m", sample_dim="time", check_finite=False)
    assert Xd.chunks == ((5, 5, 2), (6,))  # the stored chunks: decoded block by block
    assert Xd.dtype == expected.dtype
    np.testing.assert_array_equal(Xd.compute(), expected.values.reshape(12, 6))
    assert np.isnan(Xd[:, 0].compute()).all()
    with pytest.raises(ValueError, match="NaN or infinity"):  # the masked land is refused
        PCA(2).fit(zarr.open_group(store, mode="r")["t2m"])


def test_zarr_without_cf_attributes_is_read_as_stored(tmp_path):
    """Zarr's own fill value (0 by default) masks nothing outside xarray's v2 convention."""
    X = np.arange(12.0).reshape(4, 3)  # holds a 0
    for fmt in (2, 3):
        array = zarr.create_array(tmp_path / f"plain{fmt}.zarr", data=X.astype(np.int16),
                                  fill_value=0, zarr_format=fmt)
        np.testing.assert_array_equal(as_dask(array).compute(), X)
