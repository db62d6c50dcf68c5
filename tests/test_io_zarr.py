"""Atomic Zarr output: a destination is complete or untouched, never half-written."""

import os

import dask.array as da
import fsspec
import numpy as np
import pytest
import zarr

from dkpca.blocked import compute
from dkpca.io import Location, atomic_group, check_destination, store_array


class Boom(RuntimeError):
    pass


def _entries(folder) -> list[str]:
    return sorted(os.listdir(folder))


def _failing_blocks(x: da.Array, bad_block: int) -> da.Array:
    def fail_on(block, block_info=None):
        if block_info[0]["chunk-location"][0] == bad_block:
            raise Boom("worker failed part-way through the write")
        return block

    return x.map_blocks(fail_on, dtype=x.dtype)


def test_success_writes_arrays_and_attributes(tmp_path):
    target = tmp_path / "out.zarr"
    with atomic_group(target, attributes={"kernel": {"name": "rbf"}}) as group:
        pending = store_array(group, "scores", da.arange(12.0, chunks=5).reshape(6, 2),
                              dimension_names=("time", "component"))
        store_array(group, "eigenvalues", np.array([2.0, 1.0]))
        assert not target.exists()  # nothing at the destination until the block ends
        compute(pending)
    result = zarr.open_group(target, mode="r")
    np.testing.assert_array_equal(result["scores"][:], np.arange(12.0).reshape(6, 2))
    assert result["scores"].metadata.dimension_names == ("time", "component")
    assert result.attrs["kernel"] == {"name": "rbf"}
    assert _entries(tmp_path) == ["out.zarr"]


@pytest.mark.parametrize("interrupt", [Boom, KeyboardInterrupt])
def test_interrupted_write_leaves_no_destination_and_no_leftovers(tmp_path, interrupt):
    target = tmp_path / "out.zarr"
    scores = da.ones((40, 3), chunks=(10, 3))
    with pytest.raises(interrupt), atomic_group(target) as group:
        pending = store_array(group, "scores", _failing_blocks(scores, bad_block=2))
        if interrupt is KeyboardInterrupt:
            raise KeyboardInterrupt
        compute(pending)
    assert _entries(tmp_path) == []


def test_failed_overwrite_keeps_the_previous_version(tmp_path):
    target = tmp_path / "out.zarr"
    with atomic_group(target, attributes={"version": 1}) as group:
        store_array(group, "x", np.zeros(3))
    with pytest.raises(Boom), atomic_group(target, overwrite=True) as group:
        compute(store_array(group, "x", _failing_blocks(da.ones(30, chunks=10), 1)))
    kept = zarr.open_group(target, mode="r")
    assert kept.attrs["version"] == 1 and list(kept["x"][:]) == [0.0, 0.0, 0.0]
    assert _entries(tmp_path) == ["out.zarr"]
    with atomic_group(target, attributes={"version": 2}, overwrite=True) as group:
        store_array(group, "y", np.ones(2))
    replaced = zarr.open_group(target, mode="r")
    assert replaced.attrs["version"] == 2 and sorted(replaced.array_keys()) == ["y"]
    assert _entries(tmp_path) == ["out.zarr"]


def test_existing_destination_is_refused_before_anything_is_written(tmp_path):
    target = tmp_path / "out.zarr"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=True"), atomic_group(target):
        pytest.fail("the block must not run")
    assert _entries(target) == ["keep.txt"] and _entries(tmp_path) == ["out.zarr"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_destination(tmp_path / "no-such-folder" / "out.zarr")


def test_memory_url_is_atomic_too():
    url = "memory://atomic-test/out.zarr"
    Location(url).remove()
    with pytest.raises(Boom), atomic_group(url) as group:
        compute(store_array(group, "x", _failing_blocks(da.ones((20, 2), chunks=5), 3)))
    assert not Location(url).exists()
    assert fsspec.filesystem("memory").find("/atomic-test") == []  # no temporary leftovers
    with atomic_group(url, attributes={"ok": True}) as group:
        compute(store_array(group, "x", da.ones((20, 2), chunks=5)))
    assert zarr.open_group(url, mode="r").attrs["ok"] is True


def test_store_array_regularises_chunks(tmp_path):
    x = da.from_array(np.arange(30.0).reshape(15, 2), chunks=((4, 6, 5), 2))
    with atomic_group(tmp_path / "r.zarr") as group:
        compute(store_array(group, "x", x))
    stored = zarr.open_array(tmp_path / "r.zarr" / "x", mode="r")
    assert stored.chunks == (6, 2)
    np.testing.assert_array_equal(stored[:], np.arange(30.0).reshape(15, 2))


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_rename_never_replaces_what_another_writer_put_there(tmp_path, kind):
    from dkpca.io import Location

    temp, target = tmp_path / ".out.tmp", tmp_path / "out"
    for path, text in ((temp, "mine"), (target, "theirs")):
        if kind == "folder":
            path.mkdir()
            (path / "zarr.json").write_text(text)
        else:
            path.write_text(text)
    with pytest.raises(FileExistsError, match="another writer was first"):
        Location(temp).move_to(Location(target))
    theirs = target / "zarr.json" if kind == "folder" else target
    assert theirs.read_text() == "theirs" and temp.exists()


# --- object stores: no rename, so a completion marker (dkpca.io._completion) -----------------


def _memory_result(name: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs = fsspec.filesystem("memory")
    url = f"memory://object-store/{name}/out.zarr"
    with atomic_group(url, overwrite=True) as group:
        group.create_array("x", data=np.arange(6.0), chunks=(2,))
    return fs, url


def test_a_published_store_carries_no_marker():
    fs, url = _memory_result("published")
    assert not fs.exists(f"{url}/.dkpca-incomplete")
    assert zarr.open_group(url, mode="r")["x"][:].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_marked_store_is_refused_by_every_reader():
    import dkpca
    from dkpca.io import IncompleteResultError, as_dask, open_zarr
    from dkpca.io._writer import writer_token

    fs, url = _memory_result("marked")
    fs.pipe_file(f"{url}/.dkpca-incomplete", f'{{"writer": "{writer_token()}"}}'.encode())
    for read in (lambda: open_zarr(url), lambda: open_zarr(f"{url}/x"),
                 lambda: as_dask(url), lambda: dkpca.load(url)):
        with pytest.raises(IncompleteResultError, match="not a complete result"):
            read()
    # this process wrote the marker and is alive: the destination is not taken from it
    with pytest.raises(FileExistsError, match="being written by another writer"):
        check_destination(url, overwrite=True)


def test_an_abandoned_marked_store_is_swept_by_the_next_write(caplog):
    fs, url = _memory_result("abandoned")
    gone = "00000000-1-0"  # another host's writer that started in 1970
    fs.pipe_file(f"{url}/.dkpca-incomplete", f'{{"writer": "{gone}"}}'.encode())
    with atomic_group(url) as group:  # no overwrite needed: nothing complete was there
        group.create_array("y", data=np.ones(2))
    assert "removed the incomplete result" in caplog.text
    assert sorted(zarr.open_group(url, mode="r").array_keys()) == ["y"]


def test_a_failed_copy_leaves_no_destination(monkeypatch):
    fs = fsspec.filesystem("memory")
    url = "memory://object-store/failed-copy/out.zarr"

    def failing_copy(*args, **kwargs):
        raise Boom("the connection dropped mid-copy")

    monkeypatch.setattr(type(fs), "copy", failing_copy)
    with pytest.raises(Boom), atomic_group(url, overwrite=True) as group:
        group.create_array("x", data=np.ones(2))
    assert fs.find("/object-store/failed-copy") == []


def test_a_writer_whose_process_id_was_reused_is_gone(tmp_path, caplog):
    """A token naming a live process that started after the token's write began is abandoned
    (the ID was reused: a restarted container runs dkpca as the same process ID again)."""
    import psutil

    from dkpca.io._temporaries import sweep_stale_siblings, writer_gone
    from dkpca.io._writer import host_hash

    pid = os.getpid()
    born = psutil.Process(pid).create_time()
    earlier = f"{host_hash()}-{pid}-{int(born) - 30 * 86400}"  # 30 days before this process
    assert writer_gone(earlier, born) is not None
    assert writer_gone(f"{host_hash()}-{pid}-{int(born) + 1}", born) is None  # this one: alive

    fs, url = _memory_result("reused-pid")
    fs.pipe_file(f"{url}/.dkpca-incomplete", f'{{"writer": "{earlier}"}}'.encode())
    assert not check_destination(url, overwrite=True).exists()  # swept, not "being written"
    assert "removed the incomplete result" in caplog.text

    stale = tmp_path / f".out.zarr.dkpca-tmp-{earlier}-abcd1234"
    live = tmp_path / f".out.zarr.dkpca-tmp-{host_hash()}-{pid}-{int(born) + 1}-abcd1234"
    stale.mkdir()
    live.mkdir()
    assert sweep_stale_siblings(Location(tmp_path / "out.zarr")) == [str(stale)]
    assert live.is_dir()


def test_groups_are_zarr_v3_whatever_zarrs_default_format(tmp_path):
    """Dimension names (the command line's outputs) need v3: the group is v3 whatever zarr's
    default format."""
    with zarr.config.set({"default_zarr_format": 2}):
        with atomic_group(tmp_path / "out.zarr") as group:
            store_array(group, "x", np.ones((3, 2)), dimension_names=("sample", "feature"))
            compute(store_array(group, "y", da.ones((4, 2), chunks=2),
                                dimension_names=("sample", "component")))
        reopened = zarr.open_group(tmp_path / "out.zarr", mode="r")
        assert reopened.metadata.zarr_format == 3
        assert reopened["y"].metadata.dimension_names == ("sample", "component")


def test_store_array_refuses_unknown_chunk_sizes_with_the_fix():
    group = zarr.open_group("memory://io-zarr/unknown.zarr", mode="w")
    X = da.from_array(np.arange(40.0).reshape(20, 2), chunks=(7, 2))
    masked = X[X[:, 0] >= 10]
    with pytest.raises(ValueError, match=r"store_array: cannot store 'kept': .*unknown chunk "
                       r"sizes.*data = data\.compute_chunk_sizes\(\)"):
        store_array(group, "kept", masked)
    assert "kept" not in group  # refused before anything was created
    compute(store_array(group, "kept", masked.compute_chunk_sizes()))
    np.testing.assert_array_equal(group["kept"][:], X[X[:, 0] >= 10].compute())
