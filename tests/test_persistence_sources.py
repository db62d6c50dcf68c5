"""dkpca.save refuses to write over, or to seal, the Zarr data a model reads lazily."""

import shutil

import numpy as np
import pytest
import zarr

import dkpca


@pytest.fixture
def store(tmp_path):
    """Training data as a Zarr array on disk, and the data itself."""
    X = np.random.default_rng(0).normal(size=(200, 5))
    z = zarr.create_array(tmp_path / "data.zarr", shape=X.shape, chunks=(50, 5), dtype="f8")
    z[:] = X
    return tmp_path / "data.zarr", X


@pytest.mark.parametrize("where", ["the store", "a folder above it", "inside it"])
def test_saving_over_the_training_store_is_refused_and_the_model_keeps_working(where, store):
    path, X = store
    model = dkpca.KernelPCA(2, solver="exact").fit(str(path))
    reference = dkpca.KernelPCA(2, solver="exact").fit(X)  # the same model, in memory
    destination = {"the store": path, "a folder above it": path.parent,
                   "inside it": path / "model.zarr"}[where]
    with pytest.raises(ValueError, match="reads its data lazily from the Zarr array"):
        dkpca.save(model, destination, overwrite=True)
    np.testing.assert_allclose(np.asarray(zarr.open_array(path)[...]), X)  # untouched
    np.testing.assert_allclose(np.asarray(model.transform(X[:10] + 0.1)),
                               reference.transform(X[:10] + 0.1), rtol=1e-10, atol=1e-10)


def test_saving_a_lazily_loaded_model_over_its_own_store_is_refused(store, tmp_path):
    _, X = store
    dkpca.save(dkpca.KernelPCA(2, solver="exact").fit(X), tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr", in_memory=0)
    with pytest.raises(ValueError, match="m.zarr/basis_/basis"):
        dkpca.save(loaded, tmp_path / "m.zarr", overwrite=True)
    dkpca.save(loaded, tmp_path / "elsewhere.zarr")  # elsewhere is fine
    np.testing.assert_array_equal(dkpca.load(tmp_path / "elsewhere.zarr").basis_.basis, X)


def test_saving_a_model_whose_lazy_data_is_gone_is_refused(store, tmp_path):
    path, _ = store
    model = dkpca.KernelPCA(2, solver="exact").fit(str(path))
    shutil.rmtree(path)
    with pytest.raises(ValueError, match="cannot be opened any more"):
        dkpca.save(model, tmp_path / "m2.zarr")
    assert not (tmp_path / "m2.zarr").exists()


def test_a_chunk_never_written_because_it_equals_the_fill_value_is_not_refused(tmp_path):
    # Zarr skips writing a chunk equal to the fill value: it is data, not a lost chunk.
    X = np.random.default_rng(1).normal(size=(40, 3))
    X[:10] = 0.0
    array = zarr.create_array(str(tmp_path / "zeros.zarr"), shape=X.shape, chunks=(10, 3),
                              dtype="f8", fill_value=0.0)
    array[:] = X
    assert array.nchunks_initialized < array.nchunks
    model = dkpca.KernelPCA(2, solver="exact").fit(str(tmp_path / "zeros.zarr"))
    dkpca.save(model, tmp_path / "m.zarr")
    np.testing.assert_array_equal(dkpca.load(tmp_path / "m.zarr").basis_.basis, X)


def test_a_model_whose_lazy_data_is_intact_saves_its_values(store, tmp_path):
    path, X = store
    model = dkpca.KernelPCA(2, solver="exact").fit(str(path))
    dkpca.save(model, tmp_path / "m.zarr")
    np.testing.assert_array_equal(dkpca.load(tmp_path / "m.zarr").basis_.basis, X)


def test_a_lazily_loaded_model_whose_store_was_replaced_says_so(store, tmp_path):
    _, X = store
    dkpca.save(dkpca.KernelPCA(2, solver="exact").fit(X), tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr", in_memory=0)
    other = dkpca.KernelPCA(2, solver="exact", gamma=3.0).fit(2 * X)
    dkpca.save(other, tmp_path / "m.zarr", overwrite=True)
    with pytest.raises(ValueError, match="changed since this model was loaded") as err:
        np.asarray(loaded.transform(X[:10]))
    assert not isinstance(err.value, dkpca.DamagedModelError)  # the new model is not damaged
    dkpca.load(tmp_path / "m.zarr")  # and loads


def test_a_destination_inside_a_zarr_array_is_refused(store, tmp_path):
    path, X = store
    model = dkpca.KernelPCA(2, solver="exact").fit(X)  # in memory: reads nothing from it
    with pytest.raises(FileExistsError, match="inside the Zarr array"):
        dkpca.save(model, path / "model.zarr")
    assert sorted(p.name for p in path.iterdir()) == ["c", "zarr.json"]
    zarr.open_group(tmp_path / "group.zarr", mode="w")
    dkpca.save(model, tmp_path / "group.zarr" / "model.zarr")  # inside a group is fine
