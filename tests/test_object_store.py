"""Results on an object store: whole or refused, swept after a killed writer, one writer wins.

Against a real S3-compatible HTTP server (moto's standalone server, a process of its own on
127.0.0.1) through s3fs, with real ``dkpca`` processes writing to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import s3fs
import zarr

import dkpca
from dkpca.io import IncompleteResultError, as_dask, open_zarr
from dkpca.options import Nystrom

TIMEOUT = 120.0
BUCKET = "results"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """Storage options of a fresh moto S3 server with an empty bucket ``results``."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert server.poll() is None, "the moto server did not start"
                assert time.monotonic() < deadline, "the moto server did not listen"
                time.sleep(0.1)
        options = {"key": "testing", "secret": "testing",
                   "endpoint_url": f"http://127.0.0.1:{port}"}
        s3fs.S3FileSystem(**options).mkdir(BUCKET)
        yield options
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A saved Nyström model, 20000 x 8 rows to project (10 chunks), and their projection."""
    folder = tmp_path_factory.mktemp("object-store")
    rng = np.random.default_rng(5)
    model = dkpca.KernelPCA(3, solver=Nystrom(n_landmarks=300), random_state=0)
    model.fit(rng.normal(size=(2_000, 8)))
    dkpca.save(model, folder / "model.zarr")
    X = rng.normal(size=(20_000, 8))
    zarr.create_array(folder / "X.zarr", data=X, chunks=(2_000, 8))
    return folder / "model.zarr", folder / "X.zarr", model.transform(X)


@pytest.fixture
def prefix(s3, request):
    """A fresh folder in the bucket for one test."""
    return f"{BUCKET}/{request.node.name.replace('[', '-').replace(']', '')}"


def _transform_argv(inputs, out: str, s3) -> list[str]:
    model, X, _ = inputs
    return ["dkpca", "transform", str(model), str(X), "--out", out, "--workers", "1",
            "--threads-per-worker", "1", "--storage-options", json.dumps(s3), "--quiet"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def _session_notice(line: str) -> bool:
    """aiohttp's notice when a worker exits with s3fs's session open (s3fs, not dkpca)."""
    return line == "Unclosed client session" or line.startswith("client_session: <aiohttp")


def _keys(s3, prefix: str) -> list[str]:
    fs = s3fs.S3FileSystem(**s3, skip_instance_cache=True)
    return sorted(key[len(prefix) + 1:] for key in fs.find(prefix))


def _scores(s3, url: str) -> np.ndarray:
    return as_dask(url, component="scores", storage_options=s3).compute()


@pytest.mark.slow  # 15 s; the rerun in the killed write below checks the same whole result
def test_a_complete_write_reads_back_whole(s3, inputs, prefix):
    url = f"s3://{prefix}/scores.zarr"
    result = _run(_transform_argv(inputs, url, s3))
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(_scores(s3, url), inputs[2], rtol=1e-10, atol=1e-12)
    keys = _keys(s3, prefix)
    # no temporary store, no completion marker: only the result
    assert all(key.startswith("scores.zarr/") for key in keys), keys
    assert "scores.zarr/.dkpca-incomplete" not in keys
    assert "scores.zarr/zarr.json" in keys


# The copy into place stops after half the keys, then waits to be killed.
_STALL_MID_COPY = """
import asyncio, runpy, sys
import s3fs

copy = s3fs.S3FileSystem._copy

async def stalling_copy(self, sources, destinations, **kwargs):
    if isinstance(sources, list) and len(sources) > 1:
        half = len(sources) // 2
        await copy(self, sources[:half], destinations[:half], **kwargs)
        print("mid-copy", flush=True)
        await asyncio.sleep(3600)
    return await copy(self, sources, destinations, **kwargs)

s3fs.S3FileSystem._copy = stalling_copy
sys.argv = {argv!r}
runpy.run_module("dkpca", run_name="__main__")
"""


def _killed_mid_copy(argv: list[str]) -> None:
    """Run ``argv`` in a process of its own, and SIGKILL it halfway through the final copy."""
    process = subprocess.Popen([sys.executable, "-c", _STALL_MID_COPY.format(argv=argv)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        line = process.stdout.readline()
        assert line.strip() == "mid-copy", process.communicate()[1][-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=TIMEOUT)
    assert process.returncode == -signal.SIGKILL


def test_a_write_killed_mid_copy_is_refused_then_swept(s3, inputs, prefix):
    url = f"s3://{prefix}/scores.zarr"
    argv = _transform_argv(inputs, url, s3)
    _killed_mid_copy(argv)
    keys = _keys(s3, prefix)
    assert "scores.zarr/.dkpca-incomplete" in keys
    assert any(key.startswith("scores.zarr/scores/c/") for key in keys)  # half copied

    # every reader refuses it: the library's, the command line's, and zarr sees no group
    with pytest.raises(IncompleteResultError, match="not a complete result"):
        _scores(s3, url)
    with pytest.raises(IncompleteResultError):
        open_zarr(f"{url}/scores", storage_options=s3)  # an array inside it too
    with pytest.raises(FileNotFoundError):
        zarr.open_group(url, mode="r", storage_options=s3)
    model, _, _ = inputs
    reader = _run(["dkpca", "transform", str(model), url, "--component", "scores", "--out",
                   f"s3://{prefix}/again.zarr", "--storage-options", json.dumps(s3)])
    assert reader.returncode == 2
    assert "not a complete result" in reader.stderr
    assert len([ln for ln in reader.stderr.strip().splitlines() if not _session_notice(ln)]) == 1

    # the same command again: both leftovers swept, the result whole, nothing else there
    rerun = _run(argv)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "removed the incomplete result" in rerun.stderr
    assert "removed the abandoned temporary" in rerun.stderr
    np.testing.assert_allclose(_scores(s3, url), inputs[2], rtol=1e-10, atol=1e-12)
    keys = _keys(s3, prefix)
    assert all(key.startswith("scores.zarr/") for key in keys), keys
    assert "scores.zarr/.dkpca-incomplete" not in keys


@pytest.mark.slow  # 23 s; the killed write of scores above checks the same refusal
def test_a_model_killed_mid_copy_is_refused_by_load(s3, inputs, prefix, tmp_path):
    _, X, _ = inputs
    url = f"s3://{prefix}/model.zarr"
    argv = ["dkpca", "fit", str(X), "--out", url, "--n-components", "2", "--solver", "nystrom",
            "--n-landmarks", "100", "--workers", "1", "--threads-per-worker", "1",
            "--storage-options", json.dumps(s3), "--quiet"]
    _killed_mid_copy(argv)
    with pytest.raises(IncompleteResultError, match="not a complete result"):
        dkpca.load(url, storage_options=s3)
    rerun = _run(argv)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert dkpca.load(url, storage_options=s3).n_components_ == 2


@pytest.mark.slow  # 15 s; tests/test_faults.py checks the same race on a local destination
def test_two_writers_to_one_object_store_destination(s3, inputs, prefix):
    """Started at once with the same --out: one wins, the other exits 2 with one line."""
    url = f"s3://{prefix}/scores.zarr"
    argv = [sys.executable, "-m", *_transform_argv(inputs, url, s3)]
    writers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    results = [(w.wait(timeout=TIMEOUT), w.communicate()[1]) for w in writers]
    assert sorted(status for status, _ in results) == [0, 2], results
    (loser,) = [err for status, err in results if status == 2]
    lines = [line for line in loser.strip().splitlines() if not _session_notice(line)]
    assert len(lines) == 1 and lines[0].startswith("dkpca: error: "), lines
    assert "another writer" in lines[0] or "already exists" in lines[0]
    np.testing.assert_allclose(_scores(s3, url), inputs[2], rtol=1e-10, atol=1e-12)
    keys = _keys(s3, prefix)
    assert all(key.startswith("scores.zarr/") for key in keys), keys


@pytest.mark.slow  # 21 s; the overwrite that keeps foreign keys checks the same swap
def test_an_overwrite_replaces_the_previous_result(s3, inputs, prefix):
    url = f"s3://{prefix}/scores.zarr"
    fs = s3fs.S3FileSystem(**s3, skip_instance_cache=True)
    fs.pipe_file(f"{prefix}/scores.zarr/zarr.json",
                 b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    fs.pipe_file(f"{prefix}/scores.zarr/stale-key", b"from an older result")
    refused = _run(_transform_argv(inputs, url, s3))
    assert refused.returncode == 2
    assert "already exists" in refused.stderr
    result = _run([*_transform_argv(inputs, url, s3), "--overwrite", "--debug"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "scores.zarr/stale-key" not in _keys(s3, prefix)
    np.testing.assert_allclose(_scores(s3, url), inputs[2], rtol=1e-10, atol=1e-12)


def test_an_overwrite_never_replaces_keys_that_are_not_a_zarr_store(s3, inputs, prefix):
    url = f"s3://{prefix}/scores.zarr"
    fs = s3fs.S3FileSystem(**s3, skip_instance_cache=True)
    fs.pipe_file(f"{prefix}/scores.zarr/someone-elses", b"not ours")
    refused = _run([*_transform_argv(inputs, url, s3), "--overwrite"])
    assert refused.returncode == 2 and "is a folder that is not a Zarr store" in refused.stderr
    assert "scores.zarr/someone-elses" in _keys(s3, prefix)



def _without_aws_environment() -> dict[str, str]:
    """This environment without ambient AWS settings: only --storage-options can reach moto."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    return {**env, "AWS_MAX_ATTEMPTS": "1", "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.mark.slow  # 32 s, two commands each with a cluster; test_cli.py checks both outputs
def test_fields_and_select_write_their_zarr_outputs_with_the_storage_options(s3, prefix,
                                                                             tmp_path):
    """``fields --out`` and ``select --table`` reach the endpoint --storage-options names."""
    import xarray as xr

    rng = np.random.default_rng(0)
    sst = rng.normal(size=(40, 3, 4))
    xr.Dataset({"sst": (("time", "lat", "lon"), sst)},
               coords={"time": np.arange(40), "lat": [-30.0, 0.0, 30.0],
                       "lon": np.arange(4) * 10.0}).to_zarr(tmp_path / "in.zarr",
                                                             consolidated=False)
    zarr.create_array(tmp_path / "x.zarr", data=rng.normal(size=(60, 3)))
    common = ["--storage-options", json.dumps(s3), "--workers", "1", "--threads-per-worker", "1",
              "--quiet"]
    fields = subprocess.run(
        [sys.executable, "-m", "dkpca", "fields", str(tmp_path / "in.zarr"), "--n-components",
         "2", "--out", f"s3://{prefix}/eofs.zarr", "--save-model", f"s3://{prefix}/model.zarr",
         *common], capture_output=True, text=True, timeout=TIMEOUT, check=False,
        env=_without_aws_environment())
    assert fields.returncode == 0, fields.stderr[-3000:]
    select = subprocess.run(
        [sys.executable, "-m", "dkpca", "select", str(tmp_path / "x.zarr"), "--n-draws", "3",
         "--plot", str(tmp_path / "select.png"), "--table", f"s3://{prefix}/table.zarr",
         *common], capture_output=True, text=True, timeout=TIMEOUT, check=False,
        env=_without_aws_environment())
    assert select.returncode == 0, select.stderr[-3000:]

    result = xr.open_zarr(f"s3://{prefix}/eofs.zarr", consolidated=False, storage_options=s3)
    reference = dkpca.xarray.FieldModel(dkpca.PCA(2), "time").fit(
        xr.open_zarr(tmp_path / "in.zarr", consolidated=False).sst)
    np.testing.assert_allclose(result.explained_variance_ratio,
                               reference.explained_variance_ratio(), rtol=1e-10)
    table = xr.open_zarr(f"s3://{prefix}/table.zarr", consolidated=False, storage_options=s3)
    assert {"sigma2", "n_components", "information"} <= set(table.variables)
    keys = _keys(s3, prefix)
    assert not any(".dkpca-" in key for key in keys), keys  # no temporaries, no markers
