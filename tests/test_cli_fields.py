"""``dkpca fields``: EOFs and kernel PCA of an xarray Zarr group with land, from the command line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dkpca
from dkpca.cli import main
from dkpca.options import solver_name
from dkpca.xarray import FieldModel

CLUSTER = ["--workers", "1", "--threads-per-worker", "2"]


@pytest.fixture
def ocean() -> xr.Dataset:
    """``sst`` (time, lat, lon) with land, ``wind`` (time, station) on another grid."""
    rng = np.random.default_rng(4)
    time = pd.date_range("2000-01-01", periods=40, freq="MS")
    sst = rng.normal(size=(40, 4, 6)) * np.linspace(0.5, 2.0, 6)
    sst[:, 0, :2] = sst[:, 3, 5] = np.nan
    wind = rng.normal(size=(40, 3))
    return xr.Dataset(
        {"sst": (("time", "lat", "lon"), sst), "wind": (("time", "station"), wind)},
        coords={"time": time, "lat": [-30.0, 0.0, 30.0, 60.0], "lon": np.arange(6) * 15.0,
                "station": ["a", "b", "c"]},
    )


@pytest.fixture
def store(ocean, tmp_path):
    ocean.to_zarr(tmp_path / "ocean.zarr", consolidated=False)
    return tmp_path / "ocean.zarr"


@pytest.mark.distributed
def test_eofs_of_one_variable_with_coslat(ocean, store, tmp_path, capsys):
    out, saved = tmp_path / "eofs.zarr", tmp_path / "model.zarr"
    status = main(["fields", str(store), "--variable", "sst", "--weights", "coslat",
                   "--n-components", "3", "--out", str(out), "--save-model", str(saved),
                   *CLUSTER])
    assert status == 0
    assert "21 of 24 grid points with data" in capsys.readouterr().out
    result = xr.open_zarr(out, consolidated=False).load()
    reference = FieldModel(dkpca.PCA(3), "time", weights="coslat").fit(ocean.sst)
    np.testing.assert_allclose(result.explained_variance_ratio,
                               reference.explained_variance_ratio(), rtol=1e-10)
    np.testing.assert_allclose(result.components, reference.components(), atol=1e-10)
    assert np.isnan(result.components[:, 0, :2]).all() and np.isnan(result.components[:, 3, 5]).all()
    np.testing.assert_allclose(result.scores, reference.scores_, atol=1e-10)
    assert result.scores.dims == ("time", "mode") and result.attrs["weights"] == '"coslat"'
    np.testing.assert_array_equal(result.time, ocean.time)
    loaded = dkpca.load(saved)
    np.testing.assert_allclose(loaded.transform(ocean.sst), reference.scores_, atol=1e-10)


@pytest.mark.distributed
def test_kernel_pca_of_two_grids_writes_patterns(ocean, store, tmp_path):
    out = tmp_path / "kpca.zarr"
    status = main(["fields", str(store), "--method", "kpca", "--kernel", "rbf", "--gamma",
                   "0.05", "--n-components", "2", "--out", str(out), *CLUSTER])
    assert status == 0
    result = xr.open_zarr(out, consolidated=False).load()
    assert set(result.data_vars) >= {"scores", "patterns_sst", "patterns_wind"}
    assert result.patterns_sst.dims == ("mode", "position", "lat", "lon")
    assert np.isnan(result.patterns_sst[:, :, 0, 0]).all()
    reference = FieldModel(dkpca.KernelPCA(2, kernel="rbf", gamma=0.05), "time").fit(ocean)
    np.testing.assert_allclose(np.abs(result.scores), np.abs(reference.scores_), atol=1e-8)


@pytest.mark.distributed
def test_scattered_nans_and_existing_outputs(ocean, tmp_path, capsys):
    gappy = ocean.copy(deep=True)
    gappy.sst[5, 1, 1] = np.nan
    gappy.to_zarr(tmp_path / "gappy.zarr", consolidated=False)
    args = ["fields", str(tmp_path / "gappy.zarr"), "--variable", "sst", "--n-components", "2",
            "--out", str(tmp_path / "r.zarr"), *CLUSTER]
    assert main(args) == 2
    assert "scattered among valid data" in capsys.readouterr().err
    assert not (tmp_path / "r.zarr").exists()
    assert main([*args, "--nan-policy", "drop_samples"]) == 0
    result = xr.open_zarr(tmp_path / "r.zarr", consolidated=False).load()
    assert np.isnan(result.scores[5]).all() and np.isfinite(result.scores[6]).all()
    assert main([*args, "--nan-policy", "drop_samples"]) == 2  # exists: refused
    assert "exists" in capsys.readouterr().err
    assert main(["fields", str(tmp_path / "gappy.zarr"), "--variable", "nope", "--out",
                 str(tmp_path / "x.zarr"), *CLUSTER]) == 2


@pytest.mark.distributed
def test_solver_options_reach_the_model(store, tmp_path, capsys):
    saved = tmp_path / "nystrom-model.zarr"
    status = main(["fields", str(store), "--variable", "sst", "--method", "kpca", "--solver",
                   "nystrom", "--n-landmarks", "25", "--sampling", "kmeans", "--gamma", "0.05",
                   "--n-components", "2", "--random-state", "0", "--out",
                   str(tmp_path / "k.zarr"), "--save-model", str(saved), *CLUSTER])
    assert status == 0
    solver = dkpca.load(saved).model_.get_params()["solver"]
    assert (solver_name(solver), solver.n_landmarks, solver.sampling) == ("nystrom", 25,
                                                                          "kmeans")
    saved = tmp_path / "sketch-model.zarr"
    assert main(["fields", str(store), "--variable", "sst", "--solver", "sketch", "--sketch",
                 "hashing", "--sketch-dim", "12", "--n-components", "2", "--random-state", "0",
                 "--out", str(tmp_path / "s.zarr"), "--save-model", str(saved), *CLUSTER]) == 0
    params = dkpca.load(saved).model_.get_params()
    assert (params["solver"], params["sketch"], params["sketch_dim"]) == ("sketch", "hashing", 12)


@pytest.mark.distributed
def test_randomized_whitened_eofs_reach_the_model(ocean, store, tmp_path):
    out, saved = tmp_path / "w.zarr", tmp_path / "w-model.zarr"
    assert main(["fields", str(store), "--variable", "sst", "--solver", "randomized",
                 "--whiten", "--n-components", "3", "--random-state", "0", "--out", str(out),
                 "--save-model", str(saved), *CLUSTER]) == 0
    params = dkpca.load(saved).model_.get_params()
    assert (params["solver"], params["whiten"]) == ("randomized", True)
    reference = FieldModel(dkpca.PCA(3, solver="covariance", whiten=True), "time").fit(ocean.sst)
    scores = xr.open_zarr(out, consolidated=False).scores.values
    np.testing.assert_allclose(np.abs(scores), np.abs(reference.scores_), atol=1e-6)
    np.testing.assert_allclose(scores.std(axis=0, ddof=1), 1.0, rtol=1e-6)


def test_kernel_solver_with_linear_pca_is_refused(store, tmp_path, capsys):
    out = tmp_path / "r.zarr"
    assert main(["fields", str(store), "--solver", "nystrom", "--out", str(out), *CLUSTER]) == 2
    assert "--method pca takes --solver auto or randomized or sketch" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(("options", "message"), [
    (["--sigma2", "3"], "--sigma2 applies to --method kpca, not --method pca"),
    (["--kernel", "poly"], "--kernel applies to --method kpca, not --method pca"),
    (["--n-landmarks", "5"], "--n-landmarks applies to --method kpca, not --method pca"),
    (["--sketch-dim", "5"], "--sketch-dim applies to --solver sketch, not --solver auto"),
])
def test_kernel_options_with_linear_pca_are_refused(store, tmp_path, capsys, options, message):
    """They were ignored: every variant gave the same PCA. Refused before any work."""
    out = tmp_path / "r.zarr"
    assert main(["fields", str(store), *options, "--out", str(out), *CLUSTER]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
