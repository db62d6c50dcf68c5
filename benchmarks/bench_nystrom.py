"""Nyström kernel PCA: dkpca versus scikit-learn's ``Nystroem`` + ``PCA``, time and peak memory.

Data: ``n`` rows of ``d = 64`` standard normal features in float32 (seeded), RBF kernel with
``gamma = 1 / d``, ``m`` landmarks (uniform sampling, ``random_state=0``), 10 components.

* scikit-learn: ``Nystroem(kernel="rbf", gamma, n_components=m).fit_transform(X)`` then
  ``PCA(10).fit`` of the ``n × m`` features (kernel PCA of the Nyström approximation; the
  features are held in memory).
* dkpca: ``KernelPCA(10, solver=Nystrom(n_landmarks=m)).fit`` of ``X`` as a dask array
  (in-memory rows, 100,000 per chunk, local threads); one pass accumulates ``m × m`` moments.
  With ``--zarr``, the largest sizes read ``X`` from a Zarr array on disk instead (out of
  core: ``X`` is never in memory), which is how ``n = 10,000,000`` runs.

Each measurement runs in its own spawned process. *time* is the wall time of ``fit`` (data
generation excluded); *peak* is the peak resident set size during ``fit`` minus the one before
it (psutil, every 5 ms); a process that dies (out of memory) or passes ``--timeout`` is
recorded as such. The eigenvalue column compares the two libraries' leading eigenvalue
(``PCA.explained_variance_ · (n - 1)`` against ``eigenvalues_``; different landmarks, so
agreement to about 1 % is expected, not exactness).

With ``--phases`` dkpca's fit is taken apart and each phase timed on its own (threads, in-memory
rows): landmark selection; the ``k(x, L)`` work of the moments pass alone (its GEMM and
``exp``, strip by strip as in the pass); the whole moments pass, and so ``moments`` = moments
pass − k(x, L), the ``n m²`` product; the ``m × m`` work (``K_LL``, its inverse square root
and the eigenproblem of the features' scatter); ``fit_nystrom`` as a whole (pass and ``m × m``
work); and the transform of all ``n`` rows. Each is set against its bound: its flops at this machine's float32 GEMM, ``syrk``
and ``exp`` rates, measured in the same process with every core busy and one BLAS thread
each, as the tasks run.

With ``--cluster WORKERS MEMORY`` dkpca instead runs fit *and* transform (scores written to
Zarr) from the Zarr array on a ``LocalCluster`` of ``WORKERS`` single-threaded worker processes
limited to ``MEMORY`` each; it records the wall time, the largest worker's peak resident set
size, the client's peak increase, and whether any worker was restarted.

Usage::

    python benchmarks/bench_nystrom.py                       # n = 1e5, 1e6; m = 1000, 2000
    python benchmarks/bench_nystrom.py --n 10000000 --m 1000 --zarr --skip-sklearn
    python benchmarks/bench_nystrom.py --n 16000000 --m 1000 --cluster 2 512MiB
    python benchmarks/bench_nystrom.py --n 1000000 --m 1000 2000 --phases
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    Monitor,
    dkpca_source,
    environment,
    markdown_table,
    print_environment,
    run_in_child,
)

D, K, CHUNK = 64, 10, 100_000
RESULTS = Path(__file__).parent / "results"


def _chunk(i: int, rows: int) -> np.ndarray:
    return np.random.default_rng([0, i]).standard_normal((rows, D), dtype=np.float32)


def make_data(n: int) -> np.ndarray:
    """``n × 64`` float32 normal data, generated chunk by chunk from fixed seeds."""
    X = np.empty((n, D), dtype=np.float32)
    for i, start in enumerate(range(0, n, CHUNK)):
        X[start : start + CHUNK] = _chunk(i, min(CHUNK, n - start))
    return X


def zarr_data(n: int) -> str:
    """The same data in a Zarr array under ``benchmarks/results`` (written once)."""
    import zarr

    path = RESULTS / f"nystrom-{n}.zarr"
    if not (path / "zarr.json").exists():
        RESULTS.mkdir(exist_ok=True)
        array = zarr.create_array(path, shape=(n, D), dtype="float32", chunks=(CHUNK, D),
                                  overwrite=True)
        for i, start in enumerate(range(0, n, CHUNK)):
            array[start : start + CHUNK] = _chunk(i, min(CHUNK, n - start))
    return str(path)


def _fit(library: str, n: int, m: int, use_zarr: bool) -> dict[str, Any]:
    if library == "sklearn":
        from sklearn.decomposition import PCA
        from sklearn.kernel_approximation import Nystroem

        X = make_data(n)
        with Monitor() as monitor:
            features = Nystroem(kernel="rbf", gamma=1 / D, n_components=m,
                                random_state=0).fit_transform(X)
            pca = PCA(K, random_state=0).fit(features)
        top = float(pca.explained_variance_[0] * (n - 1))
    else:
        import dask.array as da

        import dkpca
        from dkpca.options import Nystrom

        X = da.from_zarr(zarr_data(n)) if use_zarr else da.from_array(make_data(n),
                                                                      chunks=(CHUNK, -1))
        with Monitor() as monitor:
            model = dkpca.KernelPCA(K, kernel="rbf", gamma=1 / D,
                                    solver=Nystrom(n_landmarks=m), random_state=0).fit(X)
        top = float(model.eigenvalues_[0])
    return {"time": monitor.elapsed, "peak": monitor.peak_increase, "top": top,
            "other_load": monitor.other_load}


def _worker_peak() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _fit_on_cluster(n: int, m: int, workers: int, memory: str) -> dict[str, Any]:
    import dask.array as da

    import dkpca
    from dkpca.blocked import compute
    from dkpca.cluster import connect
    from dkpca.io import atomic_group, store_array
    from dkpca.options import Nystrom

    path = zarr_data(n)
    out = RESULTS / f"nystrom-{n}-scores.zarr"
    with connect(n_workers=workers, threads_per_worker=1, memory_limit=memory) as client:
        pids = client.run(lambda: __import__("os").getpid())
        X = da.from_zarr(path)
        with Monitor() as monitor:
            model = dkpca.KernelPCA(K, kernel="rbf", gamma=1 / D,
                                    solver=Nystrom(n_landmarks=m), random_state=0).fit(X)
            with atomic_group(out, overwrite=True) as group:
                compute(store_array(group, "scores", model.transform(X)))
        restarted = client.run(lambda: __import__("os").getpid()) != pids
        worker_peak = max(client.run(_worker_peak).values())
    return {"time": monitor.elapsed, "peak": monitor.peak_increase, "top": 0.0,
            "worker_peak": worker_peak, "restarted": restarted,
            "other_load": monitor.other_load}


def _kernel_only(block: np.ndarray, landmarks: np.ndarray, kernel: Any, strip: int) -> float:
    """The k(x, L) work of one chunk's moments pass, strip by strip, reduced to a number."""
    total = 0.0
    for start in range(0, block.shape[0], strip):
        total += float(kernel.pairwise(block[start : start + strip], landmarks)[0, 0])
    return total


def machine_rates(cores: int) -> dict[str, float]:
    """Per-core float32 rates, measured the way tasks run: every core busy, one BLAS thread each."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    operands = [(rng.standard_normal((2000, 1000), dtype=np.float32),
                 rng.standard_normal((1000, 1000), dtype=np.float32)) for _ in range(cores)]
    works = {
        "gemm": (lambda A, B: A @ B, 2 * 2000 * 1000 * 1000),
        "syrk": (lambda A, B: A.T @ A, 2000 * 1000 * 1000),  # numpy: syrk on one buffer
        "exp": (lambda A, B: np.exp(A), 2000 * 1000),
    }
    rates = {}
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(cores) as pool:
        for name, (work, amount) in works.items():
            def repeat(pair, work=work):
                for _ in range(10):
                    work(*pair)
            list(pool.map(repeat, operands))  # warm
            start = time.perf_counter()
            list(pool.map(repeat, operands))
            rates[name] = 10 * amount / (time.perf_counter() - start)
    return rates


def phase_bounds(n: int, m: int, rates: dict[str, float], cores: int) -> dict[str, float]:
    """Seconds each phase's arithmetic needs at the measured per-core rates on ``cores`` cores."""
    kernel = (2 * n * D * m / rates["gemm"] + n * m / rates["exp"]) / cores
    moments = n * m * m / rates["syrk"] / cores
    return {"landmarks": float("nan"), "k(x, L)": kernel, "moments pass": kernel + moments,
            "moments": moments, "m × m eigenproblems": float("nan"),
            "fit (all of it)": kernel + moments,
            "transform": kernel + 2 * n * m * K / rates["gemm"] / cores}


def _phases(n: int, m: int, use_zarr: bool) -> dict[str, Any]:
    """Wall time of each phase of dkpca's Nyström fit, run one by one on the same data."""
    import os
    import time

    import dask
    import dask.array as da

    import dkpca
    from dkpca.blocked import STRIP_BYTES, compute, tree_sum, worker_block_bytes
    from dkpca.kernels import RBF
    from dkpca.linalg import top_eigh
    from dkpca.options import Nystrom
    from dkpca.solvers import ComponentRule
    from dkpca.solvers._landmarks import select_landmarks
    from dkpca.solvers.nystrom import _kernel_moments, fit_nystrom, inverse_sqrt

    X = da.from_zarr(zarr_data(n)) if use_zarr else da.from_array(make_data(n),
                                                                  chunks=(CHUNK, -1))
    kernel, block_bytes = RBF(gamma=1 / D), 128 * 2**20
    dkpca.KernelPCA(K, kernel="rbf", gamma=1 / D, solver=Nystrom(n_landmarks=10),
                    random_state=0).fit(X[:2000])  # lazy imports out of the timings
    times = {}
    start = time.perf_counter()
    landmarks = select_landmarks(kernel, X, m, "uniform", rng=np.random.default_rng(0),
                                 block_bytes=block_bytes)
    times["landmarks"] = time.perf_counter() - start
    strip = max(1, min(worker_block_bytes(block_bytes) // 4, STRIP_BYTES)
                // (m * X.dtype.itemsize))  # as fit_nystrom
    chunks = X.to_delayed().ravel()
    start = time.perf_counter()
    compute(tree_sum([dask.delayed(_kernel_only)(b, landmarks, kernel, strip) for b in chunks]))
    times["k(x, L)"] = time.perf_counter() - start
    shift = kernel.pairwise(landmarks).astype(np.float64).mean(axis=0)
    start = time.perf_counter()
    compute(tree_sum([dask.delayed(_kernel_moments)(b, landmarks, kernel, strip, shift)
                      for b in chunks]))
    times["moments pass"] = time.perf_counter() - start
    times["moments"] = times["moments pass"] - times["k(x, L)"]
    start = time.perf_counter()
    K_LL = kernel.pairwise(landmarks).astype(np.float64)
    R = inverse_sqrt(K_LL)
    top_eigh(R.T @ K_LL @ R, K, overwrite=True)
    times["m × m eigenproblems"] = time.perf_counter() - start
    start = time.perf_counter()
    basis, _ = fit_nystrom(kernel, X, landmarks, ComponentRule.from_params(K, None),
                           block_bytes=block_bytes)
    times["fit (all of it)"] = time.perf_counter() - start
    start = time.perf_counter()
    compute(basis.transform(X).sum(axis=0))
    times["transform"] = time.perf_counter() - start
    cores = len(os.sched_getaffinity(0))
    return {"times": times, "bounds": phase_bounds(n, m, machine_rates(cores), cores),
            "cores": cores}


def _child(library: str, n: int, m: int, use_zarr: bool, results: mp.Queue) -> None:
    if library == "phases":
        results.put(_phases(n, m, use_zarr))
        return
    if library.startswith("cluster:"):
        _, workers, memory = library.split(":")
        results.put(_fit_on_cluster(n, m, int(workers), memory))
        return
    results.put(_fit(library, n, m, use_zarr))


def measure(library: str, n: int, m: int, use_zarr: bool, timeout: float) -> dict[str, Any]:
    """One fit in a spawned process; a crash or a timeout becomes the record's status."""
    return run_in_child(_child, (library, n, m, use_zarr), timeout)


def main(argv: list[str] | None = None) -> int:
    """Run the grid and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--m", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--zarr", action="store_true", help="dkpca reads X from Zarr")
    parser.add_argument("--skip-sklearn", action="store_true")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--phases", action="store_true",
                        help="time each phase of dkpca's fit against its bound instead")
    parser.add_argument("--cluster", nargs=2, metavar=("WORKERS", "MEMORY"),
                        help="dkpca fit + transform on a LocalCluster from Zarr")
    args = parser.parse_args(argv)
    print_environment(environment(), [sys.executable, *sys.argv])
    print(f"dkpca: {dkpca_source()}\n")
    if args.cluster:
        return _cluster_table(args)
    if args.phases:
        return _phase_table(args)
    rows = []
    for n in args.n:
        for m in args.m:
            ours = measure("dkpca", n, m, args.zarr, args.timeout)
            theirs = ({"status": "skipped"} if args.skip_sklearn
                      else measure("sklearn", n, m, False, args.timeout))
            both = ours["status"] == theirs["status"] == "ok"
            rows.append([
                f"{n:,}", m,
                f"{theirs['time']:.1f}" if theirs["status"] == "ok" else theirs["status"],
                f"{ours['time']:.1f}" if ours["status"] == "ok" else ours["status"],
                f"{theirs['time'] / ours['time']:.2f}" if both else "",
                f"{theirs['peak'] / 2**20:,.0f}" if theirs["status"] == "ok" else "",
                f"{ours['peak'] / 2**20:,.0f}" if ours["status"] == "ok" else "",
                f"{ours['peak'] / max(theirs['peak'], 1):.3f}" if both else "",
                f"{abs(ours['top'] / theirs['top'] - 1):.1e}" if both else "",
                f"{max(ours.get('other_load', 0), theirs.get('other_load', 0)):.2f}",
            ])
            print(rows[-1], flush=True)
    print()
    print(markdown_table(
        ["n", "m", "sklearn s", "dkpca s", "time ratio (sklearn/dkpca)", "sklearn peak MiB",
         "dkpca peak MiB", "memory ratio (dkpca/sklearn)", "λ1 rel. diff", "other load"],
        rows,
    ))
    return 0


def _phase_table(args: argparse.Namespace) -> int:
    rows = []
    for n in args.n:
        for m in args.m:
            record = measure("phases", n, m, args.zarr, args.timeout)
            if record["status"] != "ok":
                rows.append([f"{n:,}", m, record["status"], "", "", ""])
                continue
            for phase, seconds in record["times"].items():
                bound = record["bounds"][phase]
                rows.append([f"{n:,}", m, phase, f"{seconds:.2f}",
                             "" if np.isnan(bound) else f"{bound:.2f}",
                             "" if np.isnan(bound) else f"{seconds / bound:.2f}"])
                print(rows[-1], flush=True)
    print()
    print(markdown_table(["n", "m", "phase", "seconds", "bound s", "time / bound"], rows))
    return 0


def _cluster_table(args: argparse.Namespace) -> int:
    workers, memory = args.cluster
    rows = []
    for n in args.n:
        for m in args.m:
            record = measure(f"cluster:{workers}:{memory}", n, m, True, args.timeout)
            ok = record["status"] == "ok"
            rows.append([
                f"{n:,}", m, f"{n * D * 4 / 2**30:.1f}", f"{workers} x {memory}",
                f"{record['time']:.1f}" if ok else record["status"],
                f"{record['worker_peak'] / 2**20:,.0f}" if ok else "",
                f"{record['peak'] / 2**20:,.0f}" if ok else "",
                str(record["restarted"]) if ok else "",
            ])
            print(rows[-1], flush=True)
    print()
    print(markdown_table(["n", "m", "data GiB", "workers", "fit + transform s",
                          "worker peak MiB", "client peak MiB", "worker restarted"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
