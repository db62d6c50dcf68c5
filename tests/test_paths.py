"""Every reader and writer classifies its path first: missing, Zarr store, file, folder, other.

Readers (``dkpca.load``, ``io.open_zarr`` and so every estimator's Zarr input, the commands'
inputs) refuse anything but a complete Zarr store with one clear error. Writers
(``dkpca.save``, ``io.write_file``, ``io.atomic_group``, every command's outputs) write where
nothing is, replace a store, a file or an empty folder with ``overwrite`` and refuse without it,
and never replace a folder of something else or a device, nor start work where they cannot
write.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

import dkpca
from dkpca.cli import main
from dkpca.io import NotAZarrStoreError, as_dask, atomic_group, open_zarr, write_file

X = np.random.default_rng(0).normal(size=(60, 3))
LOCAL = ["--workers", "1", "--threads-per-worker", "1"]


def _make(kind, path):
    """Put a ``kind`` of thing at ``path``; return the path to give the reader or writer."""
    if kind == "zarr":
        zarr.open_group(path, mode="w").create_array("X", data=X)
    elif kind == "file":
        path.write_text("not a store")
    elif kind == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("someone else's")
    elif kind == "empty folder":
        path.mkdir()
    elif kind == "device":
        return "/dev/null"
    return str(path)


@pytest.fixture(scope="module")
def model():
    return dkpca.KernelPCA(2, solver="exact").fit(X)


# -- readers -------------------------------------------------------------------------------

READERS = {
    "dkpca.load": dkpca.load,
    "io.open_zarr": open_zarr,
    "io.as_dask": as_dask,
    "KernelPCA.fit": lambda path: dkpca.KernelPCA(2).fit(path),
}
NOT_A_STORE = {"file": "is a file, not a Zarr store", "folder": "is a folder, not a Zarr store",
               "empty folder": "is a folder, not a Zarr store",
               "device": "neither a file nor a folder"}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", ["missing", *NOT_A_STORE])
def test_a_reader_names_what_is_there(tmp_path, reader, kind):
    path = _make(kind, tmp_path / "input")
    expected = FileNotFoundError if kind == "missing" else NotAZarrStoreError
    with pytest.raises(expected) as info:
        READERS[reader](path)
    message = NOT_A_STORE.get(kind, "no saved model at" if reader == "dkpca.load" else "no Zarr array or group at")
    assert message in str(info.value) and path in str(info.value)


@pytest.mark.parametrize("kind", ["missing", "file", "folder"])
def test_a_command_input_that_is_not_a_store_is_one_line_and_status_2(tmp_path, kind, capfd):
    path = _make(kind, tmp_path / "input")
    status = main(["fit", path, "--out", str(tmp_path / "m.zarr"), "--quiet", *LOCAL])
    err = capfd.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert err[0].startswith("dkpca: error:") and path in err[0]
    assert not (tmp_path / "m.zarr").exists()


# -- writers -------------------------------------------------------------------------------

def _save(model, path, overwrite):
    dkpca.save(model, path, overwrite=overwrite)
    assert isinstance(dkpca.load(path), dkpca.KernelPCA)


def _write_file(model, path, overwrite):
    write_file(path, b"figure", overwrite=overwrite)
    with open(path, "rb") as written:
        assert written.read() == b"figure"


def _atomic_group(model, path, overwrite):
    with atomic_group(path, attributes={"a": 1}, overwrite=overwrite) as group:
        group.create_array("x", data=np.arange(3.0))
    assert zarr.open_group(path, mode="r").attrs["a"] == 1


WRITERS = {"dkpca.save": _save, "io.write_file": _write_file, "io.atomic_group": _atomic_group}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("kind", ["zarr", "file", "empty folder"])
def test_a_writer_replaces_a_result_only_with_overwrite(tmp_path, model, writer, kind):
    path = _make(kind, tmp_path / "out")
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        WRITERS[writer](model, path, overwrite=False)
    WRITERS[writer](model, path, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary left beside it


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_writes_where_nothing_is(tmp_path, model, writer):
    WRITERS[writer](model, str(tmp_path / "out"), overwrite=False)


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_writer_never_replaces_a_folder_of_something_else(tmp_path, model, writer, overwrite):
    path = _make("folder", tmp_path / "out")
    with pytest.raises(FileExistsError):
        WRITERS[writer](model, path, overwrite=overwrite)
    assert (tmp_path / "out" / "notes.txt").read_text() == "someone else's"


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_never_replaces_a_device(model, writer):
    with pytest.raises(FileExistsError, match="neither a file nor a folder"):
        WRITERS[writer](model, "/dev/null", overwrite=True)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_checks_its_folder_first(tmp_path, model, writer):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileNotFoundError, match="is a file, not a folder"):
        WRITERS[writer](model, str(tmp_path / "afile" / "out"), overwrite=True)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        WRITERS[writer](model, str(tmp_path / "nowhere" / "out"), overwrite=True)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_finds_an_unwritable_folder_before_writing(model, writer):
    with pytest.raises(PermissionError, match="is not writable"):
        WRITERS[writer](model, "/proc/out.zarr", overwrite=False)


# -- the commands' outputs -----------------------------------------------------------------

@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.zarr"
    zarr.open_group(path, mode="w").create_array("X", data=X, chunks=(30, 3))
    return str(path)


@pytest.mark.parametrize("kind", ["zarr", "file", "empty folder"])
def test_fit_out_replaces_with_overwrite_and_refuses_without(tmp_path, data, kind, capfd):
    out = _make(kind, tmp_path / "m.zarr")
    command = ["fit", data, "--out", out, "--n-components", "2", "--solver", "exact", *LOCAL]
    assert main(command) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exists; pass overwrite=True (--overwrite)" in err[0]
    assert main([*command, "--overwrite", "--quiet"]) == 0
    assert dkpca.load(out).n_components_ == 2


@pytest.mark.parametrize("out", ["folder", "unwritable", "parent is a file", "device"])
def test_fit_refuses_an_output_before_any_work(tmp_path, data, out, capfd):
    destination = {"folder": lambda: _make("folder", tmp_path / "m.zarr"),
                   "unwritable": lambda: "/proc/m.zarr",
                   "parent is a file": lambda: _make("file", tmp_path / "f") + "/m.zarr",
                   "device": lambda: "/dev/null"}[out]()
    status = main(["fit", data, "--out", destination, "--overwrite", "--quiet", *LOCAL])
    captured = capfd.readouterr()
    err = captured.err.strip().splitlines()
    assert status == 2 and len(err) == 1 and destination in err[0], captured.err
    assert "dashboard" not in captured.err  # refused before the cluster started


@pytest.mark.slow  # .ci/run runs `make run` twice and checks the same on every CI run
def test_make_run_twice_replaces_the_figures(tmp_path):
    """What ``make run`` does, twice in one folder: the second run replaces each figure."""
    out = tmp_path / "demo-output"
    command = [sys.executable, "-m", "dkpca", "demo", "--out", str(out), "--n-samples", "300",
               "--n-draws", "5", "--quiet", *LOCAL]
    first = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stderr
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert sorted(before) == ["denoise-rings.png", "kpca-rings.png", "model-selection.png"]
    second = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert second.returncode == 0, second.stderr
    after = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert sorted(after) == sorted(before)
    assert all(after[name] != before[name] for name in before)
