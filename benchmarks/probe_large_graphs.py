"""In-memory data in task graphs under a ``distributed.Client`` (issue 30, point 5).

Fits and transforms numpy arrays on a ``LocalCluster`` of worker processes and prints, for each
call, its time, the sizes of the graphs distributed warned about ("Sending large graph",
above ``--warn-above``, distributed's 10 MB by default: what went to the scheduler inside a
graph) and the bytes the client scattered to the workers beside the graphs. Run it on two
commits to compare; times are single runs on a shared machine.

    python benchmarks/probe_large_graphs.py --n 30000 --workers 2
    python benchmarks/probe_large_graphs.py --n 30000 --workers 2 --warn-above 1MB
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from _common import environment, print_environment

import dkpca
from dkpca.options import Nystrom

_SCATTERED: list[int] = []


def _counting_scatter(scatter):
    """``Client.scatter``, adding the bytes of the numpy arrays it sends to ``_SCATTERED``."""
    def counted(client, data, *args, **kwargs):
        values = data if isinstance(data, list | tuple) else [data]
        _SCATTERED.append(sum(v.nbytes for v in values if isinstance(v, np.ndarray)))
        return scatter(client, data, *args, **kwargs)
    return counted


def _timed(name: str, call) -> None:
    _SCATTERED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.perf_counter()
        call()
        seconds = time.perf_counter() - started
    sizes = [str(w.message).split("of size ")[1].split(".\n")[0]
             for w in caught if "large graph" in str(w.message)]
    print(f"| {name} | {seconds:.2f} | {', '.join(sizes) or 'none'} | "
          f"{sum(_SCATTERED) / 2**20:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30_000, help="rows fitted, and rows transformed")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warn-above", default="10MB",
                        help="distributed's large-graph warning threshold")
    parser.add_argument("--loo-rows", type=int, default=1000,
                        help="rows of the exact model whose leave-one-out projections are made")
    args = parser.parse_args()
    import dask
    from distributed import Client, LocalCluster

    from dkpca.generalization import loo_projections
    from dkpca.options import ICF, FixedSize, Sketch

    Client.scatter = _counting_scatter(Client.scatter)

    print_environment(environment(), [sys.executable, *sys.argv])
    rng = np.random.default_rng(0)
    X, new = rng.normal(size=(args.n, 64)), rng.normal(size=(args.n, 64))
    with (LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None)
          as cluster, Client(cluster),
          dask.config.set({"distributed.admin.large-graph-warning-threshold": args.warn_above})):
        print(f"\n{args.n} x 64 numpy, {args.workers} worker processes x 1 thread, graphs "
              f"reported above {args.warn_above}\n")
        print("| call | time (s) | large graphs sent | arrays scattered (MiB) |")
        print("|---|---|---|---|")
        kpca = dkpca.KernelPCA(5, random_state=0)
        _timed("KernelPCA(5).fit (randomized)", lambda: kpca.fit(X))
        _timed(f"transform, {args.n} new rows", lambda: kpca.transform(new))
        _timed("transform, 1,000 new rows", lambda: kpca.transform(new[:1000]))
        _timed("transform, 1,000 new rows again", lambda: kpca.transform(new[:1000]))
        nystrom = dkpca.KernelPCA(5, solver=Nystrom(n_landmarks=500), random_state=0)
        _timed("Nyström fit, 500 landmarks", lambda: nystrom.fit(X))
        _timed(f"Nyström transform, {args.n} new rows", lambda: nystrom.transform(new))
        pca = dkpca.PCA(5).fit(X)
        _timed(f"PCA(5) transform, {args.n} new rows", lambda: pca.transform(new))
        sketch = dkpca.KernelPCA(5, solver=Sketch(), random_state=0)
        _timed("Sketch fit", lambda: sketch.fit(X))
        icf = dkpca.KernelPCA(5, solver=ICF(max_rank=200), random_state=0)
        _timed("incomplete Cholesky fit, rank 200", lambda: icf.fit(X))
        fixed = dkpca.KernelPCA(5, solver=FixedSize(n_landmarks=500), random_state=0)
        _timed("fixed-size fit, 500 landmarks", lambda: fixed.fit(X))
        _timed("denoise, 1,000 new rows", lambda: kpca.denoise(new[:1000]))
        rows = X[:args.loo_rows]
        exact = dkpca.KernelPCA(5, solver="exact").fit(rows)
        _timed(f"loo_projections, exact model of {args.loo_rows} rows",
               lambda: loo_projections(exact, rows))


if __name__ == "__main__":
    main()
