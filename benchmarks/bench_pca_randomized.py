"""Randomized linear PCA of wide data (issue 32): dkpca against dask-ml and dask, and sparse.

**Dense, from Zarr.** An ``n × d`` float32 Zarr array (default 100,000 × 100,000: 40 GB),
chunked both ways (``--chunk`` square chunks, zarr's default zstd), written once under
``benchmarks/results`` block by block from seeds (``--remove-store`` deletes it at the end):

    X = G S Hᵀ + E + 1 oᵀ

with ``G`` (``n × 30``) standard normal, ``S² = diag(200 · 0.7^l)``, ``H`` (``d × 30``) normal
of variance ``1/d``, noise ``E`` standard normal and feature offsets ``o_j ~ N(5, 2²)``. The
covariance spectrum decays over about 14 eigenvalues and then is the flat noise bulk (square
data: the 10th eigenvalue is about 10.2, the 11th 7.6, the bulk ends near 4), so a randomized
method must iterate to resolve the 10 leading eigenvalues.

Each fit runs in its own spawned process with its own ``LocalCluster`` (``--workers`` processes
× ``--threads``, each with ``memory_limit`` = ``--memory-fraction`` of the array's bytes divided
among the workers, so the cluster holds only a fraction of the data). The workers read the store
through a wrapper that counts the bytes each read returns, so *passes* are measured: bytes read
÷ the array's bytes. After an untimed fit on a 2,000 × 2,000 corner (imports, first calls) the
counters are reset and the fit is timed. The methods:

* ``dkpca``: ``dkpca.PCA(10, solver="randomized", tol=1e-6, random_state=0)`` on the array as
  stored (float32 blocks; each task centres its block in float64).
* ``dask-ml``: ``dask_ml.decomposition.PCA(10, svd_solver="randomized", random_state=0)`` with
  its default ``iterated_power=0``, on the float32 array. dask-ml centres the data itself
  (``X -= X.mean(0)``, lazily, in the same graph as the SVD and the total variance), and that
  graph also takes ``delayed(lambda x: x.shape)(X)``, which gathers the whole centred array
  into one task: on workers that hold a fraction of the data it cannot run, so the methods of
  ``--unlimited-methods`` (default ``dask-ml``) run once more on workers without a memory
  limit (if this machine has 2.5 times the array free).
* ``dask-ml-tuned``: the same with ``iterated_power=--dask-ml-power`` on ``X.astype(float64)``.
  Its power iterations are not normalised, so on float32 data they overflow beyond about 5
  (``LinAlgError``) and reach about 1e-3 at best; in float64 they lose the oversampled
  directions beyond about 10.
* ``svd-compressed``: ``dask.array.linalg.svd_compressed(X - μ, 10, n_power_iter=0, seed=0,
  compute=True)`` on float32, with the mean ``μ`` computed first (its own pass, as dkpca's
  statistics pass) so ``X - μ`` is one lazy subtraction; explained variances ``s² / (n - 1)``.
  ``compute=True`` makes each stage a separate computation, the setting dask recommends for
  data larger than memory.
* ``svd-compressed-tuned``: the same with ``n_power_iter=q`` and ``iterator="QR"``
  (re-orthonormalised power iterations: no overflow, no loss of the oversampled directions),
  one run for each ``q`` of ``--svd-power`` (10 and 12: at 30,000 × 30,000, ``q = 8`` left
  an error of 3e-6).
* ``reference``: ``dkpca.PCA(10, solver="randomized", tol=1e-12, max_iter=400)`` on
  ``X.astype(float64)``, so its explained variances are float64. *Eigenvalue error* is
  ``max_i |λ_i / λ_ref,i - 1|`` over the 10 explained variances. ``--reference-json`` takes
  it from an earlier run's ``--json`` on the same store instead of running it again (its
  figures are then that run's).
  ``--no-reference`` fits none (the errors stay blank).
* ``read``: the Zarr read rate: every chunk read and decoded once by the workers, best of 3,
  on the same cluster configuration.

``--numpy-hugepages off`` starts the workers with ``NUMPY_MADVISE_HUGEPAGE=0`` (the read rate
and every fit alike): numpy then no longer asks for transparent huge pages for its large arrays,
whose faults can stall in compaction on a node full of page cache (BENCHMARKS.md §11).
``--malloc reuse`` starts them with glibc keeping freed blocks (distributed's nanny otherwise
sets ``MALLOC_TRIM_THRESHOLD_=65536``, and every decoded chunk faults in fresh pages). Both go
through ``distributed.nanny.pre-spawn-environ``: a nanny's ``env`` comes too late for them.

*bound* is ``passes × array bytes / read rate`` (with the measured passes); *fit / bound* its
ratio. The read rate comes from a cluster of its own, started before the fits; on a VM whose
disk and cores are shared with other guests it can differ from the rate the fit sees minutes
later (BENCHMARKS.md §11: reads of the same store took 85-124 s on different runs). So each
fit's child also reads the array once just before and once just after its fit, on the fit's own
cluster (``--no-adjacent-reads`` skips them): *reads beside the fit* and *fit / bound beside*
(the bound at the faster of the two). *cores stolen* is the hypervisor's steal time over the fit
(and over each read), in cores. Memory: *client* is the peak resident set size of the fitting
process minus the one before the fit (psutil, every 5 ms); *largest worker* the peak resident
set size of the largest worker process (absolute, beside its limit), *workers' sum* the peak of
their sum minus the one before the fit (every 50 ms); *spilled* the bytes the workers wrote to
disk. *other load* is the cores other processes kept busy during the fit.

**Sparse, in memory.** ``n × d`` CSR float64 (default 1,000,000 × 100,000) with ``--density``
nonzeros (default 0.1 %) from a topic model: each row has ``Poisson(density · d)`` entries;
its topic is one of 30 (probabilities ``∝ 0.8^t``); 60 % of its entries fall in the topic's
100-column vocabulary, the rest uniformly; values ``Exponential(1)``. The spectrum decays, then
is flat (at 200,000 × 20,000: from 6 times the flat level at the first eigenvalue to 1.4 times
at the 10th, flat from about the 15th). Methods, each in its own spawned process after an untimed
fit on 2,000 rows (time excludes making the data):

* ``dkpca``: ``dkpca.PCA(10, solver="randomized", tol=1e-6, random_state=0)`` on the CSR
  matrix (implicit centring; strips of rows on this process, one thread);
* ``dkpca-dask``: the same on a dask array of CSR row blocks (``--sparse-chunk`` rows), on
  dask's threaded scheduler with ``--workers × --threads`` threads;
* ``sklearn-arpack``: ``sklearn.decomposition.PCA(10, svd_solver="arpack", random_state=0)``
  (implicit centring through a ``LinearOperator``; ARPACK to machine precision);
* ``reference``: dkpca with ``tol=1e-12``, as above.

*peak* is the resident set size above the one before the fit (the input, 12 bytes a nonzero,
is already in memory).

Usage::

    python benchmarks/bench_pca_randomized.py            # issue 32's sizes (40 GB of disk)
    python benchmarks/bench_pca_randomized.py --n-samples 30000 --n-features 30000 \\
        --chunk 2500 --memory-fraction 0.8               # as run on 2 cores (BENCHMARKS.md)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import multiprocessing as mp
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import numpy as np
import psutil

from dkpca._cluster_workers import cluster_workers
from dkpca.cluster import spawned_with

# The workers import this module to unpickle ``CountingArray``: ``_common`` (which imports
# dkpca, scikit-learn and scipy) is imported only where used, so a worker of the dask methods
# does not load dkpca.

K = 10
RANK, TOP, DECAY = 30, 200.0, 0.7
RESULTS = Path(__file__).parent / "results"
DENSE_METHODS = ("dkpca", "dask-ml", "dask-ml-tuned", "svd-compressed", "svd-compressed-tuned")
SPARSE_METHODS = ("dkpca", "dkpca-dask", "sklearn-arpack")
WARM = 2000

# ---------------------------------------------------------------------------------------------
# data


def dense_block(rows: slice, cols: slice, d: int, seed: int = 0) -> np.ndarray:
    """Block ``X[rows, cols]`` of the dense data, float32, drawn from seeds of its position.

    The row factors depend on the row block only and the column factors on the column block
    only (blocks are aligned to the store's chunks), so any block is made on its own.
    """
    scales = np.sqrt(TOP * DECAY ** np.arange(RANK))
    G = np.random.default_rng([seed, 0, rows.start]).standard_normal((rows.stop - rows.start,
                                                                      RANK))
    H = np.random.default_rng([seed, 1, cols.start]).standard_normal((cols.stop - cols.start,
                                                                      RANK)) / np.sqrt(d)
    offsets = np.random.default_rng([seed, 2, cols.start]).normal(5.0, 2.0, cols.stop - cols.start)
    block = np.random.default_rng([seed, 3, rows.start, cols.start]).standard_normal(
        (rows.stop - rows.start, cols.stop - cols.start), dtype=np.float32)
    block += ((G * scales) @ H.T + offsets).astype(np.float32)
    return block


def store_path(n: int, d: int, chunk: int) -> Path:
    """Where the dense array of this shape and chunking is kept."""
    return RESULTS / f"pca-randomized-{n}x{d}-c{chunk}.zarr"


def write_store(n: int, d: int, chunk: int, threads: int) -> tuple[Path, float]:
    """Write the dense array to Zarr once (chunk by chunk, ``threads`` at a time).

    Returns the path and the seconds spent writing (0 when the store was already complete).
    """
    import zarr

    path = store_path(n, d, chunk)
    if (path / "zarr.json").exists() and zarr.open_array(path).attrs.get("complete"):
        return path, 0.0
    RESULTS.mkdir(exist_ok=True)
    free = shutil.disk_usage(RESULTS).free
    if free < 1.1 * 4 * n * d:
        raise SystemExit(f"{4 * n * d / 1e9:.1f} GB store: only {free / 1e9:.1f} GB free "
                         f"under {RESULTS}; give smaller --n-samples/--n-features.")
    array = zarr.create_array(path, shape=(n, d), chunks=(chunk, chunk), dtype="float32",
                              overwrite=True)
    start = time.perf_counter()
    tasks = [(slice(i, min(i + chunk, n)), slice(j, min(j + chunk, d)))
             for i in range(0, n, chunk) for j in range(0, d, chunk)]

    def write(task: tuple[slice, slice]) -> None:
        array[task] = dense_block(*task, d)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, tasks))
    array.attrs["complete"] = True
    return path, time.perf_counter() - start


def sparse_data(n: int, d: int, density: float, seed: int = 0, topics: int = 30,
                vocabulary: int = 100, share: float = 0.6) -> Any:
    """The sparse topic-model data (CSR, float64)."""
    import scipy.sparse

    rng = np.random.default_rng(seed)
    per_row = rng.poisson(density * d, n)
    rows = np.repeat(np.arange(n, dtype=np.int32), per_row)
    weights = 0.8 ** np.arange(topics)
    topic = rng.choice(topics, n, p=weights / weights.sum())
    words = rng.choice(d, (topics, vocabulary))
    cols = rng.integers(0, d, rows.size, dtype=np.int32)
    in_topic = rng.random(rows.size) < share
    chosen = topic[rows[in_topic]]
    cols[in_topic] = words[chosen, rng.integers(0, vocabulary, chosen.size)]
    X = scipy.sparse.csr_matrix((rng.exponential(1.0, rows.size), (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    return X


# ---------------------------------------------------------------------------------------------
# counting reads on the workers

_READ = {"bytes": 0}


class CountingArray:
    """A Zarr array that counts, in the process that reads, the bytes its reads return.

    Pickles as its path: each worker opens the store once and keeps its own count.
    """

    def __init__(self, path: str) -> None:
        import zarr

        self.path = path
        self._array = zarr.open_array(path, mode="r")
        self.shape, self.dtype, self.ndim = self._array.shape, self._array.dtype, 2

    def __getitem__(self, key: Any) -> np.ndarray:
        block = self._array[key]
        _READ["bytes"] += block.nbytes
        return block

    def __reduce__(self) -> tuple:
        return (type(self), (self.path,))


def read_bytes() -> int:
    """Bytes read by this process since the last reset."""
    return _READ["bytes"]


def reset_reads() -> None:
    """Reset this process's count of bytes read."""
    _READ["bytes"] = 0


def _touch(block: np.ndarray) -> np.ndarray:
    return np.zeros((1, 1), dtype=block.dtype)


# ---------------------------------------------------------------------------------------------
# one dense fit on a fresh cluster


class _WorkerMemory:
    """Peak resident set size of each worker process, sampled every ``interval`` seconds."""

    def __init__(self, pids: list[int], interval: float = 0.05) -> None:
        self.processes = [psutil.Process(pid) for pid in pids]
        self.peaks = [0] * len(pids)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            for index, process in enumerate(self.processes):
                with contextlib.suppress(psutil.Error):
                    self.peaks[index] = max(self.peaks[index], process.memory_info().rss)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def _spilled(dask_worker: Any) -> int:
    return int(sum(value for key, value in dask_worker.digests_total.items()
                   if "disk-write" in str(key) and "bytes" in str(key)))


def _dense_fit(method: str, X: Any) -> tuple[np.ndarray, int | None, dict[str, Any]]:
    """Fit ``method`` on the dask array ``X``: explained variances, passes it reports, details."""
    import dask.array as da

    n = X.shape[0]
    if method in ("dkpca", "reference"):
        import dkpca

        tol, data = (1e-12, X.astype(np.float64)) if method == "reference" else (1e-6, X)
        model = dkpca.PCA(K, solver="randomized", tol=tol, max_iter=400,
                          random_state=0).fit(data)
        return (np.asarray(model.explained_variance_, dtype=np.float64), model.n_iter_,
                {"solver": model.solver_})
    if method.startswith("dask-ml"):
        from dask_ml.decomposition import PCA

        power = _OPTIONS["dask_ml_power"] if method == "dask-ml-tuned" else 0
        data = X.astype(np.float64) if method == "dask-ml-tuned" else X
        model = PCA(K, svd_solver="randomized", iterated_power=power, random_state=0).fit(data)
        return (np.asarray(model.explained_variance_, dtype=np.float64), None,
                {"iterated_power": power, "dtype": str(data.dtype)})
    power, iterator = ((_OPTIONS["svd_power"], "QR") if method == "svd-compressed-tuned"
                       else (0, "power"))
    mean = X.mean(axis=0, dtype=np.float64).astype(X.dtype).compute()
    _, s, _ = da.linalg.svd_compressed(X - mean, K, n_power_iter=power, iterator=iterator,
                                       seed=0, compute=True)
    s = np.asarray(s.compute(), dtype=np.float64)
    return s**2 / (n - 1), None, {"n_power_iter": power, "iterator": iterator}


_OPTIONS: dict[str, Any] = {}


#: ``--malloc reuse``: glibc serves blocks below 64 MiB from its heap and keeps what is freed.
REUSE_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(64 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**32)}


def worker_env(hugepages: str, malloc: str = "dask") -> dict[str, str]:
    """The workers' environment for ``--numpy-hugepages`` and ``--malloc``.

    numpy marks its large arrays for transparent huge pages (``MADV_HUGEPAGE``); on a node whose
    memory is full of page cache such a fault can stall in compaction (BENCHMARKS.md §11).
    distributed's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536``, so glibc hands every freed block
    back to the system and each decoded chunk faults in fresh pages; ``"reuse"`` keeps them.
    """
    env = {"NUMPY_MADVISE_HUGEPAGE": "0"} if hugepages == "off" else {}
    return {**env, **(REUSE_MALLOC if malloc == "reuse" else {})}


def _cluster_kwargs(nbytes: int, workers: int, threads: int, fraction: float,
                    directory: str) -> dict[str, Any]:
    return {"n_workers": workers, "threads_per_worker": threads, "processes": True,
            "memory_limit": int(fraction * nbytes / workers), "dashboard_address": ":0",
            "local_directory": directory}


def _timed_read(X: Any) -> tuple[float, float]:
    """Read and decode every block of ``X`` once on the cluster: seconds, and cores stolen."""
    from _common import Monitor, wait_for_quiet

    this = importlib.import_module("bench_pca_randomized")
    wait_for_quiet(0.2, patience=30.0)
    with Monitor(interval=1.0) as monitor:
        X.map_blocks(this._touch, chunks=((1,) * X.numblocks[0], (1,) * X.numblocks[1])).compute()
    return monitor.elapsed, monitor.steal


def _dense_child(method: str, path: str, cluster: dict[str, Any], options: dict[str, Any],
                 results: mp.Queue) -> None:
    """Child process: a fresh cluster, an untimed fit on a corner, then the timed fit.

    With ``options["adjacent_reads"]`` the array is also read once just before and once just
    after the timed fit, on the same cluster (not counted in its passes).
    """
    import dask.array as da
    from _common import timed_on_cluster
    from distributed import Client, LocalCluster

    this = importlib.import_module("bench_pca_randomized")  # workers unpickle by this name
    this._OPTIONS.update(options)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    store = this.CountingArray(path)
    chunks = store._array.chunks
    X = da.from_array(store, chunks=chunks, name="store", asarray=False, inline_array=False,
                      meta=np.empty((0, 0), dtype=store.dtype))
    nbytes = X.nbytes
    with (spawned_with(options.get("worker_env", {})), LocalCluster(**cluster) as local,
          Client(local) as client):
        pids = list(client.run(os.getpid).values())
        if method == "read":
            corner = X[: chunks[0], : chunks[1]]
            corner.map_blocks(this._touch, chunks=(1, 1)).compute()
            client.run(this.reset_reads)
            times, steal = zip(*[_timed_read(X) for _ in range(3)], strict=True)
            read = sum(client.run(this.read_bytes).values())
            results.put({"status": "ok", "times": list(times), "steal": list(steal),
                         "rate": nbytes / min(times),
                         "passes_counted": read / nbytes / len(times)})
            return
        this._dense_fit(method, X[:WARM, :WARM])
        adjacent = [_timed_read(X)] if options.get("adjacent_reads") else []
        client.run(this.reset_reads)
        spilled_before = sum(client.run(this._spilled).values())
        with _WorkerMemory(pids) as workers:
            (variance, reported, detail), measured = timed_on_cluster(
                True, this._dense_fit, method, X)
        read = sum(client.run(this.read_bytes).values())
        spilled = sum(client.run(this._spilled).values()) - spilled_before
        alive = len(cluster_workers(client))
        if adjacent:
            adjacent.append(_timed_read(X))
    results.put({"status": "ok", "time": measured["seconds"],
                 "client_mib": measured["client_mib"], "workers_mib": measured["workers_mib"],
                 "largest_worker_mib": max(workers.peaks) / 2**20,
                 "other_load": measured["other_load"], "steal": measured["steal"],
                 "adjacent_reads": [list(pair) for pair in adjacent],
                 "passes_counted": read / nbytes,
                 "passes_reported": reported, "spilled_mib": spilled / 2**20,
                 "workers_alive": alive, "variance": variance.tolist(), **detail})


def _sparse_child(method: str, shape: tuple[int, int, float], chunk: int, threads: int,
                  results: mp.Queue) -> None:
    """Child process: the sparse data, an untimed fit on 2,000 rows, then the timed fit."""
    import dask
    import dask.array as da
    from _common import Monitor, wait_for_quiet

    X = sparse_data(*shape)

    def fit(data: Any) -> tuple[np.ndarray, int | None]:
        if method == "sklearn-arpack":
            from sklearn.decomposition import PCA

            model = PCA(K, svd_solver="arpack", random_state=0).fit(data)
            return model.explained_variance_, None
        import dkpca

        tol = 1e-12 if method == "reference" else 1e-6
        if method == "dkpca-dask":
            data = da.from_array(data, chunks=(min(chunk, data.shape[0]), -1), asarray=False)
        model = dkpca.PCA(K, solver="randomized", tol=tol, max_iter=400,
                          random_state=0).fit(data)
        return model.explained_variance_, model.n_iter_

    with dask.config.set(scheduler="threads", num_workers=threads):
        fit(X[:WARM])
        wait_for_quiet(0.2, patience=30.0)
        with Monitor() as monitor:
            variance, passes = fit(X)
    results.put({"status": "ok", "time": monitor.elapsed, "peak_mib": monitor.peak_increase / 2**20,
                 "other_load": monitor.other_load, "passes_reported": passes,
                 "variance": np.asarray(variance, dtype=np.float64).tolist(),
                 "input_mib": (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**20})


def _guarded(target: Callable, *args: Any) -> None:
    """Run ``target`` in the child; an exception is reported as the result, not a hang."""
    results = args[-1]
    try:
        target(*args)
    except Exception as error:  # noqa: BLE001 - a failing method is a result too
        message = str(error).splitlines()[0] if str(error) else ""
        results.put({"status": f"error: {type(error).__name__}: {message[:160]}"})


def run_child(target: Callable, args: tuple, timeout: float) -> dict[str, Any]:
    """Run ``target(*args, queue)`` in a spawned process; a crash or a timeout is the status."""
    context = mp.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_guarded, args=(target, *args, results))
    child.start()
    deadline = time.perf_counter() + timeout
    record = None
    while record is None and time.perf_counter() < deadline:
        try:
            record = results.get(timeout=1.0)
        except queue.Empty:
            if not child.is_alive():
                with contextlib.suppress(queue.Empty):
                    record = results.get(timeout=1.0)
                record = record or {"status": f"died (exit {child.exitcode})"}
    if record is None:
        record = {"status": f"timeout (> {timeout:g} s)"}
    if child.is_alive():
        child.join(timeout=60)
    if child.is_alive():
        with contextlib.suppress(psutil.Error):  # the child's own cluster processes first
            for process in psutil.Process(child.pid).children(recursive=True):
                process.kill()
        child.kill()
        child.join()
    return record


# ---------------------------------------------------------------------------------------------
# report


def _error(variance: list[float] | None, reference: dict[str, Any]) -> str:
    if variance is None or reference.get("status") != "ok":
        return ""
    ratio = np.asarray(variance[:K]) / np.asarray(reference["variance"][:K])
    return f"{np.max(np.abs(ratio - 1)):.1e}"


def dense_report(records: dict[str, dict[str, Any]], nbytes: int) -> str:
    """The dense table (markdown)."""
    from _common import markdown_table

    rate = records["read"].get("rate")
    rows = []
    for method, r in records.items():
        if method == "read":
            continue
        if r["status"] != "ok":
            rows.append([method, r["status"], *[""] * 13])
            continue
        bound = r["passes_counted"] * nbytes / rate if rate else float("nan")
        beside = [seconds for seconds, _ in r.get("adjacent_reads", [])]
        bound_beside = r["passes_counted"] * min(beside) if beside else float("nan")
        setting = ", ".join(f"{key}={r[key]}" for key in
                            ("iterated_power", "dtype", "n_power_iter", "iterator") if key in r)
        passes = f"{r['passes_counted']:.2f}"
        if r.get("passes_reported") is not None:
            passes += f" ({r['passes_reported']})"
        if not setting:
            setting = "tol=1e-12, float64" if method == "reference" else "tol=1e-6"
        rows.append([
            method, setting,
            f"{r['time']:.1f}", passes, f"{bound:.1f}", f"{r['time'] / bound:.2f}",
            ", ".join(f"{seconds:.1f}" for seconds in beside),
            f"{r['time'] / bound_beside:.2f}" if beside else "",
            f"{r['client_mib']:.0f}",
            f"{r['largest_worker_mib']:.0f} / "
            + (f"{r['memory_limit'] / 2**20:.0f}" if r["memory_limit"] else "none"),
            f"{r['workers_mib']:.0f}", f"{r['spilled_mib']:.0f}",
            "reference" if method == "reference" else _error(r["variance"], records["reference"]),
            f"{r['other_load']:.2f}", f"{r.get('steal', float('nan')):.2f}",
        ])
    return markdown_table(
        ["method", "setting", "fit (s)", "passes counted (reported)", "bound (s)", "fit / bound",
         "reads beside the fit (s)", "fit / bound beside", "client peak MiB",
         "largest worker peak / limit MiB", "workers' sum peak MiB", "spilled MiB",
         "eigenvalue error", "other load", "cores stolen"], rows)


def sparse_report(records: dict[str, dict[str, Any]]) -> str:
    """The sparse table (markdown)."""
    from _common import markdown_table

    rows = []
    for method, r in records.items():
        if r["status"] != "ok":
            rows.append([method, r["status"], "", "", "", ""])
            continue
        rows.append([
            method, f"{r['time']:.1f}",
            "" if r["passes_reported"] is None else str(r["passes_reported"]),
            f"{r['peak_mib']:.0f}",
            "reference" if method == "reference" else _error(r["variance"], records["reference"]),
            f"{r['other_load']:.2f}",
        ])
    return markdown_table(["method", "fit (s)", "passes", "RSS peak MiB", "eigenvalue error",
                           "other load"], rows)


def _log(message: str) -> None:
    print(message, flush=True)


def run_dense(args: argparse.Namespace) -> Iterator[str]:
    """Write (or reuse) the store, then measure the read rate and each method."""
    n, d, chunk = args.n_samples, args.n_features, args.chunk
    path, seconds = write_store(n, d, chunk, args.workers * args.threads)
    nbytes = 4 * n * d
    _log(f"store {path}: {nbytes / 1e9:.2f} GB, chunks {chunk} × {chunk}"
         + (f", written in {seconds:.0f} s" if seconds else ", reused"))
    records: dict[str, dict[str, Any]] = {}
    runs = [("read", "read", True, 0)]
    if args.reference_json:
        records["reference"] = earlier_reference(args.reference_json, n, d, chunk)
        _log(f"  reference: from {args.reference_json}")
    elif args.no_reference:
        records["reference"] = {"status": "not run (--no-reference)"}
    else:
        runs.append(("reference", "reference", False, 0))
    for method in args.dense_methods:
        powers = args.svd_power if method == "svd-compressed-tuned" else [0]
        runs += [(f"{method} (q={q})" if len(powers) > 1 else method, method, True, q)
                 for q in powers]
    runs += [(f"{method}, no memory limit", method, False, 0)
             for method in args.unlimited_methods]
    with tempfile.TemporaryDirectory(prefix="dkpca-bench-") as directory:
        cluster = _cluster_kwargs(nbytes, args.workers, args.threads, args.memory_fraction,
                                  directory)
        for label, method, limited, power in runs:
            started = time.perf_counter()
            needed = 2.5 * nbytes * (2 if method == "dask-ml-tuned" else 1)
            if not limited and method != "reference" and (
                    psutil.virtual_memory().available < needed):
                records[label] = {"status": f"skipped (needs {needed / 2**30:.0f} GiB free)"}
                continue
            setup = {**cluster, "memory_limit": cluster["memory_limit"] if limited else 0}
            options = {"dask_ml_power": args.dask_ml_power, "svd_power": power,
                       "adjacent_reads": args.adjacent_reads and method != "read",
                       "worker_env": worker_env(args.numpy_hugepages, args.malloc)}
            records[label] = run_child(_dense_child, (method, str(path), setup, options),
                                       args.timeout)
            records[label]["memory_limit"] = setup["memory_limit"]
            summary = {key: value for key, value in records[label].items() if key != "variance"}
            _log(f"  {label}: {summary} ({time.perf_counter() - started:.0f} s with setup)")
    read = records["read"]
    if read["status"] == "ok":
        yield (f"Zarr read rate: {read['rate'] / 1e9:.2f} GB/s (best of "
               f"{', '.join(f'{t:.2f}' for t in read['times'])} s for {nbytes / 1e9:.2f} GB; "
               f"{read['passes_counted']:.2f} reads counted per timed read; cores stolen "
               f"{', '.join(f'{c:.2f}' for c in read['steal'])})\n")
    yield (f"Dense {n:,} × {d:,} float32 from Zarr ({nbytes / 1e9:.1f} GB, chunks {chunk} × "
           f"{chunk}); LocalCluster {args.workers} × {args.threads} thread(s), memory_limit "
           f"{cluster['memory_limit'] / 2**30:.2f} GiB each ({args.memory_fraction:g} of the "
           f"array together); numpy huge pages in the workers: {args.numpy_hugepages}; "
           f"malloc: {args.malloc}\n")
    yield dense_report(records, nbytes)
    if args.json:
        _JSON["dense"] = records
        _JSON["store"] = [n, d, chunk]
    if args.remove_store:
        shutil.rmtree(path)
        _log(f"removed {path}")


def earlier_reference(path: str, n: int, d: int, chunk: int) -> dict[str, Any]:
    """The reference record of an earlier ``--json`` of this script, on the same store.

    Files written before the store's shape was recorded are taken on the caller's word.
    """
    with open(path) as stream:
        earlier = json.load(stream)
    record = earlier.get("dense", {}).get("reference", {})
    if earlier.get("store", [n, d, chunk]) != [n, d, chunk] or record.get("status") != "ok":
        raise SystemExit(f"{path}: no reference fitted on the {n} × {d} store with {chunk}² "
                         f"chunks")
    return record


def run_sparse(args: argparse.Namespace) -> Iterator[str]:
    """Measure each sparse method."""
    shape = (args.sparse_n_samples, args.sparse_n_features, args.density)
    threads = args.workers * args.threads
    records = {}
    for method in ("reference", *args.sparse_methods):
        started = time.perf_counter()
        records[method] = run_child(_sparse_child, (method, shape, args.sparse_chunk, threads),
                                    args.timeout)
        summary = {key: value for key, value in records[method].items() if key != "variance"}
        _log(f"  {method}: {summary} ({time.perf_counter() - started:.0f} s with setup)")
    ok = [r for r in records.values() if r["status"] == "ok"]
    size = f", {ok[0]['input_mib']:.0f} MiB as CSR" if ok else ""
    yield (f"\nSparse {shape[0]:,} × {shape[1]:,}, density {shape[2]:g}, float64{size}; "
           f"dkpca-dask on {threads} threads\n")
    yield sparse_report(records)
    if args.json:
        _JSON["sparse"] = records


_JSON: dict[str, Any] = {}


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios and print markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", choices=("dense", "sparse"),
                        default=["dense", "sparse"])
    parser.add_argument("--n-samples", type=int, default=100_000)
    parser.add_argument("--n-features", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=5000, help="square Zarr chunk side")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="threads per worker")
    parser.add_argument("--memory-fraction", type=float, default=0.5,
                        help="the workers' memory limits together, as a fraction of the array")
    parser.add_argument("--dense-methods", nargs="*", choices=DENSE_METHODS,
                        default=list(DENSE_METHODS),
                        help="none: the read rate and the reference alone (for --reference-json)")
    parser.add_argument("--unlimited-methods", nargs="*", choices=DENSE_METHODS,
                        default=["dask-ml"],
                        help="also run these on workers without a memory limit")
    parser.add_argument("--dask-ml-power", type=int, default=8,
                        help="iterated_power of dask-ml-tuned")
    parser.add_argument("--svd-power", type=int, nargs="+", default=[10, 12],
                        help="n_power_iter of svd-compressed-tuned (one run each)")
    parser.add_argument("--sparse-n-samples", type=int, default=1_000_000)
    parser.add_argument("--sparse-n-features", type=int, default=100_000)
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--sparse-chunk", type=int, default=100_000,
                        help="rows per block for dkpca-dask")
    parser.add_argument("--sparse-methods", nargs="+", choices=SPARSE_METHODS,
                        default=list(SPARSE_METHODS))
    parser.add_argument("--malloc", choices=("dask", "reuse"), default="dask",
                        help="reuse: the workers' glibc keeps freed blocks (MALLOC_MMAP_THRESHOLD_ "
                             "64 MiB, MALLOC_TRIM_THRESHOLD_ 4 GiB) instead of distributed's "
                             "MALLOC_TRIM_THRESHOLD_=65536")
    parser.add_argument("--numpy-hugepages", choices=("default", "off"), default="default",
                        help="off: the workers run with NUMPY_MADVISE_HUGEPAGE=0 (read rate "
                             "and fits alike)")
    parser.add_argument("--reference-json", default=None,
                        help="take the dense reference from this earlier --json (same store)")
    parser.add_argument("--no-reference", action="store_true",
                        help="fit no reference (its 50 minutes at 40 GB on 2 cores): the "
                             "eigenvalue errors stay blank")
    parser.add_argument("--adjacent-reads", action=argparse.BooleanOptionalAction, default=True,
                        help="read the array just before and after each dense fit, on its "
                             "cluster (a second bound)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per fit")
    parser.add_argument("--remove-store", action="store_true",
                        help="delete the dense Zarr store at the end")
    parser.add_argument("--json", default=None, help="also write every figure here")
    args = parser.parse_args(argv)
    from _common import dkpca_source, environment, print_environment

    print_environment(environment(), [sys.executable, *sys.argv])
    print(f"dkpca: {dkpca_source()}\n", flush=True)
    tables = []
    if "dense" in args.scenarios:
        tables += list(run_dense(args))
    if "sparse" in args.scenarios:
        tables += list(run_sparse(args))
    print()
    print("\n".join(tables))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(_JSON, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
