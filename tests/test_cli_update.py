"""``dkpca update MODEL NEW``: partial_fit from the command line, the model written atomically."""

import numpy as np
import pytest
import xarray as xr
import zarr

import dkpca
import dkpca.cluster
import dkpca.persistence
from dkpca.cli import main
from dkpca.io import Location
from dkpca.options import FixedSize, Nystrom

CLUSTER = ["--workers", "1", "--threads-per-worker", "1"]
GAMMA = 0.1


@pytest.fixture
def data(tmp_path):
    """600 correlated rows off the origin; the last 200 are ``new.zarr`` (4 chunks)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 5)) @ rng.normal(size=(5, 5)) + 3.0
    zarr.create_array(tmp_path / "new.zarr", data=X[400:], chunks=(50, 5))
    return X


def _files(folder):
    """Every file under ``folder`` with its bytes: a model left untouched compares equal."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def _same_up_to_sign(scores, reference):
    signs = np.sign(np.sum(scores * reference, axis=0))
    np.testing.assert_allclose(scores * signs, reference, atol=1e-8 * np.abs(reference).max())


@pytest.mark.distributed
def test_update_of_a_pca_model_equals_a_fit_on_all_rows(data, tmp_path, capsys):
    X, model = data, tmp_path / "pca.zarr"
    dkpca.save(dkpca.PCA(3).fit(X[:400]), model)
    status = main(["update", str(model), str(tmp_path / "new.zarr"), *CLUSTER])
    out = capsys.readouterr().out
    assert status == 0
    assert "component  eigenvalue  variance" in out  # the table, as fit prints it
    summary = out.strip().splitlines()[-1]
    assert summary.startswith(f"updated PCA (covariance) with 200 rows of {tmp_path}/new.zarr: "
                              f"600 rows seen, 3 components explaining ")
    assert summary.endswith(f"; model: {model}")
    updated, whole = dkpca.load(model), dkpca.PCA(3).fit(X)
    assert updated.n_samples_seen_ == 600 and updated.row_statistics_.count == 600
    np.testing.assert_allclose(updated.explained_variance_, whole.explained_variance_,
                               rtol=1e-10)
    _same_up_to_sign(updated.transform(X), whole.transform(X))
    assert _names(tmp_path) == ["new.zarr", "pca.zarr"]  # replaced in place, nothing beside


@pytest.mark.distributed
@pytest.mark.parametrize("options", [Nystrom, FixedSize], ids=["nystrom", "fixed_size"])
def test_update_of_a_kernel_pca_model_to_out_equals_a_fit_on_all_rows(options, data, tmp_path,
                                                                      capsys):
    X, model, out = data, tmp_path / "kpca.zarr", tmp_path / "updated.zarr"
    solver = options.name
    first = dkpca.KernelPCA(3, gamma=GAMMA, solver=options(n_landmarks=40),
                            random_state=0).fit(X[:400])
    dkpca.save(first, model)
    before = _files(model)
    status = main(["update", str(model), str(tmp_path / "new.zarr"), "--out", str(out),
                   "--quiet", *CLUSTER])
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 0 and len(lines) == 1  # --quiet: the summary only
    assert lines[0].startswith(f"updated RBF(gamma={GAMMA}) kernel PCA ({solver}) with 200 rows")
    assert "600 rows seen, 3 components" in lines[0] and lines[0].endswith(f"; model: {out}")
    # --out leaves MODEL as it was, byte for byte
    assert _files(model) == before
    np.testing.assert_array_equal(dkpca.load(model).transform(X), first.transform(X))
    updated = dkpca.load(out)
    # the same landmarks given: a Nystrom fit (fixed-size only chooses its landmarks otherwise)
    whole = dkpca.KernelPCA(3, gamma=GAMMA, solver=Nystrom(landmarks=first.landmarks_)).fit(X)
    assert updated.n_samples_seen_ == 600
    np.testing.assert_array_equal(updated.landmarks_, first.landmarks_)
    np.testing.assert_allclose(updated.eigenvalues_, whole.eigenvalues_, rtol=1e-10)
    _same_up_to_sign(updated.transform(X), whole.transform(X))


def _format_2_model(X, path, monkeypatch):
    """A Nyström model as dkpca wrote it before row statistics were kept (model format 2)."""
    model = dkpca.KernelPCA(2, gamma=GAMMA, solver=Nystrom(n_landmarks=30),
                            random_state=0).fit(X[:400])
    del model.row_statistics_, model.n_samples_seen_
    with monkeypatch.context() as patch:
        patch.setattr(dkpca.persistence, "FORMAT_VERSION", 2)
        dkpca.save(model, path)


def _field_model(X, path, monkeypatch):
    field = xr.DataArray(X[:30].reshape(30, 5, 1), dims=("time", "lat", "lon"))
    dkpca.save(dkpca.xarray.FieldModel(dkpca.PCA(2), "time").fit(field), path)


#: How each saved model of the error cases is made (all from the first 400 rows).
MODELS = {
    "pca.zarr": lambda X, path, _: dkpca.save(dkpca.PCA(2).fit(X[:400]), path),
    "exact.zarr": lambda X, path, _: dkpca.save(
        dkpca.KernelPCA(2, gamma=GAMMA, solver="exact").fit(X[:400]), path),
    "gram.zarr": lambda X, path, _: dkpca.save(dkpca.PCA(2, solver="gram").fit(X[:400]), path),
    # solver="auto" keeps partial_fit, but took the gram solver (fewer rows than features)
    "auto-gram.zarr": lambda X, path, _: dkpca.save(dkpca.PCA(2).fit(X[:4]), path),
    "extension.zarr": lambda X, path, _: dkpca.save(
        dkpca.KernelPCA(2, gamma=GAMMA, solver=Nystrom(n_landmarks=30, method="extension"),
                        random_state=0).fit(X[:400]), path),
    "v2.zarr": _format_2_model,
    "field.zarr": _field_model,
}

#: argv (``{tmp}``: the test's folder) -> what the one line of the error says.
ERRORS = {
    "missing model": (["{tmp}/none.zarr", "{tmp}/new.zarr"], "no saved model at"),
    "not a model": (["{tmp}/new.zarr", "{tmp}/new.zarr"],
                    "is a Zarr array, not a saved dkpca model"),
    "missing input": (["{tmp}/pca.zarr", "{tmp}/none.zarr"], "no Zarr array or group at"),
    "wrong number of features": (["{tmp}/pca.zarr", "{tmp}/wide.zarr"],
                                 "X has 7 features, but PCA is expecting 5 features"),
    "kernel solver that cannot continue": (
        ["{tmp}/exact.zarr", "{tmp}/new.zarr"],
        "KernelPCA: partial_fit needs solver='nystrom' or 'fixed_size'"),
    "linear solver that cannot continue": (["{tmp}/gram.zarr", "{tmp}/new.zarr"],
                                           "PCA: partial_fit needs solver='covariance'"),
    "Nystrom eigen-extension": (["{tmp}/extension.zarr", "{tmp}/new.zarr"],
                                "partial_fit needs Nystrom(method='feature_map')"),
    "fitted without statistics": (["{tmp}/auto-gram.zarr", "{tmp}/new.zarr"],
                                  "fitted by solver='gram', which keeps no row statistics"),
    "saved in format 2": (["{tmp}/v2.zarr", "{tmp}/new.zarr"],
                          "was saved in model format 2, before dkpca kept the row statistics"),
    "field model": (["{tmp}/field.zarr", "{tmp}/new.zarr"],
                    "holds a FieldModel (from dkpca fields)"),
    "existing out": (["{tmp}/pca.zarr", "{tmp}/new.zarr", "--out", "{tmp}/exact.zarr"],
                     "--out: "),
    "out at NEW": (["{tmp}/pca.zarr", "{tmp}/new.zarr", "--out", "{tmp}/./new.zarr",
                    "--overwrite"],
                   "name the same place: the output would replace what the command reads"),
    "scheduler with workers": (["{tmp}/pca.zarr", "{tmp}/new.zarr", "--scheduler",
                                "tcp://127.0.0.1:1", "--workers", "2"],
                               "--workers apply to the embedded cluster"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_refusals_exit_2_with_one_line_before_the_cluster_starts(case, data, tmp_path, capsys,
                                                                 monkeypatch):
    argv, message = ERRORS[case]
    for name, make in MODELS.items():  # the models this case names
        if any(arg == f"{{tmp}}/{name}" for arg in argv):
            make(data, tmp_path / name, monkeypatch)
    zarr.create_array(tmp_path / "wide.zarr", data=np.ones((10, 7)))

    def no_cluster(*args, **kwargs):
        raise AssertionError("the cluster started before the error was found")

    monkeypatch.setattr(dkpca.cluster, "connect", no_cluster)
    before = _files(tmp_path)
    status = main(["update", *(arg.format(tmp=tmp_path) for arg in argv), "--quiet"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("dkpca: error: "), captured.err
    assert message in lines[0]
    assert captured.out == ""
    assert _files(tmp_path) == before  # every model as it was, nothing beside


def test_a_field_model_refusal_says_what_to_do(data, tmp_path, capsys, monkeypatch):
    _field_model(data, tmp_path / "field.zarr", monkeypatch)
    assert main(["update", str(tmp_path / "field.zarr"), str(tmp_path / "new.zarr")]) == 2
    line = capsys.readouterr().err.strip()
    if hasattr(dkpca.load(tmp_path / "field.zarr"), "partial_fit"):  # the Python API can
        assert "FieldModel.partial_fit" in line
    else:
        assert "dkpca update does not support" in line


def _interrupt_while_sealing(monkeypatch, model):
    """Ctrl-C once the new model's arrays are written beside MODEL, before its description."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(dkpca.persistence, "_seal", interrupted)


def _interrupt_while_renaming(monkeypatch, model):
    """Ctrl-C between the renames: MODEL moved aside, the new model not yet in its place."""
    move_to = Location.move_to

    def interrupted(location, destination):
        if destination.store == str(model) and ".dkpca-tmp-" in location.store:
            raise KeyboardInterrupt
        move_to(location, destination)

    monkeypatch.setattr(Location, "move_to", interrupted)


@pytest.mark.distributed
@pytest.mark.parametrize("interrupt", [_interrupt_while_sealing, _interrupt_while_renaming],
                         ids=["sealing", "renaming"])
def test_an_interrupted_update_leaves_the_old_model_intact(interrupt, data, tmp_path, capsys,
                                                           monkeypatch):
    X, model = data, tmp_path / "kpca.zarr"
    dkpca.save(dkpca.KernelPCA(3, gamma=GAMMA, solver=Nystrom(n_landmarks=40),
                               random_state=0).fit(X[:400]), model)
    before, scores = _files(model), dkpca.load(model).transform(X)
    interrupt(monkeypatch, model)
    status = main(["update", str(model), str(tmp_path / "new.zarr"), "--quiet", *CLUSTER])
    monkeypatch.undo()
    assert status == 130
    assert capsys.readouterr().err.strip().endswith("dkpca: interrupted; no output was written")
    assert _files(model) == before
    old = dkpca.load(model)
    assert old.n_samples_seen_ == 400
    np.testing.assert_array_equal(old.transform(X), scores)
    assert _names(tmp_path) == ["kpca.zarr", "new.zarr"]  # no temporary left beside it


@pytest.mark.distributed
def test_bad_new_rows_found_by_the_update_leave_the_model_intact(data, tmp_path, capsys):
    X, model = data.copy(), tmp_path / "pca.zarr"
    dkpca.save(dkpca.PCA(2).fit(X[:400]), model)
    X[450, 2] = np.nan
    zarr.create_array(tmp_path / "nan.zarr", data=X[400:], chunks=(50, 5))
    before = _files(model)
    status = main(["update", str(model), str(tmp_path / "nan.zarr"), "--quiet", *CLUSTER])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("dkpca: error: ")
    assert _files(model) == before
    assert _names(tmp_path) == ["nan.zarr", "new.zarr", "pca.zarr"]
