"""The ``dkpca`` command: fit -> transform -> info on Zarr, the demo, and user errors."""

import contextlib
import re
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
import zarr

import dkpca
from dkpca.cli import main
from dkpca.datasets import make_rings
from dkpca.options import ICF, FixedPoint, FixedSize, Nystrom, Randomized

CLUSTER = ["--workers", "1", "--threads-per-worker", "2"]


@pytest.fixture
def store(tmp_path):
    """A Zarr group as xarray writes it: ``X`` (time, feature) beside a ``time`` coordinate."""
    X = np.random.default_rng(0).normal(size=(400, 5))
    group = zarr.open_group(tmp_path / "data.zarr", mode="w")
    group.create_array("X", data=X, chunks=(100, 5), dimension_names=("time", "feature"))
    group.create_array("time", data=np.arange(400), dimension_names=("time",),
                       attributes={"units": "days since 2000-01-01"})
    return tmp_path / "data.zarr", X


@pytest.mark.distributed
def test_transform_of_a_transposed_component_keeps_the_sample_coordinate(store, tmp_path):
    """--sample-dim on a (feature, time) component: the time coordinate is matched against
    the output's rows, not the input's first axis (it was left out)."""
    path, X = store
    zarr.open_group(path, mode="a").create_array("XT", data=X.T, chunks=(5, 100),
                                                 dimension_names=("feature", "time"))
    model_path, scores_path = tmp_path / "model.zarr", tmp_path / "scores.zarr"
    assert main(["fit", str(path), "--component", "X", "--out", str(model_path),
                 "--n-components", "2", "--gamma", "0.2", "--solver", "exact", "--quiet",
                 *CLUSTER]) == 0
    assert main(["transform", str(model_path), str(path), "--component", "XT",
                 "--sample-dim", "time", "--out", str(scores_path), "--quiet", *CLUSTER]) == 0
    ds = xr.open_zarr(scores_path, consolidated=False)
    assert ds.scores.dims == ("time", "component")
    assert ds.time.values[1] == np.datetime64("2000-01-02")
    reference = dkpca.load(model_path).transform(X)
    np.testing.assert_allclose(ds.scores.values, reference, atol=1e-10)


@pytest.mark.distributed
def test_fit_with_a_learned_preimage_while_showing_progress(store, tmp_path):
    """Without --quiet the command computes through the cluster's progress display, which
    failed on the learned pre-image's numpy arrays ("unhashable type: 'numpy.ndarray'")."""
    path, X = store
    model_path = tmp_path / "poly.zarr"
    assert main(["fit", str(path), "--component", "X", "--out", str(model_path),
                 "--kernel", "poly", "--degree", "2", "--n-components", "3", "--solver", "exact",
                 "--fit-inverse-transform", "--alpha", "0.1", *CLUSTER]) == 0
    model = dkpca.load(model_path)
    reference = dkpca.KernelPCA(3, kernel="poly", degree=2, solver="exact",
                                fit_inverse_transform=True, alpha=0.1).fit(X)
    np.testing.assert_allclose(model.inverse_transform(model.transform(X[:20])),
                               reference.inverse_transform(reference.transform(X[:20])),
                               rtol=1e-6, atol=1e-8)


def _snapshot(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.distributed
def test_fit_transform_info_on_zarr(store, tmp_path, capsys):
    path, X = store
    model_path, scores_path = tmp_path / "model.zarr", tmp_path / "scores.zarr"
    status = main(["fit", str(path), "--component", "X", "--out", str(model_path),
                   "--n-components", "3", "--gamma", "0.2", "--solver", "exact", *CLUSTER])
    out = capsys.readouterr().out
    assert status == 0
    assert "fitted RBF(gamma=0.2) kernel PCA (exact) on 400 x 5: 3 components" in out
    reference = dkpca.KernelPCA(3, gamma=0.2, solver="exact").fit(X)
    model = dkpca.load(model_path)
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)

    status = main(["transform", str(model_path), str(path), "--component", "X",
                   "--out", str(scores_path), "--quiet", *CLUSTER])
    assert status == 0 and "projected 400 x 5 on 3 components" in capsys.readouterr().out
    ds = xr.open_zarr(scores_path, consolidated=False)
    assert ds.scores.dims == ("time", "component")
    np.testing.assert_allclose(ds.scores.values, reference.transform(X), atol=1e-8)
    assert ds.time.values[1] == np.datetime64("2000-01-02")  # the input's coordinate, decoded
    assert ds.attrs["estimator"] == "KernelPCA"
    np.testing.assert_allclose(ds.attrs["eigenvalues"], reference.eigenvalues_)

    assert main(["info", str(model_path)]) == 0
    info = capsys.readouterr().out
    assert "trained on: 400 samples x 5 features" in info
    assert f"{reference.eigenvalues_[0]:10.4g}" in info
    assert "KernelPCA with 3 components" in info
    assert main(["info", str(model_path), "--quiet"]) == 0  # the summary line alone
    assert capsys.readouterr().out.strip().splitlines() == [info.strip().splitlines()[-1]]
    assert _snapshot(tmp_path).count("scores.zarr") == 1 and not any(
        ".dkpca-" in name for name in _snapshot(tmp_path)
    )


@pytest.mark.distributed
def test_fit_with_nystrom_from_the_command_line(store, tmp_path, capsys):
    path, X = store
    status = main(["fit", str(path), "--component", "X", "--out", str(tmp_path / "n.zarr"),
                   "--n-components", "2", "--solver", "nystrom", "--n-landmarks", "80",
                   "--sampling", "kmeans", "--random-state", "0", "--quiet", *CLUSTER])
    assert status == 0 and "(nystrom)" in capsys.readouterr().out
    model = dkpca.load(tmp_path / "n.zarr")
    assert model.landmarks_.shape == (80, 5)
    np.testing.assert_allclose(model.transform(X[:5]),
                               dkpca.KernelPCA(2, solver=Nystrom(n_landmarks=80,
                                                                 sampling="kmeans"),
                                               random_state=0)
                               .fit(X).transform(X[:5]), atol=1e-8)


@pytest.mark.parametrize("cache_dtype", ["float32", "float64"])
def test_fit_randomized_with_a_cache_dtype(cache_dtype, store, tmp_path, capsys):
    path, X = store
    status = main(["fit", str(path), "--component", "X", "--out", str(tmp_path / "r.zarr"),
                   "--n-components", "2", "--solver", "randomized", "--cache-dtype",
                   cache_dtype, "--random-state", "0", "--quiet"])
    assert status == 0 and "(randomized)" in capsys.readouterr().out
    model = dkpca.load(tmp_path / "r.zarr")
    assert model.solver.cache_dtype == cache_dtype
    reference = dkpca.KernelPCA(2, solver=Randomized(cache_dtype=cache_dtype),
                                random_state=0).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-12)


@pytest.mark.parametrize(("options", "attribute", "solver"), [
    (["--solver", "fixed_size", "--n-landmarks", "40", "--selection", "renyi"], "entropy_trace_",
     FixedSize(n_landmarks=40, selection="renyi")),
    (["--solver", "icf", "--icf-tol", "2.0", "--max-rank", "50"], "residual_trace_",
     ICF(tol=2.0, max_rank=50)),
])
def test_fit_with_fixed_size_and_icf_from_the_command_line(options, attribute, solver, store,
                                                           tmp_path, capsys):
    path, X = store
    status = main(["fit", str(path), "--component", "X", "--out", str(tmp_path / "m.zarr"),
                   "--n-components", "2", "--random-state", "0", "--quiet", *options])
    assert status == 0 and f"({options[1]})" in capsys.readouterr().out
    model = dkpca.load(tmp_path / "m.zarr")
    reference = dkpca.KernelPCA(2, solver=solver, random_state=0).fit(X)
    np.testing.assert_allclose(getattr(model, attribute), getattr(reference, attribute), rtol=1e-12)
    np.testing.assert_allclose(model.transform(X[:5]), reference.transform(X[:5]), atol=1e-8)


@pytest.fixture
def saved_model(store, tmp_path):
    _, X = store
    path = tmp_path / "model.zarr"
    dkpca.save(dkpca.KernelPCA(2, gamma=0.2).fit(X), path)
    dkpca.save(dkpca.KernelPCA(2, kernel="poly").fit(X), tmp_path / "poly.zarr")
    wide = zarr.create_array(tmp_path / "wide.zarr", data=np.ones((10, 7)))
    assert wide.shape == (10, 7)
    return path


BAD = {
    "missing input": (["fit", "{tmp}/nothing.zarr", "--out", "{tmp}/m.zarr"],
                      "no Zarr array or group at"),
    "bad parameter": (["fit", "{tmp}/data.zarr", "--component", "X", "--out", "{tmp}/m.zarr",
                       "--gamma", "-1"], "KernelPCA: invalid gamma=-1.0"),
    "bad fraction": (["fit", "{tmp}/data.zarr", "--component", "X", "--out", "{tmp}/m.zarr",
                      "--n-components", "1.5"], "invalid n_components=1.5"),
    "group without component": (["fit", "{tmp}/data.zarr", "--out", "{tmp}/m.zarr"],
                                "name the array to read with component="),
    "existing output": (["fit", "{tmp}/data.zarr", "--component", "X", "--out",
                         "{tmp}/model.zarr"], "already exists; pass overwrite=True"),
    "wrong shape": (["transform", "{tmp}/model.zarr", "{tmp}/wide.zarr", "--out",
                     "{tmp}/s.zarr"], "X has 7 features, but KernelPCA is expecting 5"),
    "missing model": (["transform", "{tmp}/none.zarr", "{tmp}/wide.zarr", "--out",
                       "{tmp}/s.zarr"], "no saved model at"),
    "not a model": (["info", "{tmp}/wide.zarr"], "is a Zarr array, not a saved dkpca model"),
    "scheduler with workers": (["fit", "{tmp}/data.zarr", "--component", "X", "--out",
                                "{tmp}/m.zarr", "--scheduler", "tcp://127.0.0.1:1",
                                "--workers", "2"], "--workers apply to the embedded cluster"),
    "partial TLS": (["fit", "{tmp}/data.zarr", "--component", "X", "--out", "{tmp}/m.zarr",
                     "--tls-cert", "{tmp}/cert.pem"], "missing: --tls-ca-file, --tls-key"),
    "denoise: poly without learned pre-image": (["denoise", "{tmp}/poly.zarr",
                                                 "{tmp}/data.zarr", "--component", "X",
                                                 "--out", "{tmp}/d.zarr"],
                                                "needs fit_inverse_transform=True"),
    "select: existing plot": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                               "{tmp}/wide.zarr"], "--plot: "),
    "select: bad validation": (["select", "{tmp}/data.zarr", "--component", "X",
                                "--validation", "5000", "--plot", "{tmp}/p.png"],
                               "validation=5000 asks for more than"),
    "unknown sample dim": (["fit", "{tmp}/data.zarr", "--component", "X", "--out",
                            "{tmp}/m.zarr", "--sample-dim", "depth"], "'depth' is not a dim"),
}


@pytest.mark.parametrize("case", BAD)
def test_user_errors_exit_2_with_one_line_and_write_nothing(case, saved_model, tmp_path, capsys):
    argv, message = BAD[case]
    before = _snapshot(tmp_path)
    status = main([arg.format(tmp=tmp_path) for arg in argv] + ["--quiet"])
    captured = capsys.readouterr()
    assert status == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dkpca: error: "), captured.err
    assert message in lines[0]
    assert captured.out == ""
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(("options", "message"), [
    (["fit", "--out", "{tmp}/m.zarr", "--max-memory", "lots"], "max_memory='lots' is not a size"),
    (["select", "--plot", "{tmp}/p.png", "--n-train", "5000"], "need 3 <= n_train <= n_samples"),
    (["select", "--plot", "{tmp}/p.png", "--validation", "5000"], "asks for more than the"),
    (["select", "--plot", "{tmp}/p.png", "--n-train", "100", "--n-components", "500"],
     "n_components=500 exceeds n_train - 1 = 99"),
])
def test_parameters_checked_against_the_data_before_the_cluster_starts(
        options, message, store, tmp_path, capsys, monkeypatch):
    """As the guide says: these were reported only once the embedded cluster was up."""
    import dkpca.cli._commands

    def no_cluster(*args, **kwargs):
        raise AssertionError("the cluster started before the parameters were checked")

    monkeypatch.setattr(dkpca.cli._commands, "cluster", no_cluster)
    path, _ = store
    command, *rest = options
    argv = [command, str(path), "--component", "X", *[a.format(tmp=tmp_path) for a in rest]]
    assert main([*argv, "--quiet"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.distributed
def test_error_after_the_cluster_started_writes_nothing(store, tmp_path, capsys):
    path, _ = store
    status = main(["fit", str(path), "--component", "X", "--out", str(tmp_path / "m.zarr"),
                   "--n-components", "401", "--quiet", *CLUSTER])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "n_components=401" in err[0]
    assert not (tmp_path / "m.zarr").exists()


def test_user_error_from_the_shell_has_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "dkpca", "fit", str(tmp_path / "none.zarr"), "--out",
         str(tmp_path / "m.zarr")],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"dkpca: error: no Zarr array or group at {tmp_path}/none.zarr"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.distributed
def test_demo_writes_figure_and_prints_eigenvalues(tmp_path, capsys):
    out = tmp_path / "demo"
    status = main(["demo", "--out", str(out), "--n-samples", "400", "--n-draws", "10", *CLUSTER])
    captured = capsys.readouterr()
    assert status == 0
    assert "eigenvalues of the centred kernel matrix" in captured.out
    # each phase's own time, not the cluster's start inside the fit's
    assert re.search(r"MDD chose sigma2 = [\d.]+ and \d+ components in [\d.]+ s; kernel PCA on "
                     r"400 x 2 \(\w+\) in [\d.]+ s, denoising in [\d.]+ s, [\d.]+ s with the "
                     r"cluster's start and stop", captured.out)
    assert (out / "kpca-rings.png").stat().st_size > 10_000
    assert (out / "model-selection.png").stat().st_size > 10_000
    assert (out / "denoise-rings.png").stat().st_size > 10_000
    # no partial file left behind
    assert sorted(out.iterdir()) == [out / "denoise-rings.png", out / "kpca-rings.png",
                                     out / "model-selection.png"]


@pytest.mark.distributed
def test_demo_interrupted_between_figures_names_those_written(tmp_path, capsys, monkeypatch):
    import dkpca._demo

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(dkpca._demo, "_plot_denoising", interrupted)
    out = tmp_path / "demo"
    status = main(["demo", "--out", str(out), "--n-samples", "300", "--n-draws", "5", "--quiet",
                   *CLUSTER])
    assert status == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"dkpca: interrupted; written before it, whole: {out / 'model-selection.png'}, "
        f"{out / 'kpca-rings.png'}")
    assert sorted(out.iterdir()) == [out / "kpca-rings.png", out / "model-selection.png"]


@pytest.mark.distributed
def test_select_prints_the_choice_and_writes_figure_and_table(tmp_path, capsys):
    from dkpca.datasets import make_semicircles

    X, _, _ = make_semicircles(300, random_state=0)
    zarr.create_array(tmp_path / "semi.zarr", data=X, chunks=(100, 2))
    plot, table = tmp_path / "selection.png", tmp_path / "table.zarr"
    status = main(["select", str(tmp_path / "semi.zarr"), "--n-draws", "10", "--n-train", "100",
                   "--random-state", "0", "--plot", str(plot), "--table", str(table), *CLUSTER])
    out = capsys.readouterr().out
    assert status == 0
    expected = dkpca.select_model(X, n_draws=10, n_train=100, random_state=0)
    assert f"MDD: sigma2 = {expected.sigma2:.4g}, n_components = {expected.n_components}" in out
    assert "<- chosen" in out and f"--n-components {expected.n_components}" in out
    assert plot.stat().st_size > 10_000
    saved = xr.open_zarr(table, consolidated=False)
    np.testing.assert_allclose(saved["information"], expected.table["information"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["selection.png", "semi.zarr",
                                                          "table.zarr"]


@pytest.mark.distributed
def test_select_writes_figure_and_table_to_urls(tmp_path, capsys):
    import fsspec

    from dkpca.datasets import make_semicircles

    X, _, _ = make_semicircles(200, random_state=0)
    zarr.create_array(tmp_path / "semi.zarr", data=X, chunks=(100, 2))
    memory = fsspec.filesystem("memory")
    folder = f"memory://select-{tmp_path.name}"
    argv = ["select", str(tmp_path / "semi.zarr"), "--n-draws", "5", "--n-train", "80",
            "--random-state", "0", "--plot", f"{folder}/selection.png", "--table",
            f"{folder}/table.zarr", "--storage-options", '{"skip_instance_cache": false}',
            "--quiet", *CLUSTER]  # the options go to the URLs, not to the local input
    assert main(argv) == 0
    assert memory.cat(f"{folder}/selection.png").startswith(b"\x89PNG")
    table = xr.open_zarr(f"{folder}/table.zarr", consolidated=False)
    assert "information" in table and table.sizes["sigma2"] > 1
    assert sorted(p.rpartition("/")[2] for p in memory.ls(folder, detail=False)) == [
        "selection.png", "table.zarr"]  # no temporary left
    capsys.readouterr()
    assert main(argv) == 2
    assert f"--plot: {folder}/selection.png already exists" in capsys.readouterr().err


@pytest.mark.distributed
def test_denoise_writes_the_preimages(tmp_path, capsys):
    from dkpca.datasets import make_semicircles

    X, _, _ = make_semicircles(300, random_state=0)
    group = zarr.open_group(tmp_path / "semi.zarr", mode="w")
    group.create_array("X", data=X, chunks=(100, 2), dimension_names=("time", "feature"))
    group.create_array("time", data=np.arange(300), dimension_names=("time",))
    model_path, out = tmp_path / "model.zarr", tmp_path / "denoised.zarr"
    assert main(["fit", str(tmp_path / "semi.zarr"), "--component", "X", "--out",
                 str(model_path), "--n-components", "8", "--sigma2", "2", "--quiet",
                 *CLUSTER]) == 0
    status = main(["denoise", str(model_path), str(tmp_path / "semi.zarr"), "--component", "X",
                   "--out", str(out), "--quiet", *CLUSTER])
    summary = capsys.readouterr().out
    assert status == 0 and "fixed_point pre-images" in summary
    result = xr.open_zarr(out, consolidated=False)
    expected = dkpca.load(model_path).denoise(X)
    np.testing.assert_allclose(result["X"].values, expected, rtol=1e-10)
    assert result["X"].dims == ("time", "feature") and result.attrs["preimage"] == "fixed_point"
    np.testing.assert_array_equal(result["time"].values, np.arange(300))


def test_demo_user_error_is_one_line_and_status_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [sys.executable, "-m", "dkpca", "demo", "--out", str(blocker), "--quiet"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"dkpca: error: --out {blocker} exists and is not a folder"
    assert "Traceback" not in result.stderr and blocker.read_text() == "not a folder"


def test_bad_option_exits_2():
    result = subprocess.run(
        [sys.executable, "-m", "dkpca", "demo", "--n-samples", "-3"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2 and "must be a positive integer" in result.stderr


def test_make_rings():
    X, labels = make_rings(301, n_rings=3, noise=0.0, n_noise_dims=2, random_state=0)
    assert X.shape == (301, 4) and np.array_equal(np.bincount(labels), [101, 100, 100])
    np.testing.assert_allclose(np.hypot(X[:, 0], X[:, 1]), labels + 1.0)
    assert np.all(X[:, 2:] == 0)
    again, _ = make_rings(301, n_rings=3, noise=0.1, random_state=0)
    np.testing.assert_array_equal(again, make_rings(301, n_rings=3, noise=0.1, random_state=0)[0])
    with pytest.raises(ValueError, match="n_samples >= n_rings"):
        make_rings(2, n_rings=3)


EARLY = {
    "gamma with sigma2": (["fit", "{tmp}/data.zarr", "--component", "X", "--out", "{tmp}/m.zarr",
                           "--gamma", "0.1", "--sigma2", "2"], "give gamma or sigma2, not both"),
    "sigma2 with poly": (["fit", "{tmp}/data.zarr", "--component", "X", "--out", "{tmp}/m.zarr",
                          "--kernel", "poly", "--sigma2", "2"], "sigma2 applies to the rbf"),
    "fit: unwritable out": (["fit", "{tmp}/data.zarr", "--component", "X", "--out",
                             "/proc/m.zarr"], "--out: cannot write /proc/m.zarr"),
    "transform: unwritable out": (["transform", "{tmp}/model.zarr", "{tmp}/data.zarr",
                                   "--component", "X", "--out", "/proc/s.zarr"], "--out: "),
    "denoise: unwritable out": (["denoise", "{tmp}/model.zarr", "{tmp}/data.zarr",
                                 "--component", "X", "--out", "/proc/d.zarr"], "--out: "),
    "select: unwritable table": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                                  "{tmp}/p.png", "--table", "/proc/t.zarr"], "--table: "),
    "select: unwritable plot": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                                 "/proc/p.png"], "--plot: "),
    "select: bad percentile": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                                "{tmp}/p.png", "--percentile", "120"], "invalid percentile=120"),
    "select: bad grid": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                          "{tmp}/p.png", "--sigma2-grid", "inf"], "positive finite values"),
    "fields: unwritable model": (["fields", "{tmp}/data.zarr", "--out", "{tmp}/r.zarr",
                                  "--save-model", "/proc/f.zarr"], "--save-model: "),
    "fields: model at --out": (["fields", "{tmp}/data.zarr", "--out", "{tmp}/r.zarr",
                                "--save-model", "{tmp}/./r.zarr/", "--overwrite"],
                               ("--out {tmp}/r.zarr and --save-model {tmp}/./r.zarr/ name the "
                                "same place")),
    "fields: model inside --out": (["fields", "{tmp}/data.zarr", "--out", "{tmp}/r.zarr",
                                    "--save-model", "{tmp}/r.zarr/model.zarr"],
                                   "name one inside the other"),
    "fields: one URL twice": (["fields", "{tmp}/data.zarr", "--out", "memory://same/r.zarr",
                               "--save-model", "memory:///same/r.zarr/"], "name the same place"),
    "select: table at plot": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                               "{tmp}/p.zarr", "--table", "{tmp}/p.zarr"],
                              "--plot {tmp}/p.zarr and --table {tmp}/p.zarr name the same"),
    "fields: gamma with sigma2": (["fields", "{tmp}/data.zarr", "--out", "{tmp}/r.zarr",
                                   "--method", "kpca", "--gamma", "1", "--sigma2", "1"],
                                  "give gamma or sigma2, not both"),
    "fields: bad PCA parameter": (["fields", "{tmp}/data.zarr", "--out", "{tmp}/r.zarr",
                                   "--min-relative-eigenvalue", "2"],
                                  "invalid min_relative_eigenvalue=2.0"),
    "fields on an array": (["fields", "{tmp}/wide.zarr", "--out", "{tmp}/r.zarr"],
                           ("wide.zarr is a Zarr array; dkpca fields needs a group written by "
                            "xarray")),
    "transform with a FieldModel": (["transform", "{tmp}/field.zarr", "{tmp}/data.zarr",
                                     "--component", "X", "--out", "{tmp}/s.zarr"],
                                    "holds a FieldModel (from dkpca fields)"),
    # an output where the command reads: --overwrite replaced the data it was reading
    "transform: --out at INPUT": (["transform", "{tmp}/model.zarr", "{tmp}/wide.zarr", "--out",
                                   "{tmp}/./wide.zarr/", "--overwrite"],
                                  ("--out {tmp}/./wide.zarr/ and INPUT {tmp}/wide.zarr name "
                                   "the same place: the output would replace what the command "
                                   "reads")),
    "denoise: --out at MODEL": (["denoise", "{tmp}/model.zarr", "{tmp}/data.zarr", "--component",
                                 "X", "--out", "{tmp}/model.zarr", "--overwrite"],
                                "--out {tmp}/model.zarr and MODEL {tmp}/model.zarr name the same"),
    "fit: --out at INPUT's component": (["fit", "{tmp}/data.zarr", "--component", "X", "--out",
                                         "{tmp}/data.zarr/X", "--overwrite"],
                                        "and INPUT {tmp}/data.zarr --component X name the same"),
    "fit: --out over INPUT": (["fit", "{tmp}/data.zarr", "--component", "X", "--out",
                               "{tmp}/data.zarr", "--overwrite"], "name one inside the other"),
    "fields: --out at INPUT": (["fields", "{tmp}/data.zarr", "--out", "{tmp}/data.zarr",
                                "--overwrite"], "and INPUT {tmp}/data.zarr name the same"),
    "select: table at INPUT": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                                "{tmp}/p.png", "--table", "{tmp}/data.zarr", "--overwrite"],
                               "--table {tmp}/data.zarr and INPUT {tmp}/data.zarr --component X"),
    "select: plot format": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                             "{tmp}/sel.xyz"],
                            "--plot {tmp}/sel.xyz: matplotlib cannot write .xyz figures"),
    "select: icf-tol without icf": (["select", "{tmp}/data.zarr", "--component", "X", "--plot",
                                     "{tmp}/p.png", "--icf-tol", "0.1"],
                                    "--icf-tol applies to --training icf, not --training random"),
    "fit: learned pre-image without its fit": (["fit", "{tmp}/data.zarr", "--component", "X",
                                                "--out", "{tmp}/m.zarr", "--preimage",
                                                "learned"],
                                               "--preimage learned needs --fit-inverse-transform"),
    "fields: learned pre-image without its fit": (["fields", "{tmp}/data.zarr", "--out",
                                                   "{tmp}/r.zarr", "--method", "kpca",
                                                   "--preimage", "learned"],
                                                  "--preimage learned needs"),
    "fit: fixed-point pre-image of a poly kernel": (["fit", "{tmp}/data.zarr", "--component",
                                                     "X", "--out", "{tmp}/m.zarr", "--kernel",
                                                     "poly", "--preimage", "fixed_point"],
                                                    "--preimage fixed_point needs the rbf"),
    "fit: alpha without the learned pre-image": (["fit", "{tmp}/data.zarr", "--component", "X",
                                                  "--out", "{tmp}/m.zarr", "--alpha", "0.5"],
                                                 "--alpha is the learned pre-image's ridge"),
    "demo: folder that cannot be made": (["demo", "--out", "/proc/demo"],
                                         "--out: cannot write /proc/demo"),
}


@pytest.mark.parametrize("case", EARLY)
def test_user_errors_are_found_before_the_cluster_starts(case, saved_model, tmp_path, capsys,
                                                         monkeypatch):
    import dkpca.cluster

    def no_cluster(*args, **kwargs):
        raise AssertionError("the cluster started before the error was found")

    monkeypatch.setattr(dkpca.cluster, "connect", no_cluster)
    field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
                         dims=("time", "lat", "lon"))
    dkpca.save(dkpca.xarray.FieldModel(dkpca.PCA(2), "time").fit(field), tmp_path / "field.zarr")
    argv, message = EARLY[case]
    before = _snapshot(tmp_path)
    status = main([arg.format(tmp=tmp_path) for arg in argv] + ["--quiet"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("dkpca: error: "), captured.err
    assert message.format(tmp=tmp_path) in lines[0]
    assert _snapshot(tmp_path) == before


def test_bad_memory_limit_names_the_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "x.zarr", "--out", "m.zarr", "--memory-limit", "bogus"])
    assert exit_.value.code == 2
    assert "argument --memory-limit: must be auto or a size" in capsys.readouterr().err


def test_fit_offers_every_registered_kernel(capsys):
    from dkpca.kernels._base import _REGISTRY, SumKernel

    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    usage = capsys.readouterr().out
    # a sum needs its parts; the command fits data, never a kernel matrix
    kernels = {name for name in _REGISTRY if name not in (SumKernel.name, "precomputed")}
    assert len(kernels) >= 9
    for name in kernels:
        assert name in usage


@pytest.mark.distributed
def test_the_next_command_select_prints_runs(tmp_path, capsys):
    import shlex

    from dkpca.datasets import make_semicircles

    X, _, _ = make_semicircles(200, random_state=0)
    folder = tmp_path / "two arrays"  # a space, quoted in the printed command
    group = zarr.open_group(folder / "data.zarr", mode="w")
    group.create_array("X", data=X, chunks=(100, 2), dimension_names=("time", "feature"))
    group.create_array("noise", data=np.ones((200, 3)), dimension_names=("time", "feature"))
    assert main(["select", str(folder / "data.zarr"), "--component", "X", "--sample-dim", "time",
                 "--storage-options", "{}", "--n-draws", "5", "--n-train", "80",
                 "--random-state", "0", "--plot", str(tmp_path / "p.png"), "--quiet",
                 *CLUSTER]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    command = summary.partition("; next: ")[2]
    assert command.startswith("dkpca fit ") and "--component X" in command
    argv = shlex.split(command.replace("MODEL.zarr", shlex.quote(str(tmp_path / "m.zarr"))))
    assert main([*argv[1:], "--quiet", *CLUSTER]) == 0
    assert dkpca.load(tmp_path / "m.zarr").n_features_in_ == 2


@pytest.mark.parametrize("summaries", [True, False], ids=["attributes", "bare"])
@pytest.mark.parametrize("estimator", ["PCA", "KernelPCA"])
def test_info_describes_a_saved_field_model(estimator, summaries, tmp_path, capsys,
                                            monkeypatch):
    from dkpca.xarray import FieldModel

    field = xr.DataArray(np.random.default_rng(0).normal(size=(30, 2, 3)),
                         dims=("time", "lat", "lon"), coords={"lat": [0.0, 30.0]}, name="sst")
    model = FieldModel(getattr(dkpca, estimator)(2), "time", weights="coslat").fit(field)
    dkpca.save(model, tmp_path / "field.zarr")
    if not summaries:  # a FieldModel without the estimator's summary attributes
        for name in ("n_features_in_", "n_components_", "explained_variance_ratio_",
                     "eigenvalues_", "kernel_", "solver_", "n_iter_", "n_samples_"):
            monkeypatch.delattr(FieldModel, name, raising=False)
    assert main(["info", str(tmp_path / "field.zarr")]) == 0
    out = capsys.readouterr().out
    assert "FieldModel" in out and "samples along time" in out
    assert "trained on: 30 samples x 6 features" in out
    assert out.strip().splitlines()[-1].startswith("FieldModel with 2 components")


@pytest.mark.distributed
def test_denoise_reports_unconverged_preimages_once_in_the_summary(tmp_path, capsys):
    from dkpca.datasets import make_semicircles

    X, _, _ = make_semicircles(300, random_state=0)
    zarr.create_array(tmp_path / "semi.zarr", data=X, chunks=(50, 2))  # 6 chunks
    dkpca.save(dkpca.KernelPCA(8, sigma2=2.0, preimage=FixedPoint(max_iter=1)).fit(X),
               tmp_path / "model.zarr")
    status = main(["denoise", str(tmp_path / "model.zarr"), str(tmp_path / "semi.zarr"),
                   "--out", str(tmp_path / "d.zarr"), "--quiet", *CLUSTER])
    captured = capsys.readouterr()
    assert status == 0
    summary = captured.out.strip().splitlines()[-1]
    assert re.search(r"; \d+ of 300 pre-images did not converge in 1 iterations", summary)
    assert "did not converge" not in captured.err


def test_the_fit_options_are_the_librarys():
    # One source of truth (issue 34): every model option of `dkpca fit` that names a
    # KernelPCA parameter offers exactly its values and defaults to its default, and every
    # solver option offers exactly the values of its options class's parameter.
    from dkpca import KernelPCA
    from dkpca.cli._arguments import SOLVER_FLAGS, build_parser
    from dkpca.kernels._base import _named_kernels
    from dkpca.options import SOLVERS

    (commands,) = (a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    actions = {a.option_strings[0]: a for a in commands.choices["fit"]._actions if a.option_strings}
    defaults = KernelPCA().get_params()
    checked = set()
    for action in actions.values():
        if action.dest not in defaults:
            continue
        checked.add(action.dest)
        if action.choices is not None:
            if action.dest == "kernel":
                assert set(action.choices) == set(_named_kernels()) - {"precomputed"}
                continue
            (options,) = (c for c in KernelPCA._parameter_constraints[action.dest]
                          if hasattr(c, "values"))
            assert set(action.choices) == set(options.values), action.dest
        if action.default is not None and action.dest != "fit_inverse_transform":
            assert action.default == defaults[action.dest], action.dest
    assert {"solver", "preimage", "kernel", "degree", "coef0", "alpha", "max_memory"} <= checked
    for flag, (solvers, param, _) in SOLVER_FLAGS.items():
        action = actions[flag]
        assert action.default is None  # refused, not ignored, where the solver lacks it
        for solver in solvers:
            cls = SOLVERS[solver]
            constraint = next(c for c in cls._parameter_constraints[param] if c is not None)
            if hasattr(constraint, "values"):
                assert set(action.choices) == set(constraint.values), flag
            else:
                assert action.type(3) == 3 and type(action.type("3")) is (
                    int if constraint.kind == "int" else float), flag
            default = cls().get_params()[param]
            assert default is None or f"default: {default}" in action.help, flag
    offered = {(solver, param) for solvers, param, _ in SOLVER_FLAGS.values()
               for solver in solvers}
    # the options the command does not offer, by choice: tuning of the iterations and
    # arrays (landmarks given as points), which a saved model or the library sets
    unoffered = {(name, param) for name, cls in SOLVERS.items() for param in cls().get_params()
                 } - offered
    assert unoffered == {("randomized", "tol"), ("randomized", "max_iter"),
                         ("randomized", "n_oversamples"), ("sketch", "n_hashes"),
                         ("sketch", "method"), ("sketch", "refine"), ("nystrom", "landmarks"),
                         ("nystrom", "method"), ("fixed_size", "entropy_gamma"),
                         ("fixed_size", "tol"), ("fixed_size", "max_iter")}


def test_a_solver_option_for_another_solver_is_refused(capsys):
    status = main(["fit", "in.zarr", "--out", "m.zarr", "--solver", "randomized",
                   "--n-landmarks", "50"])
    assert status == 2
    assert "--n-landmarks applies to --solver nystrom or fixed_size, not --solver randomized" \
        in capsys.readouterr().err


def test_the_kernel_choices_do_not_depend_on_what_was_imported(capsys):
    """'precomputed' joins the kernel registry when dkpca._precomputed is imported (the docs
    build imports everything): the command, which fits data, must never offer it."""
    import dkpca._precomputed  # noqa: F401 - registers "precomputed"
    from dkpca.cli._arguments import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["fit", "data.zarr", "--out", "m.zarr",
                                   "--kernel", "precomputed"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'precomputed'" in capsys.readouterr().err


def _no_cluster(monkeypatch):
    """Run the commands' computations on dask's local scheduler: no cluster starts."""
    import contextlib

    import dkpca.cli._commands
    import dkpca.cli._shared

    for module in (dkpca.cli._commands, dkpca.cli._shared):
        monkeypatch.setattr(module, "cluster", lambda options: contextlib.nullcontext())


@pytest.mark.parametrize("command", ["fit", "transform"])
def test_a_damaged_input_chunk_is_one_line_that_names_it(command, saved_model, tmp_path,
                                                         capsys, monkeypatch):
    """The codecs' error for a chunk they cannot decode (numcodecs' ``RuntimeError: Zstd
    decompression error``) ended the command with status 1 and a 93-line traceback."""
    _no_cluster(monkeypatch)
    data, out = tmp_path / "data.zarr", tmp_path / "out.zarr"
    (data / "X" / "c" / "2" / "0").write_bytes(b"garbage\n")
    argv = {"fit": ["fit", str(data), "--n-components", "2", "--solver", "exact"],
            "transform": ["transform", str(saved_model), str(data)]}[command]
    status = main([*argv, "--component", "X", "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith(f"dkpca: error: cannot read {data}/X/c/2/0, a chunk of the input")
    assert not out.exists() and captured.out == ""


def test_only_a_chunk_that_fails_on_its_own_is_named():
    """A read that fails for another reason than a chunk keeps its own error."""
    from dkpca.cli._reading import InputArray

    array = zarr.create_array("memory://test/reading.zarr", data=np.ones((4, 2)), chunks=(2, 2),
                              overwrite=True)
    wrapped = InputArray(array, "reading.zarr")
    np.testing.assert_array_equal(wrapped[1:3], array[1:3])
    with pytest.raises(IndexError) as error:  # out of bounds: nothing is damaged
        wrapped[(slice(0, 2), 5)]
    assert not isinstance(error.value, ValueError)


@pytest.mark.parametrize("damaged", ["zarr.json", "X/zarr.json"])
def test_damaged_input_metadata_names_the_file(damaged, store, tmp_path, capsys):
    import json

    path, _ = store
    (path / damaged).write_text("{bad json")
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads("{bad json")
    status = main(["fit", str(path), "--component", "X", "--out", str(tmp_path / "m.zarr"),
                   "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith(f"dkpca: error: {path}/{damaged} is not valid Zarr metadata "
                               f"({reference.value})")


def test_an_output_beside_the_input_in_its_group_is_not_refused(store):
    """The input is the array --component names: an output elsewhere in its group is allowed."""
    from argparse import Namespace

    from dkpca.cli._shared import check_outputs

    path, _ = store
    args = Namespace(input=str(path), component="X", overwrite=False, storage_options=None)
    check_outputs(args, {"--out": str(path / "scores.zarr")})


def test_sigterm_while_the_parser_is_built_is_an_interrupt(monkeypatch, capsys):
    """The handler was installed after the parser's imports: a SIGTERM then ended the command
    with status 143, not 130."""
    import os
    import signal
    import time

    import dkpca.cli._main

    def before_main(signum, frame):
        raise AssertionError("SIGTERM reached the handler that was there before main")

    def build_parser():
        os.kill(os.getpid(), signal.SIGTERM)  # what a batch system sends to stop a job
        time.sleep(10)  # the handler interrupts this
        raise AssertionError("SIGTERM did not interrupt the command")

    monkeypatch.setattr(dkpca.cli._main, "build_parser", build_parser)
    previous = signal.signal(signal.SIGTERM, before_main)
    try:
        status = main(["info", "model.zarr"])
        assert signal.getsignal(signal.SIGTERM) is before_main  # restored
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert status == 130
    assert capsys.readouterr().err.strip() == "dkpca: interrupted; no output was written"


def _interrupted_at_shutdown(module, monkeypatch):
    """Ctrl-C as the embedded cluster shuts down, once the command's work in it is done."""
    real = module.cluster

    @contextlib.contextmanager
    def cluster(options):
        with real(options):
            yield
            raise KeyboardInterrupt

    monkeypatch.setattr(module, "cluster", cluster)


@pytest.mark.distributed
def test_an_interrupt_after_the_outputs_are_written_names_them(store, tmp_path, monkeypatch,
                                                               capsys):
    """The outputs written whole stay, and the message says so: it said "no output was
    written" beside a complete model."""
    import dkpca.cli._commands
    import dkpca.cli._main
    import dkpca.cli._shared

    path, X = store
    model_path, scores_path = tmp_path / "model.zarr", tmp_path / "scores.zarr"
    fit = ["fit", str(path), "--component", "X", "--out", str(model_path), "--n-components",
           "2", "--gamma", "0.2", "--solver", "exact", "--quiet", *CLUSTER]
    _interrupted_at_shutdown(dkpca.cli._commands, monkeypatch)
    assert main(fit) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"dkpca: interrupted; written before it, whole: {model_path}")
    model = dkpca.load(model_path)
    assert model.n_components_ == 2

    _interrupted_at_shutdown(dkpca.cli._shared, monkeypatch)  # transform writes in _shared
    assert main(["transform", str(model_path), str(path), "--component", "X", "--out",
                 str(scores_path), "--quiet", *CLUSTER]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"dkpca: interrupted; written before it, whole: {scores_path}")
    scores = xr.open_zarr(scores_path, consolidated=False).scores.values
    np.testing.assert_allclose(scores, model.transform(X), atol=1e-10)

    def build_parser():
        raise KeyboardInterrupt

    monkeypatch.setattr(dkpca.cli._main, "build_parser", build_parser)
    assert main(["info", str(model_path)]) == 130  # the next command's record starts empty
    assert capsys.readouterr().err.strip() == "dkpca: interrupted; no output was written"


@pytest.mark.distributed
def test_an_interrupt_while_the_cluster_starts_closes_it_and_its_workers(monkeypatch):
    """Interrupted while starting, LocalCluster held a worker it had created but not yet listed;
    distributed's exit hook then failed on it (``AssertionError: Status.init``)."""
    import contextlib

    from distributed import LocalCluster, Worker
    from distributed.core import Status

    import dkpca.cluster
    from dkpca.cli._shared import cluster

    started = {}

    @contextlib.contextmanager
    def interrupted_start(**options):
        local = LocalCluster(n_workers=0, processes=False, dashboard_address=":0")

        async def create_worker():  # as the start does; the interrupt comes before it is awaited
            worker = Worker(local.scheduler.address, nthreads=1)
            local._created.add(worker)
            return worker

        started["cluster"], started["worker"] = local, local.sync(create_worker)
        raise KeyboardInterrupt  # what the SIGTERM handler raises
        yield  # pragma: no cover

    monkeypatch.setattr(dkpca.cluster, "connect", interrupted_start)
    with pytest.raises(KeyboardInterrupt), cluster({"scheduler": None}):
        pass  # pragma: no cover
    assert started["worker"].status == Status.closed
    assert started["cluster"].status == Status.closed


def test_an_indefinite_kernel_is_said_so_rather_than_a_share_over_100_percent(
        store, tmp_path, capsys, monkeypatch):
    """A sigmoid kernel's leading eigenvalues exceed its trace: the summary said "3 components
    explaining 127.1% of the variance"."""
    _no_cluster(monkeypatch)
    path, X = store
    reference = dkpca.KernelPCA(3, kernel="sigmoid", gamma=0.2, solver="exact").fit(X)
    assert reference.explained_variance_ratio_.sum() > 1  # the case this test is about
    model = tmp_path / "sigmoid.zarr"
    assert main(["fit", str(path), "--component", "X", "--out", str(model), "--kernel",
                 "sigmoid", "--gamma", "0.2", "--n-components", "3", "--solver", "exact",
                 "--quiet"]) == 0
    assert main(["info", str(model), "--quiet"]) == 0
    fitted_line, info_line = capsys.readouterr().out.strip().splitlines()
    said = "3 components (the kernel is indefinite: their shares of its trace exceed 100%)"
    assert said in fitted_line and info_line == f"KernelPCA with {said}"
    assert "of the variance" not in fitted_line
