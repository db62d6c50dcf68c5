"""A Krylov pass's transport on a ``LocalCluster``: direct calls with shared memory, or tasks and sockets.

Builds cached float32 RBF tiles of ``n × 64`` Gaussian data on a ``LocalCluster`` of the given
shape, then times ``KernelTiles.matmul`` (``K V``, ``V`` of width 32) alternately through the
two transports of :mod:`dkpca.tiles` on the same tiles in the same process: shared memory
(``V`` and the partials in ``/dev/shm``, one direct call per worker, no task) and sockets (one
task per worker, ``V`` scattered and the partials gathered). Reports the median and best of
``--repeat`` alternations each, their ratio, and the threaded product on the same cores for
reference (this process's threads, timed before the cluster starts). The products are checked
equal bit for bit.

Usage::

    python benchmarks/probe_pass_transport.py --shapes 1x2 2x1 --n 4000 20000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from _common import environment, print_environment


def _seconds(product) -> float:
    start = time.perf_counter()
    product()
    return time.perf_counter() - start


def _tiles(n: int):
    from dkpca.kernels import RBF
    from dkpca.tiles import cache_kernel_tiles

    X = np.random.default_rng(0).normal(size=(n, 64))
    return cache_kernel_tiles(RBF(gamma=1 / 64), X, block_bytes=64 * 2**20, dtype=np.float32)


def _threaded(n: int, V: np.ndarray, cores: int, repeat: int) -> list[float]:
    import dask

    with dask.config.set(scheduler="threads", num_workers=cores):
        tiles = _tiles(n)
        tiles.matmul(V)
        return [_seconds(lambda: tiles.matmul(V)) for _ in range(repeat)]


def _on_cluster(shape: str, n: int, V: np.ndarray, repeat: int) -> tuple[dict, str]:
    from distributed import Client, LocalCluster

    workers, threads = map(int, shape.split("x"))
    with (LocalCluster(n_workers=workers, threads_per_worker=threads,
                       dashboard_address=None) as cluster, Client(cluster)):
        tiles = _tiles(n)
        shared = tiles.matmul(V)  # probes the workers
        if not tiles._shared:
            raise SystemExit("shared memory is not reachable here: nothing to compare")
        tiles._shared = False
        np.testing.assert_array_equal(tiles.matmul(V), shared)
        times: dict[str, list[float]] = {"shared memory": [], "sockets": []}
        for _ in range(repeat):
            for transport, seconds in times.items():
                tiles._shared = transport == "shared memory"
                seconds.append(_seconds(lambda: tiles.matmul(V)))
        return times, tiles.layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["1x2", "2x1"])
    parser.add_argument("--n", nargs="+", type=int, default=[4_000, 20_000])
    parser.add_argument("--repeat", type=int, default=12)
    args = parser.parse_args()
    print_environment(environment(), sys.argv)
    print("| n | shape | layout | threaded (ms) | shared memory (ms) | sockets (ms) "
          "| sockets / shared memory |")
    print("|---|---|---|---|---|---|---|")
    for n in args.n:
        V = np.random.default_rng(1).normal(size=(n, 32))
        for shape in args.shapes:
            cores = int(np.prod([int(part) for part in shape.split("x")]))
            threaded = _threaded(n, V, cores, args.repeat)
            times, layout = _on_cluster(shape, n, V, args.repeat)
            shared, sockets = (statistics.median(times[t]) for t in ("shared memory", "sockets"))
            cells = [f"{statistics.median(ts) * 1e3:.1f} / {min(ts) * 1e3:.1f}"
                     for ts in (threaded, times["shared memory"], times["sockets"])]
            print(f"| {n:,} | {shape} | {layout} | " + " | ".join(cells)
                  + f" | {sockets / shared:.2f} |", flush=True)


if __name__ == "__main__":
    main()
