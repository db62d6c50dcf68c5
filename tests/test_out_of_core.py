"""Out of core: ``dkpca transform`` streams a Zarr array several times a worker's memory limit.

Slow: writes a ~2 GB Zarr array and projects it on a cluster whose only worker may use
320 MiB above its own idle footprint (measured). The worker must neither be killed nor restarted, and the scores must be right.
"""

import dask.array as da
import numpy as np
import pytest
import zarr

import dkpca
from dkpca.cli import main
from dkpca.cluster import connect
from dkpca.options import Nystrom

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

N_ROWS, N_FEATURES, CHUNK = 4_000_000, 64, 50_000
#: What the transform may use above an idle worker's own footprint.
WORK_MEMORY = 320 * 2**20


def _worker_baseline() -> int:
    """Resident memory of an idle worker that has imported what a transform task imports.

    A fixed limit was flaky: the worker's own footprint (interpreter, numpy, dask, zarr) is
    ~270 MiB, so a 350 MiB limit left too little to read one chunk, and the worker was
    killed. The limit is set from this measurement instead.
    """
    def footprint() -> int:
        import psutil

        import dkpca.blocked
        import dkpca.kernels  # noqa: F401  (the imports are the point)

        return psutil.Process().memory_info().rss

    with connect(n_workers=1, threads_per_worker=2, memory_limit="2GiB") as client:
        return max(client.run(footprint).values())


def test_transform_of_zarr_larger_than_worker_memory(tmp_path, capsys):
    memory_limit = _worker_baseline() + WORK_MEMORY
    data = tmp_path / "big.zarr"
    X = da.random.default_rng(0).standard_normal((N_ROWS, N_FEATURES), chunks=(CHUNK, -1))
    X.to_zarr(str(data), mode="w")
    assert zarr.open_array(data, mode="r").nbytes > 3 * memory_limit
    train = zarr.open_array(data, mode="r")[:500]
    model = dkpca.KernelPCA(5, kernel="rbf", solver="exact").fit(train)
    dkpca.save(model, tmp_path / "model.zarr")

    with connect(n_workers=1, threads_per_worker=2, memory_limit=memory_limit) as client:
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


class _PeakRSS:
    """Sample this process's resident memory in a thread; ``peak`` is the largest seen."""

    def __init__(self, interval: float = 0.05):
        import threading

        import psutil

        self.process, self.peak, self.interval = psutil.Process(), 0, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.start = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_nystrom_fit_and_transform_of_zarr_4x_the_cluster_memory(tmp_path, capsys):
    n_rows, worker_memory = 8_400_000, 512 * 2**20
    data = tmp_path / "huge.zarr"
    X = da.random.default_rng(1).standard_normal((n_rows, N_FEATURES), chunks=(100_000, -1))
    X.to_zarr(str(data), mode="w")
    assert zarr.open_array(data, mode="r").nbytes >= 4 * 2 * worker_memory

    with connect(n_workers=2, threads_per_worker=1, memory_limit=worker_memory) as client:
        pids = client.run(lambda: __import__("os").getpid())
        with _PeakRSS() as client_memory:
            for argv in (
                ["fit", str(data), "--out", str(tmp_path / "model.zarr"), "--solver", "nystrom",
                 "--n-landmarks", "100", "--n-components", "3", "--random-state", "0"],
                ["transform", str(tmp_path / "model.zarr"), str(data), "--out",
                 str(tmp_path / "scores.zarr")],
            ):
                status = main([*argv, "--scheduler", client.scheduler.address, "--quiet"])
                assert status == 0, capsys.readouterr().err
        assert client.run(lambda: __import__("os").getpid()) == pids  # none killed/restarted
    # The client holds m x m and m x k objects only, however large the data (4.3 GB here).
    assert client_memory.peak - client_memory.start < 256 * 2**20

    model = dkpca.load(tmp_path / "model.zarr")
    scores = zarr.open_group(tmp_path / "scores.zarr", mode="r")["scores"]
    rows = np.r_[0:50, n_rows - 50:n_rows]
    stored = zarr.open_array(data, mode="r")
    np.testing.assert_allclose(scores[rows], model.transform(stored[rows]), atol=1e-8)
    assert model.basis_.n_samples == n_rows and model.landmarks_.shape == (100, N_FEATURES)


def test_partial_fit_of_zarr_batches_larger_than_worker_memory(tmp_path):
    # Issue 33: each partial_fit reads its batch (a Zarr path) chunk by chunk on the worker;
    # the client holds d x d and m x m statistics only.
    memory_limit = _worker_baseline() + WORK_MEMORY
    n_rows = 5_000_000
    X = da.random.default_rng(2).standard_normal((n_rows, N_FEATURES), chunks=(CHUNK, -1))
    halves = [tmp_path / "first.zarr", tmp_path / "second.zarr"]
    for path, rows in zip(halves, (slice(0, n_rows // 2), slice(n_rows // 2, n_rows)),
                          strict=True):
        X[rows].to_zarr(str(path), mode="w")
    assert sum(zarr.open_array(p, mode="r").nbytes for p in halves) > 3 * memory_limit
    landmarks = zarr.open_array(halves[0], mode="r")[:100]

    with connect(n_workers=1, threads_per_worker=2, memory_limit=memory_limit) as client:
        pids = client.run(lambda: __import__("os").getpid())
        with _PeakRSS() as client_memory:
            pca = dkpca.PCA(3)
            kpca = dkpca.KernelPCA(3, solver=Nystrom(landmarks=landmarks))
            for path in halves:
                pca.partial_fit(str(path))
                kpca.partial_fit(str(path))
        assert client.run(lambda: __import__("os").getpid()) == pids  # none killed/restarted
    assert client_memory.peak - client_memory.start < 256 * 2**20
    assert pca.n_samples_seen_ == kpca.n_samples_seen_ == n_rows

    # The references: one fit of each on the whole array (streamed too).
    everything = da.concatenate([da.from_zarr(str(p)) for p in halves])
    whole = dkpca.PCA(3).fit(everything)
    np.testing.assert_allclose(pca.explained_variance_, whole.explained_variance_, rtol=1e-10)
    whole = dkpca.KernelPCA(3, solver=Nystrom(landmarks=landmarks)).fit(everything)
    np.testing.assert_allclose(kpca.eigenvalues_, whole.eigenvalues_, rtol=1e-10)


def test_randomized_pca_of_wide_zarr_3x_the_worker_memory(tmp_path):
    """Issue 32: wide data chunked by rows only, where a feature stripe is the whole array.

    Such a stripe cannot be held, so each product takes two passes holding one chunk at a
    time; the worker must neither be killed nor restarted, and the variances must be right.
    """
    memory_limit = _worker_baseline() + WORK_MEMORY
    n_rows, n_features = 4_000, 64_000  # chunks of 50 rows: 25.6 MB, as in the tests above
    rng = da.random.default_rng(5)
    signal = rng.standard_normal((n_rows, 8), chunks=(50, -1)) * np.linspace(40, 5, 8)
    X = signal @ rng.standard_normal((8, n_features), chunks=(-1, -1)) / np.sqrt(n_features)
    X = (X + rng.standard_normal((n_rows, n_features), chunks=(50, -1)) + 3.0).rechunk(
        (50, -1))
    data = tmp_path / "wide.zarr"
    X.to_zarr(str(data), mode="w")
    assert zarr.open_array(data, mode="r").nbytes > 3 * memory_limit

    with connect(n_workers=1, threads_per_worker=1, memory_limit=memory_limit) as client:
        pids = client.run(lambda: __import__("os").getpid())
        pca = dkpca.PCA(3, solver="randomized", tol=1e-8, random_state=0).fit(
            da.from_zarr(str(data)))
        assert client.run(lambda: __import__("os").getpid()) == pids  # none killed/restarted

    # The reference: the n × n Gram matrix of the centred data, on this process.
    stored = da.from_zarr(str(data))
    centred = (stored - stored.mean(axis=0)).rechunk((500, 8_000))  # 8 × 8 blocks of the Gram
    gram = (centred @ centred.T).compute(scheduler="threads")
    exact = np.linalg.eigvalsh(gram)[::-1][:3] / (n_rows - 1)
    np.testing.assert_allclose(pca.explained_variance_, exact, rtol=1e-7)
