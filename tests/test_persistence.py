"""dkpca.save / dkpca.load (dkpca.persistence): every model round-trips, transforms identically."""

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import scipy.sparse
import zarr
from sklearn.exceptions import NotFittedError

import dkpca
from dkpca.kernels import RBF, Linear
from dkpca.moments import RowStatistics
from dkpca.options import ICF, FixedSize, Nystrom, Sketch, SolverOptions
from dkpca.persistence import FORMAT_VERSION

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(300, 5))


MODELS = {
    "exact": lambda: dkpca.KernelPCA(4, kernel="rbf", solver="exact"),
    "randomized cached": lambda: dkpca.KernelPCA(4, solver="randomized", random_state=0),
    "randomized streaming": lambda: dkpca.KernelPCA(
        4, solver="randomized", max_memory="100KiB", block_size="64KiB", random_state=0
    ),
    "sketch": lambda: dkpca.KernelPCA(
        3, solver=Sketch(kind="hashing", dim=40, n_hashes=2, refine=True), random_state=0),
    "nystrom": lambda: dkpca.KernelPCA(
        3, solver=Nystrom(n_landmarks=50, sampling="column_norm"), random_state=0),
    "nystrom extension": lambda: dkpca.KernelPCA(
        3, solver=Nystrom(n_landmarks=40, method="extension"), random_state=0),
    "fixed size": lambda: dkpca.KernelPCA(
        3, solver=FixedSize(n_landmarks=30, selection="renyi"), random_state=0),
    "icf": lambda: dkpca.KernelPCA(3, solver=ICF(tol=5.0, max_rank=60)),
    "sum kernel": lambda: dkpca.KernelPCA(0.5, kernel=RBF(sigma2=2.0) + Linear()),
    "poly": lambda: dkpca.KernelPCA(3, kernel="poly", degree=2, min_relative_eigenvalue=0.01),
    "PCA covariance": lambda: dkpca.PCA(3, solver="covariance"),
    "PCA gram": lambda: dkpca.PCA(3, solver="gram"),
    "PCA sketch": lambda: dkpca.PCA(2, solver="sketch", sketch_dim=4, refine=True,
                                    random_state=0),
}


def _fitted_state(model) -> dict:
    params = model.get_params(deep=False)
    return {k: v for k, v in vars(model).items() if k not in params}


def _params(model) -> dict:
    """The parameters; an options object (which has no ``==``) as its class and parameters."""
    return {k: (type(v), v.get_params()) if isinstance(v, SolverOptions) else v
            for k, v in model.get_params().items()}


def _assert_same_state(loaded, model):
    assert _params(loaded) == _params(model)
    state, expected = _fitted_state(loaded), _fitted_state(model)
    lazy = {k for k, v in expected.items() if isinstance(v, da.Array)}
    assert state.keys() == expected.keys() - lazy  # lazy views of the data are not saved
    for key, value in expected.items():
        if key in lazy:
            continue
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(state[key], value, err_msg=key)
            assert state[key].dtype == value.dtype, key
        elif isinstance(value, RowStatistics):
            for field in dataclasses.fields(value):
                np.testing.assert_array_equal(getattr(state[key], field.name),
                                              getattr(value, field.name), err_msg=key)
        elif key != "basis_":
            assert state[key] == value, key


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
def test_round_trip_transforms_identically(name, lazy, data, tmp_path):
    X = da.from_array(data, chunks=(70, -1)) if lazy else data
    model = MODELS[name]().fit(X)
    dkpca.save(model, tmp_path / "model.zarr")
    loaded = dkpca.load(tmp_path / "model.zarr")
    assert type(loaded) is type(model)
    _assert_same_state(loaded, model)
    new = np.random.default_rng(4).normal(size=(25, 5))
    np.testing.assert_array_equal(loaded.transform(new), model.transform(new))


def test_saving_nystrom_fitted_on_dask_makes_no_pass_over_the_data(data, tmp_path, no_compute):
    model = dkpca.KernelPCA(3, solver=Nystrom(n_landmarks=40), random_state=0).fit(
        da.from_array(data, chunks=(70, -1))
    )
    assert isinstance(model.eigenvectors_, da.Array)
    with no_compute():
        dkpca.save(model, tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr")
    assert not hasattr(loaded, "eigenvectors_")
    np.testing.assert_array_equal(loaded.transform(data), model.transform(data))


def test_large_arrays_stay_lazy_and_transform_identically(data, tmp_path):
    model = dkpca.KernelPCA(3, solver="exact").fit(data.astype(np.float32))
    dkpca.save(model, tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr", in_memory=1024)
    assert isinstance(loaded.basis_.basis, da.Array)
    assert loaded.basis_.basis.dtype == np.float32
    np.testing.assert_array_equal(loaded.transform(data[:10]), model.transform(data[:10]))


def test_memory_url_round_trip(data):
    model = dkpca.KernelPCA(2).fit(data)
    dkpca.save(model, "memory://models/kpca.zarr", overwrite=True)
    loaded = dkpca.load("memory://models/kpca.zarr")
    np.testing.assert_array_equal(loaded.transform(data), model.transform(data))


def test_saved_layout_is_arrays_and_json(data, tmp_path):
    dkpca.save(dkpca.KernelPCA(2, kernel="rbf", gamma=0.5).fit(data), tmp_path / "m.zarr")
    group = zarr.open_group(tmp_path / "m.zarr", mode="r")
    meta = group.attrs["dkpca"]
    json.dumps(dict(group.attrs))  # plain JSON throughout
    assert meta["format"] == "dkpca.model" and meta["format_version"] == FORMAT_VERSION
    assert meta["estimator"] == "KernelPCA" and meta["dkpca_version"] == dkpca.__version__
    assert meta["attributes"]["kernel_"] == {
        "kernel": {"name": "rbf", "configuration": {"gamma": 0.5}}
    }
    arrays = {name for name, _ in group.arrays()} | {
        f"basis_/{name}" for name, _ in group["basis_"].arrays()
    }
    assert {"eigenvalues_", "eigenvectors_", "basis_/basis", "basis_/coef"} <= arrays
    for path in (tmp_path / "m.zarr").rglob("*"):
        assert path.is_dir() or path.name == "zarr.json" or path.parent.name.isdigit() \
            or path.parent.name == "c", path  # metadata and chunks only: nothing pickled


def test_format_fixture_still_loads():
    """A model saved by format version 1 (tests/fixtures/make_model_fixture.py) still works."""
    expected = np.load(FIXTURES / "kpca-v1-expected.npz")
    loaded = dkpca.load(FIXTURES / "kpca-v1.zarr")
    np.testing.assert_allclose(loaded.transform(expected["X"]), expected["scores"], rtol=1e-12)


def test_load_errors(tmp_path, data):
    with pytest.raises(FileNotFoundError, match="no saved model"):
        dkpca.load(tmp_path / "missing.zarr")
    zarr.open_group(tmp_path / "plain.zarr", mode="w")
    with pytest.raises(ValueError, match="not a saved dkpca model"):
        dkpca.load(tmp_path / "plain.zarr")
    dkpca.save(dkpca.PCA(1).fit(data), tmp_path / "new.zarr")
    group = zarr.open_group(tmp_path / "new.zarr", mode="r+")
    meta = dict(group.attrs["dkpca"], format_version=FORMAT_VERSION + 1, dkpca_version="9.0")
    group.attrs["dkpca"] = meta
    with pytest.raises(ValueError, match="Upgrade dkpca"):
        dkpca.load(tmp_path / "new.zarr")


def test_save_errors(tmp_path, data, caplog):
    with pytest.raises(NotFittedError):
        dkpca.save(dkpca.KernelPCA(2), tmp_path / "a.zarr")
    with pytest.raises(TypeError, match="not a dkpca estimator"):
        dkpca.save(object(), tmp_path / "b.zarr")
    model = dkpca.KernelPCA(2).fit(data)
    model.extra_ = {1, 2}
    with pytest.raises(TypeError, match="cannot save extra_ of type set"):
        dkpca.save(model, tmp_path / "c.zarr")
    assert not list(tmp_path.iterdir())  # nothing written by any failure
    dkpca.save(dkpca.KernelPCA(2).fit(data), tmp_path / "d.zarr")
    with pytest.raises(FileExistsError):
        dkpca.save(dkpca.KernelPCA(2).fit(data), tmp_path / "d.zarr")
    generator = dkpca.KernelPCA(2, random_state=np.random.default_rng(0)).fit(data)
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        dkpca.save(generator, tmp_path / "d.zarr", overwrite=True)
    assert "has no JSON form" in caplog.text
    assert dkpca.load(tmp_path / "d.zarr").random_state is None


class Unsaveable(RBF):
    """An RBF kernel without a JSON form, as a Python callable wrapped as a kernel is."""

    def get_config(self):
        raise ValueError("Unsaveable has no JSON configuration")


class Unregistered(RBF):
    """A kernel subclass with a name of its own that was never registered."""

    name = "unregistered"


@pytest.mark.parametrize("kernel", [Unsaveable, Unregistered])
@pytest.mark.parametrize("where", ["parameter", "fitted"])
def test_a_kernel_without_a_config_is_refused_before_anything_is_written(
    kernel, where, data, tmp_path
):
    if where == "parameter":
        model = dkpca.KernelPCA(2, kernel=kernel(gamma=0.5)).fit(data)
    else:  # only the fitted state holds it
        model = dkpca.KernelPCA(2, kernel="rbf", gamma=0.5).fit(data)
        model.kernel_ = kernel(gamma=0.5)
        model.basis_ = dataclasses.replace(model.basis_, kernel=kernel(gamma=0.5))
    with pytest.raises(ValueError, match=rf"{kernel.__name__}\(gamma=0.5\).*use a named kernel"
                       r".*register_kernel"):
        dkpca.save(model, tmp_path / "model.zarr")
    assert not list(tmp_path.iterdir())  # neither the destination nor a temporary sibling


def _sparse_basis(data: np.ndarray) -> scipy.sparse.csr_matrix:
    zeros = np.random.default_rng(5).random(data.shape) < 0.6
    return scipy.sparse.csr_matrix(np.where(zeros, 0.0, data).astype(np.float32))


@pytest.mark.parametrize("lazy", [False, True], ids=["scipy", "dask of scipy"])
def test_a_sparse_basis_is_saved_as_its_csr_parts(lazy, data, tmp_path):
    model = dkpca.KernelPCA(3, solver="exact").fit(data)
    sparse = _sparse_basis(data)
    basis = da.from_array(sparse, chunks=(70, -1), asarray=False) if lazy else sparse
    model.basis_ = dataclasses.replace(model.basis_, basis=basis)
    dkpca.save(model, tmp_path / "m.zarr")

    group = zarr.open_group(tmp_path / "m.zarr", mode="r")
    encoded = group.attrs["dkpca"]["attributes"]["basis_"]["fields"]["basis"]
    assert encoded == {"sparse": "basis", "format": "csr", "shape": [300, 5]}
    assert {name for name, _ in group["basis_/basis"].arrays()} == {"data", "indices", "indptr"}

    loaded = dkpca.load(tmp_path / "m.zarr", in_memory=1024)  # sparse: in memory whatever
    restored = loaded.basis_.basis
    assert isinstance(restored, scipy.sparse.csr_matrix) and restored.shape == sparse.shape
    for part in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(restored, part), getattr(sparse, part))
        assert getattr(restored, part).dtype == getattr(sparse, part).dtype, part
    np.testing.assert_array_equal(loaded.basis_.coef, model.basis_.coef)


# ------------------------------------------------------------------ damage: one clear error

DAMAGE_MODELS = {
    "kpca exact": (lambda: dkpca.KernelPCA(4, kernel="rbf", solver="exact"), "basis_/coef"),
    "kpca nystrom": (lambda: dkpca.KernelPCA(3, solver=Nystrom(n_landmarks=50),
                                             random_state=0), "basis_/basis"),
    "pca": (lambda: dkpca.PCA(3, solver="covariance"), "components_"),
}


def _metadata(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())


def _first_chunk(array: Path) -> Path:
    return next(p for p in sorted((array / "c").rglob("*")) if p.is_file())


def _damage(kind: str, model: Path, array: str) -> str:
    """Damage the saved ``model`` in one way; return what the error must name."""
    target = model / array
    if kind == "missing chunk":
        chunk = _first_chunk(target)
        chunk.unlink()
        return "/".join(chunk.relative_to(target).parts)
    if kind == "missing array":
        shutil.rmtree(target)
        return array
    if kind == "garbage metadata":
        (target / "zarr.json").write_text("{not json")
        return array
    if kind == "garbage root metadata":
        (model / "zarr.json").write_bytes(b"\x00garbage")
        return "zarr.json"
    if kind == "truncated chunk":
        chunk = _first_chunk(target)
        chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
        return "/".join(chunk.relative_to(target).parts)
    if kind == "edited shape":
        meta = _metadata(target)
        meta["shape"][-1] -= 1
        (target / "zarr.json").write_text(json.dumps(meta))
        return array
    if kind == "invalid parameter":
        meta = _metadata(model)
        meta["attributes"]["dkpca"]["params"]["n_components"] = {"value": "three"}
        (model / "zarr.json").write_text(json.dumps(meta))
        return "n_components='three'"
    if kind == "edited fitted value":
        meta = _metadata(model)
        meta["attributes"]["dkpca"]["attributes"]["solver_"] = {"value": "sketch"}
        (model / "zarr.json").write_text(json.dumps(meta))
        return "zarr.json"
    raise AssertionError(kind)


DAMAGES = ["missing chunk", "missing array", "garbage metadata", "garbage root metadata",
           "truncated chunk", "edited shape", "invalid parameter", "edited fitted value"]


def _assert_damaged(err: pytest.ExceptionInfo, model: Path, part: str) -> None:
    message = str(err.value)
    assert str(model) in message and part in message, message
    assert "refit or restore it" in message.lower(), message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("kind", DAMAGES)
@pytest.mark.parametrize("name", DAMAGE_MODELS)
def test_a_damaged_model_is_one_clear_error_at_load(name, kind, data, tmp_path):
    make, array = DAMAGE_MODELS[name]
    path = tmp_path / "model.zarr"
    dkpca.save(make().fit(data), path)
    dkpca.load(path)  # undamaged: loads
    part = _damage(kind, path, array)
    with pytest.raises(dkpca.DamagedModelError) as err:
        dkpca.load(path)
    _assert_damaged(err, path, part)
    assert isinstance(err.value, ValueError)  # the command line's exit status 2


def test_a_missing_chunk_equal_to_the_fill_value_is_still_damage(data, tmp_path):
    """Zarr reads a missing chunk as its fill value: an all-zero chunk is written and checked."""
    model = dkpca.PCA(3).fit(data)
    model.mean_ = np.zeros_like(model.mean_)
    dkpca.save(model, tmp_path / "m.zarr")
    np.testing.assert_array_equal(dkpca.load(tmp_path / "m.zarr").mean_, 0.0)
    _first_chunk(tmp_path / "m.zarr" / "mean_").unlink()
    with pytest.raises(dkpca.DamagedModelError, match="chunk c/0 of the array mean_ missing"):
        dkpca.load(tmp_path / "m.zarr")


@pytest.mark.parametrize("kind", ["missing chunk", "truncated chunk", "altered chunk"])
def test_a_lazily_loaded_array_is_verified_as_it_is_read(kind, data, tmp_path):
    model = dkpca.KernelPCA(3, solver="exact").fit(da.from_array(data, chunks=(70, -1)))
    path = tmp_path / "m.zarr"
    dkpca.save(model, path)
    chunks = sorted(p for p in (path / "basis_/basis/c").rglob("*") if p.is_file())
    assert len(chunks) == 5  # one Zarr chunk per (regular) row chunk
    chunk = chunks[2]
    if kind == "missing chunk":  # found at load by listing the store, nothing read
        chunk.unlink()
        with pytest.raises(dkpca.DamagedModelError) as err:
            dkpca.load(path, in_memory=1024)
        _assert_damaged(err, path, "chunk c/2/0 of the array basis_/basis")
        return
    if kind == "truncated chunk":
        chunk.write_bytes(chunk.read_bytes()[:10])
    else:  # decodes, but to other values: only the checksum tells
        values = np.asarray(zarr.open_array(path / "basis_/basis")[140:210])
        zarr.open_array(path / "basis_/basis", mode="r+")[140:210] = values + 1e-9
    loaded = dkpca.load(path, in_memory=1024)
    assert isinstance(loaded.basis_.basis, da.Array)
    with pytest.raises(dkpca.DamagedModelError) as err:
        np.asarray(loaded.transform(data[:10]))
    _assert_damaged(err, path, "chunk c/2/0 of the array basis_/basis")


def test_an_undamaged_lazy_model_reads_each_chunk_once(data, tmp_path):
    model = dkpca.KernelPCA(3, solver="exact").fit(da.from_array(data, chunks=(70, -1)))
    dkpca.save(model, tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr", in_memory=1024)
    np.testing.assert_allclose(np.asarray(loaded.transform(data[:10])),
                               model.transform(data[:10]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["truncated chunk", "edited shape", "missing array",
                                  "invalid parameter"])
def test_a_damaged_format_1_model_without_checksums_is_refused(kind, tmp_path):
    path = tmp_path / "kpca-v1.zarr"
    shutil.copytree(FIXTURES / "kpca-v1.zarr", path)
    part = _damage(kind, path, "basis_/coef")
    with pytest.raises(dkpca.DamagedModelError) as err:
        dkpca.load(path)
    _assert_damaged(err, path, part)


def test_every_fixture_format_still_loads():
    models = sorted(FIXTURES.glob("*.zarr"))
    assert models
    for path in models:
        expected = np.load(FIXTURES / f"{path.stem}-expected.npz")
        np.testing.assert_allclose(dkpca.load(path).transform(expected["X"]), expected["scores"],
                                   rtol=1e-12, err_msg=path.name)


def test_transform_with_a_damaged_model_exits_2_with_one_line(data, tmp_path, capsys):
    from dkpca.cli import main

    model = tmp_path / "model.zarr"
    dkpca.save(dkpca.KernelPCA(3, solver="exact").fit(data), model)
    zarr.create_array(tmp_path / "new.zarr", data=data[:20])
    _first_chunk(model / "basis_/coef").unlink()
    status = main(["transform", str(model), str(tmp_path / "new.zarr"), "--out",
                   str(tmp_path / "scores.zarr"), "--quiet"])
    captured = capsys.readouterr()
    assert status == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dkpca: error: "), captured.err
    assert "damaged" in lines[0] and "basis_/coef" in lines[0]
    assert "refit or restore it" in lines[0].lower()
    assert not (tmp_path / "scores.zarr").exists()


@pytest.mark.parametrize("solver", ["covariance", "gram", "randomized", "sketch"])
@pytest.mark.parametrize("whiten", [False, True])
def test_a_pca_loaded_lazily_is_read_whole(solver, whiten, tmp_path):
    """Whatever ``in_memory``, a PCA's arrays (k x d at most) are read into memory, so its
    probabilistic methods (numpy code) give what the fitted model gives."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 30)) @ rng.normal(size=(30, 30))
    if solver == "gram":
        X = X[:25]
    model = dkpca.PCA(4, solver=solver, whiten=whiten, random_state=0).fit(X)
    dkpca.save(model, tmp_path / "pca.zarr")
    loaded = dkpca.load(tmp_path / "pca.zarr", in_memory=0)
    for key in ("components_", "mean_", "explained_variance_", "singular_values_"):
        assert isinstance(getattr(loaded, key), np.ndarray), key
    np.testing.assert_array_equal(loaded.get_covariance(), model.get_covariance())
    np.testing.assert_array_equal(loaded.get_precision(), model.get_precision())
    np.testing.assert_array_equal(loaded.score_samples(X), model.score_samples(X))
    assert loaded.score(X) == model.score(X)
    np.testing.assert_array_equal(loaded.transform(X), model.transform(X))


def test_a_kernel_pca_loaded_lazily_keeps_only_its_training_rows_lazy(data, tmp_path):
    model = dkpca.KernelPCA(3, fit_inverse_transform=True).fit(data)
    dkpca.save(model, tmp_path / "kpca.zarr")
    loaded = dkpca.load(tmp_path / "kpca.zarr", in_memory=0)
    assert isinstance(loaded.basis_.basis, da.Array)  # a training row each: left in the store
    assert isinstance(loaded.dual_coef_, da.Array)
    for key in ("eigenvalues_", "explained_variance_", "explained_variance_ratio_"):
        assert isinstance(getattr(loaded, key), np.ndarray), key
    np.testing.assert_array_equal(np.asarray(loaded.transform(data)), model.transform(data))


@pytest.mark.parametrize("estimator", ["PCA", "FieldModel"])
def test_a_model_of_format_3_or_later_without_checksums_is_damaged(estimator, tmp_path):
    """Checksums came before format 3, so such a model without them was tampered with."""
    import xarray as xr

    X = np.random.default_rng(0).normal(size=(40, 3))
    path = tmp_path / "model.zarr"
    if estimator == "PCA":
        dkpca.save(dkpca.PCA(2).fit(X), path)
    else:
        field = xr.DataArray(X.reshape(40, 3, 1), dims=("time", "lat", "lon"))
        dkpca.save(dkpca.xarray.FieldModel(dkpca.PCA(2), "time").fit(field), path)
    group = zarr.open_group(path, mode="r+")
    target = group["estimator"] if estimator == "FieldModel" else group
    meta = dict(target.attrs["dkpca"])
    assert meta["format_version"] >= 3
    del meta["checksums"]
    target.attrs["dkpca"] = meta
    with pytest.raises(dkpca.persistence.DamagedModelError, match="checksums .* are missing"):
        dkpca.load(path)


def test_models_are_zarr_v3_whatever_zarrs_default_format(data, tmp_path):
    model = dkpca.KernelPCA(3).fit(data)
    with zarr.config.set({"default_zarr_format": 2}):
        dkpca.save(model, tmp_path / "model.zarr")
        assert zarr.open_group(tmp_path / "model.zarr", mode="r").metadata.zarr_format == 3
        loaded = dkpca.load(tmp_path / "model.zarr", in_memory=0)
        np.testing.assert_array_equal(np.asarray(loaded.transform(data)), model.transform(data))


def _as_zarr_v2(source: Path, destination: Path) -> None:
    """Copy a saved model into a Zarr v2 group, as a dkpca that did not pin v3 saved it while
    zarr's default format was 2 (same values, chunks and attributes)."""
    def copy(group: zarr.Group, into: zarr.Group) -> None:
        into.attrs.update(dict(group.attrs))
        for name, node in group.members():
            if isinstance(node, zarr.Array):
                into.create_array(name, data=node[...], chunks=node.chunks,
                                  config={"write_empty_chunks": True})
            else:
                copy(node, into.create_group(name))

    copy(zarr.open_group(source, mode="r"), zarr.open_group(destination, mode="w", zarr_format=2))


def test_a_zarr_v2_model_loads_lazily_and_names_its_damaged_chunks(data, tmp_path):
    model = dkpca.KernelPCA(3).fit(data)
    dkpca.save(model, tmp_path / "v3.zarr")
    _as_zarr_v2(tmp_path / "v3.zarr", tmp_path / "v2.zarr")
    assert (tmp_path / "v2.zarr" / ".zgroup").exists()
    loaded = dkpca.load(tmp_path / "v2.zarr", in_memory=0)
    np.testing.assert_array_equal(np.asarray(loaded.transform(data)), model.transform(data))

    coef = zarr.open_array(tmp_path / "v2.zarr" / "basis_" / "coef", mode="r+")
    coef[0, 0] += 1.0  # an altered chunk, read lazily
    lazy = dkpca.load(tmp_path / "v2.zarr", in_memory=0)
    with pytest.raises(dkpca.persistence.DamagedModelError, match=r"chunk 0\.0 of the array "
                       r"basis_/coef does not match its checksum"):
        np.asarray(lazy.transform(data))
