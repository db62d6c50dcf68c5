"""Linear PCA: dkpca versus scikit-learn's ``PCA`` and dask-ml's ``PCA``, time and memory.

Data: ``make_classification(n, d, n_informative=d // 2, random_state=0)`` standardised
(``StandardScaler``), float64, 10 components.

* scikit-learn: ``PCA(10).fit(X)`` (``svd_solver="auto"``, which takes ``covariance_eigh``
  for these shapes: one ``Xᵀ X`` on all cores).
* dkpca: ``dkpca.PCA(10).fit(X)`` on the numpy array; ``dkpca-zarr`` fits the same data as
  a dask array read from a Zarr array on disk (32 MiB chunks, zstd, written once): its
  memory is what reading and decompressing takes, not a figure above an input in memory.
* dask-ml (where installed): ``dask_ml.decomposition.PCA(10, svd_solver="full")`` on the
  numpy array as a dask array of 100,000-row chunks (tall-and-skinny QR).

Each measurement runs in its own spawned process: the data is generated, one fit on the
first 2,000 rows loads every lazy import, then the measured fit runs. *time* is its wall time
(best of ``--repeat`` processes); *RSS peak* is the peak resident set size during that fit
minus the one before it (psutil, every 5 ms; it includes BLAS buffers and allocator effects);
*traced peak* is the peak of the allocations ``tracemalloc`` sees (numpy's and Python's) during
a second fit, which is deterministic. Memory ratios are dkpca / scikit-learn.

*bound* is the time of the pass's work at this machine's rates, measured in the same run:
``n d²`` flops (the symmetric half of ``Xᵀ X``) at the float64 GEMM rate, or ``8 n d`` bytes
read at the memory bandwidth (``np.sum`` over 512 MiB), whichever is longer.

Usage::

    python benchmarks/bench_pca.py                     # 1,000,000 x 64 and 100,000 x 784
    python benchmarks/bench_pca.py --shapes 200000x64 --repeat 1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
import tracemalloc
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

K, CHUNK = 10, 100_000
ZARR_CHUNK_BYTES = 32 * 2**20
RESULTS = Path(__file__).parent / "results"
LIBRARIES = ("sklearn", "dkpca", "dkpca-zarr", "dask-ml")


def make_data(n: int, d: int) -> np.ndarray:
    """Standardised ``make_classification`` features, float64, C-ordered."""
    from sklearn.datasets import make_classification
    from sklearn.preprocessing import StandardScaler

    X, _ = make_classification(n, d, n_informative=d // 2, n_redundant=d // 4,
                               random_state=0)
    return np.ascontiguousarray(StandardScaler(copy=False).fit_transform(X))


def zarr_path(n: int, d: int) -> Path:
    """The same data in a Zarr array under ``benchmarks/results`` (written once)."""
    import zarr

    path = RESULTS / f"pca-{n}x{d}.zarr"
    if not (path / "zarr.json").exists():
        RESULTS.mkdir(exist_ok=True)
        X = make_data(n, d)
        rows = max(1, ZARR_CHUNK_BYTES // (8 * d))
        array = zarr.create_array(path, shape=X.shape, dtype="float64", chunks=(rows, d),
                                  overwrite=True)
        array[:] = X
    return path


def _estimator(library: str) -> Any:
    if library == "sklearn":
        from sklearn.decomposition import PCA

        return PCA(K)
    if library == "dask-ml":
        from dask_ml.decomposition import PCA

        return PCA(K, svd_solver="full")
    import dkpca

    return dkpca.PCA(K)


def _input(library: str, n: int, d: int) -> Any:
    import dask.array as da

    if library == "dkpca-zarr":
        return da.from_zarr(str(zarr_path(n, d)))
    X = make_data(n, d)
    return da.from_array(X, chunks=(CHUNK, -1)) if library == "dask-ml" else X


def _child(library: str, n: int, d: int, results: mp.Queue) -> None:
    X = _input(library, n, d)
    _estimator(library).fit(X[:2000])  # lazy imports and first-call caches
    with Monitor() as monitor:
        model = _estimator(library).fit(X)
    tracemalloc.start()
    _estimator(library).fit(X)
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    results.put({"time": monitor.elapsed, "rss": monitor.peak_increase, "traced": traced,
                 "other_load": monitor.other_load,
                 "variance": np.asarray(model.explained_variance_, dtype=np.float64)})


def measure(library: str, n: int, d: int, timeout: float) -> dict[str, Any]:
    """One measurement in a spawned process; a crash or a timeout becomes the status."""
    return run_in_child(_child, (library, n, d), timeout)


def best(library: str, n: int, d: int, repeat: int, timeout: float) -> dict[str, Any]:
    """The fastest of ``repeat`` measurements (each in a fresh process)."""
    records = [measure(library, n, d, timeout) for _ in range(repeat)]
    ok = [r for r in records if r["status"] == "ok"]
    return min(ok, key=lambda r: r["time"]) if ok else records[0]


def machine_rates() -> dict[str, float]:
    """Float64 GEMM flop rate (all cores) and memory read bandwidth, measured now."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((2048, 2048)), rng.standard_normal((2048, 2048))
    A @ B
    start = time.perf_counter()
    for _ in range(3):
        A @ B
    gemm = 3 * 2 * 2048**3 / (time.perf_counter() - start)
    big = np.ones(2**26)  # 512 MiB
    big.sum()
    start = time.perf_counter()
    for _ in range(3):
        big.sum()
    bandwidth = 3 * big.nbytes / (time.perf_counter() - start)
    return {"gemm": gemm, "bandwidth": bandwidth}


def bound(n: int, d: int, rates: dict[str, float]) -> float:
    """Seconds the one pass needs at least: its flops or its reads, whichever is longer."""
    return max(n * d * d / rates["gemm"], 8 * n * d / rates["bandwidth"])


def _available(library: str) -> bool:
    if library != "dask-ml":
        return True
    try:
        import dask_ml  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the grid and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["1000000x64", "100000x784"])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    print_environment(environment(), [sys.executable, *sys.argv])
    print(f"dkpca: {dkpca_source()}\n")
    rates = machine_rates()
    print(f"float64 GEMM {rates['gemm'] / 1e9:.1f} GFLOP/s, memory read "
          f"{rates['bandwidth'] / 1e9:.1f} GB/s\n", flush=True)
    rows = []
    for shape in args.shapes:
        n, d = (int(v) for v in shape.split("x"))
        records = {lib: best(lib, n, d, args.repeat, args.timeout) if _available(lib)
                   else {"status": "not installed"} for lib in LIBRARIES}
        reference = records["sklearn"]
        for lib, record in records.items():
            ok = record["status"] == "ok" and reference["status"] == "ok"
            rows.append([
                f"{n:,} × {d}", lib,
                f"{record['time']:.3f}" if record["status"] == "ok" else record["status"],
                f"{record['time'] / reference['time']:.2f}" if ok else "",
                f"{record['time'] / bound(n, d, rates):.1f}" if ok else "",
                f"{record['rss'] / 2**20:.2f}" if ok else "",
                f"{record['traced'] / 2**20:.2f}" if ok else "",
                f"{record['traced'] / max(reference['traced'], 1):.2f}" if ok else "",
                (f"{np.max(np.abs(record['variance'] / reference['variance'] - 1)):.1e}"
                 if ok else ""),
                f"{record.get('other_load', 0):.2f}",
            ])
            print(rows[-1], flush=True)
    print()
    print(markdown_table(
        ["n × d", "library", "fit s", "time / sklearn", "time / bound", "RSS peak MiB",
         "traced peak MiB", "traced / sklearn", "variance rel. diff", "other load"],
        rows,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
