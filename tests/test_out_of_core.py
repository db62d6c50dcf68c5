"""Out of core: ``dkpca transform`` streams a Zarr array several times a worker's memory limit.

Slow: writes a ~1.2 GB Zarr array and projects it on a cluster whose only worker may use
350 MiB. The worker must neither be killed nor restarted, and the scores must be right.
"""

import dask.array as da
import numpy as np
import pytest
import zarr

import dkpca
from dkpca.cli import main
from dkpca.cluster import connect

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

N_ROWS, N_FEATURES, CHUNK = 2_400_000, 64, 50_000
MEMORY_LIMIT = 350 * 2**20


def test_transform_of_zarr_larger_than_worker_memory(tmp_path, capsys):
    data = tmp_path / "big.zarr"
    X = da.random.default_rng(0).standard_normal((N_ROWS, N_FEATURES), chunks=(CHUNK, -1))
    X.to_zarr(str(data), mode="w")
    assert zarr.open_array(data, mode="r").nbytes > 3 * MEMORY_LIMIT
    train = zarr.open_array(data, mode="r")[:500]
    model = dkpca.KernelPCA(5, kernel="rbf", solver="exact").fit(train)
    dkpca.save(model, tmp_path / "model.zarr")

    with connect(n_workers=1, threads_per_worker=2, memory_limit=MEMORY_LIMIT) as client:
        pids = client.run(lambda: __import__("os").getpid())
        status = main(["transform", str(tmp_path / "model.zarr"), str(data), "--out",
                       str(tmp_path / "scores.zarr"), "--scheduler",
                       client.scheduler.address, "--quiet"])
        assert status == 0, capsys.readouterr().err
        assert client.run(lambda: __import__("os").getpid()) == pids  # no worker restarted

    scores = zarr.open_group(tmp_path / "scores.zarr", mode="r")["scores"]
    assert scores.shape == (N_ROWS, 5)
    rows = np.r_[0:100, N_ROWS - 100:N_ROWS]
    stored = zarr.open_array(data, mode="r")
    np.testing.assert_allclose(scores[rows], model.transform(stored[rows]), atol=1e-10)
