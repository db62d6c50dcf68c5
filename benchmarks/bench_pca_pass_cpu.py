"""Where a randomized PCA pass over Zarr spends its CPU: per read and per pass, beside the kernel.

Issue 32's 40 GB pass took far longer than reading the array. This script opens a Zarr store
written by ``bench_pca_randomized.py``, starts a ``LocalCluster`` of 2 single-threaded worker
processes with the given memory limit, and prints, for ``--reads`` plain reads of every chunk
and then for each Krylov pass of ``dkpca.PCA(10, solver="randomized")`` (``--max-iter`` caps the
passes), the wall time, the machine's user, system and iowait CPU seconds, and the kernel's
counters of page faults, transparent-huge-page faults and compaction stalls
(``/proc/vmstat``; Linux only). At the end: the compute seconds per task kind from dask's task
stream. ``--numpy-hugepages off`` starts the workers with ``NUMPY_MADVISE_HUGEPAGE=0``, and
``--malloc reuse`` with glibc keeping freed blocks (see ``bench_pca_randomized.worker_env``).

One machine-wide account, so run it on a quiet machine; the store should not fit the page
cache, or the reads are memory copies.

Usage::

    python benchmarks/bench_pca_randomized.py --scenarios dense --chunk 2500 ...  # the store
    python benchmarks/bench_pca_pass_cpu.py \\
        benchmarks/results/pca-randomized-100000x100000-c2500.zarr --memory-limit 2500000000
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import dask.array as da
import numpy as np
import psutil

VMSTAT = ("pgfault", "thp_fault_alloc", "thp_fault_fallback", "compact_stall",
          "allocstall_movable", "pgscan_direct")


def vmstat() -> dict[str, int]:
    """The kernel's counters of :data:`VMSTAT` (zeros where ``/proc/vmstat`` is missing)."""
    path = Path("/proc/vmstat")
    if not path.exists():
        return dict.fromkeys(VMSTAT, 0)
    fields = dict(line.split() for line in path.read_text().splitlines())
    return {key: int(fields.get(key, 0)) for key in VMSTAT}


@contextlib.contextmanager
def accounted(label: str) -> Iterator[None]:
    """Print the wall time, CPU seconds and kernel counters spent inside the block."""
    cpu, counters, start = psutil.cpu_times(), vmstat(), time.perf_counter()
    yield
    wall, after, now = time.perf_counter() - start, psutil.cpu_times(), vmstat()
    deltas = " ".join(f"{key}={now[key] - counters[key]}" for key in VMSTAT)
    print(f"{label}: {wall:.1f} s, user {after.user - cpu.user:.1f} s, system "
          f"{after.system - cpu.system:.1f} s, iowait "
          f"{getattr(after, 'iowait', 0) - getattr(cpu, 'iowait', 0):.1f} s; {deltas}",
          flush=True)


def _accounted_passes() -> None:
    """Wrap the randomized solver's two one-pass products in :func:`accounted`."""
    from dkpca._pca_randomized import _CentredOperator

    for name in ("scatter_times", "gram_times", "scatter_groups", "gram_groups"):
        product = getattr(_CentredOperator, name)

        def wrapped(self: object, V: np.ndarray, product: object = product) -> np.ndarray:
            with accounted(f"pass {self.passes}"):  # pass 0: the statistics
                return product(self, V)

        setattr(_CentredOperator, name, wrapped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store")
    parser.add_argument("--memory-limit", type=int, required=True, help="bytes per worker")
    parser.add_argument("--max-iter", type=int, default=3, help="Krylov passes at most")
    parser.add_argument("--reads", type=int, default=1, help="plain reads before the fit")
    parser.add_argument("--numpy-hugepages", choices=("default", "off"), default="default")
    parser.add_argument("--malloc", choices=("dask", "reuse"), default="dask")
    args = parser.parse_args(argv)

    # this script's folder is on the path
    from bench_pca_randomized import _touch, worker_env
    from distributed import Client, LocalCluster, get_task_stream

    import dkpca
    from dkpca.cluster import spawned_with

    _accounted_passes()
    with (spawned_with(worker_env(args.numpy_hugepages, args.malloc)),
          LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=args.memory_limit,
                       processes=True, dashboard_address=None) as cluster, Client(cluster)):
        X = da.from_zarr(args.store)
        print(f"{X.shape} {X.dtype}, chunks {X.chunksize}; numpy huge pages in the workers: "
              f"{args.numpy_hugepages}; malloc: {args.malloc}", flush=True)
        for read in range(args.reads):
            with accounted(f"read {read + 1}"):
                X.map_blocks(_touch, chunks=(1, 1)).sum().compute()
        with get_task_stream() as stream, accounted("fit"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # max_iter caps the passes: not converged
            dkpca.PCA(10, solver="randomized", max_iter=args.max_iter, random_state=0).fit(X)
    seconds: dict[str, float] = collections.defaultdict(float)
    for record in stream.data:
        key = record["key"][0] if isinstance(record["key"], tuple) else record["key"]
        for step in record["startstops"]:
            if step["action"] == "compute":
                seconds[str(key).split("-")[0]] += step["stop"] - step["start"]
    for kind, total in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"compute {kind}: {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
