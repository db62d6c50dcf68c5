"""Model selection: MDD versus kernel parallel analysis, on 1 and 2 dask workers and threads.

Data: ``make_square(2000, random_state=0)`` (the MDD paper's noisy square outline, 2-D). For
each training-set size ``N_t`` (random rows) the validation set is every other row (for
``N_t = 1000``, the other 1000 points). ``select_model`` runs with ``n_draws`` Monte Carlo
draws (MDD) or permutations (kPA) over the default 20-point ``σ²`` grid, ``random_state=0``,
on a ``LocalCluster`` of 1 and then 2 worker processes (1 thread each; dask's nanny limits
their BLAS to 1 thread), started before timing and warmed up by an untimed call with 2 draws.

A plain reference does the same MDD computation in this process without dask tasks, with
BLAS limited to 1 thread: the distance moments (one pass, dask's sync scheduler), the data's
spectra, then a loop over ``n_draws`` calls of ``mdd.noise_spectra`` (seeds
``SeedSequence(0).spawn(n_draws)``), the percentile and the decision. Its grid and training
rows are those of the 1-worker MDD run.

Memory: "client MiB" is the peak resident-set increase of this process (the client, holding the
scheduler and nannies) over the call, sampled by ``_common.Monitor``; "workers MiB" the same for
the summed RSS of its child processes (the workers). "other load" counts cores kept busy by
processes outside this process tree.

Thread scaling (the fan-out on the threaded scheduler): the README's ``select_model`` call,
MDD on the noisy ``make_two_rings(2000, random_state=0)`` with ``--scaling-n-train`` random
training rows (default 500; the rest validate) and ``--scaling-draws`` draws (default 50),
``random_state=0``, under
``dask.config.set(scheduler="threads", num_workers=T)`` for ``T`` = 1, 2, 4, ... up to
``os.cpu_count()`` (and ``os.cpu_count()`` itself). Each run is a fresh process that warms up
with an untimed 2-draw call on 200 rows and then times the call; ``--repeats`` runs per ``T``
(default 3), the best counted. "CPU / wall" is the process's CPU time over the wall time (how
many cores it kept busy); the speed-up is the 1-thread time over the ``T``-thread time, and every
run's tables must be identical bit for bit (a SHA-1 of the data and noise eigenvalues).

Usage::

    python benchmarks/bench_selection.py                  # N_t = 500, 1000; 100 draws; threads
    python benchmarks/bench_selection.py --quick          # N_t = 200; 10 draws
    python benchmarks/bench_selection.py --only threads   # the thread-scaling table alone
    python benchmarks/bench_selection.py --sizes 300 --n-draws 20 --json results/sel.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any

import dask
import numpy as np
from _common import (
    Monitor,
    environment,
    markdown_table,
    print_environment,
    timed_on_cluster,
    wait_for_quiet,
)
from distributed import Client, LocalCluster
from threadpoolctl import threadpool_limits

from dkpca.datasets import make_square, make_two_rings
from dkpca.io import as_dask
from dkpca.selection import mdd, select_model
from dkpca.selection._distances import distance_moments
from dkpca.selection._spectra import centred_rbf_eigenvalues, squared_distances

METHODS = ("mdd", "kpa")
WORKERS = (1, 2)
PERCENTILE = 95.0
SCALING_ROWS = 2000


def plain_mdd(X: np.ndarray, index: np.ndarray, grid: np.ndarray, n_draws: int) -> tuple:
    """The MDD computation as a plain loop: ``(σ², n_c)``."""
    n_t = index.size
    with threadpool_limits(1), dask.config.set(scheduler="sync"):
        train = X[index]
        sq = squared_distances(train)
        moments = distance_moments(train, sq, n_t, as_dask(X), others_include_train=True)
        moments = moments.compute()
        lam = centred_rbf_eigenvalues(sq, grid, n_t - 1)
        noise = [mdd.noise_spectra(seed, moments, n_t, grid, n_t - 1)
                 for seed in np.random.SeedSequence(0).spawn(n_draws)]
    tau = np.percentile(np.stack(noise), PERCENTILE, axis=0)
    counts = mdd.components_above_noise(lam, tau)
    best = int(np.argmax(mdd.structural_information(lam, tau, counts)))
    return float(grid[best]), int(counts[best])


def run(X: np.ndarray, sizes: list[int], n_draws: int) -> list[dict[str, Any]]:
    """One record per (N_t, workers, method), then the plain reference per N_t."""
    records = []
    for workers in WORKERS:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            client.wait_for_workers(workers)
            for method in METHODS:  # warm-up, untimed
                select_model(X, method, n_draws=2, n_train=sizes[0], random_state=0)
            for n_t in sizes:
                for method in METHODS:
                    res, stats = timed_on_cluster(True, select_model, X, method, n_draws=n_draws,
                                        n_train=n_t, random_state=0)
                    records.append({"n_t": n_t, "workers": workers, "method": method,
                                    "sigma2": res.sigma2, "n_c": res.n_components, **stats,
                                    "index": res.training_index,
                                    "grid": res.table.sigma2.values})
                    print(f"N_t={n_t} workers={workers} {method}: {stats['seconds']:.1f} s, "
                          f"sigma2={res.sigma2}, n_c={res.n_components}, "
                          f"other load {stats['other_load']:.2f}", file=sys.stderr, flush=True)
    for n_t in sizes:
        ref = next(r for r in records if r["n_t"] == n_t and r["workers"] == 1
                   and r["method"] == "mdd")
        (sigma2, n_c), stats = timed_on_cluster(False, plain_mdd, X, ref["index"], ref["grid"],
                                                n_draws)
        records.append({"n_t": n_t, "workers": "plain loop", "method": "mdd", "sigma2": sigma2,
                        "n_c": n_c, **stats})
        print(f"N_t={n_t} plain loop mdd: {stats['seconds']:.1f} s, sigma2={sigma2}, "
              f"n_c={n_c}", file=sys.stderr, flush=True)
    for r in records:
        r.pop("index", None)
        r.pop("grid", None)
    return records


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None or np.isnan(value) else format(value, spec)


def table(records: list[dict[str, Any]]) -> str:
    """Markdown table with the speed-ups and ratios."""
    def seconds(n_t, workers, method):
        return next((r["seconds"] for r in records if (r["n_t"], r["workers"], r["method"])
                     == (n_t, workers, method)), None)

    rows = []
    for n_t in sorted({r["n_t"] for r in records}):
        for r in [r for r in records if r["n_t"] == n_t]:
            w, m, s = r["workers"], r["method"], r["seconds"]
            one = seconds(n_t, 1, m)
            speedup = one / s if w == 2 and one else None
            ratio = s / seconds(n_t, w, "kpa") if m == "mdd" and seconds(n_t, w, "kpa") else None
            plain = seconds(n_t, "plain loop", "mdd")
            vs_plain = s / plain if m == "mdd" and plain and w != "plain loop" else None
            rows.append([n_t, w, m.upper() if m == "mdd" else "kPA", f"{s:.1f}",
                         _fmt(speedup, ".2f"), _fmt(ratio, ".2f"), _fmt(vs_plain, ".2f"),
                         _fmt(r["sigma2"], ".4g"), r["n_c"], _fmt(r["client_mib"], ".0f"),
                         _fmt(r["workers_mib"], ".0f"), f"{r['other_load']:.2f}"])
    return markdown_table(["N_t", "workers", "method", "seconds", "speed-up (1w/2w)",
                           "MDD/kPA time", "time / plain loop", "σ²", "n_c", "client MiB",
                           "workers MiB", "other load"], rows)


def thread_counts() -> list[int]:
    """1, 2, 4, ... up to ``os.cpu_count()``, and ``os.cpu_count()`` itself."""
    cores = os.cpu_count() or 1
    counts = [2**i for i in range(cores.bit_length()) if 2**i <= cores]
    return counts if counts[-1] == cores else [*counts, cores]


def scaling_child(threads: int, n_draws: int, n_train: int, device: str) -> dict[str, Any]:
    """One timed ``select_model`` on ``threads`` dask threads (run in a fresh process).

    ``device="cuda"`` solves the eigenproblems on the GPU (``dkpca.device``).
    """
    X, _, _ = make_two_rings(SCALING_ROWS, random_state=0)
    with dask.config.set({"scheduler": "threads", "num_workers": threads,
                          "dkpca.device": device}):
        select_model(X, n_draws=2, n_train=200, random_state=0)  # warm-up: imports, caches
        wait_for_quiet(0.2, patience=120.0)  # a second core is what this measures
        cpu = time.process_time()
        with Monitor() as monitor:
            res = select_model(X, n_draws=n_draws, n_train=n_train, random_state=0)
        cpu = time.process_time() - cpu
    table = res.table
    digest = hashlib.sha1(table["data_eigenvalues"].values.tobytes()
                          + table["noise_eigenvalues"].values.tobytes()).hexdigest()
    return {"threads": threads, "seconds": monitor.elapsed, "cpu_seconds": cpu,
            "other_load": monitor.other_load, "sigma2": res.sigma2,
            "n_c": res.n_components, "n_train": table.attrs["n_train"], "sha1": digest}


def run_scaling(n_draws: int, n_train: int, repeats: int,
                device: str = "cpu") -> list[dict[str, Any]]:
    """Every run of the thread-scaling table, each in a fresh process."""
    records = []
    for repeat in range(repeats):
        for threads in thread_counts():  # interleaved, so a slow spell hits every count
            command = [sys.executable, __file__, "--child-threads", str(threads),
                       "--scaling-draws", str(n_draws), "--scaling-n-train", str(n_train),
                       "--device", device]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            record = {"repeat": repeat, **json.loads(out.splitlines()[-1])}
            records.append(record)
            print(f"threads={threads} repeat {repeat}: {record['seconds']:.1f} s, CPU "
                  f"{record['cpu_seconds']:.1f} s, other load {record['other_load']:.2f}",
                  file=sys.stderr, flush=True)
    return records


def scaling_table(records: list[dict[str, Any]]) -> str:
    """Markdown table: the best time per thread count and its speed-up over 1 thread."""
    best = {}
    for r in records:
        if r["threads"] not in best or r["seconds"] < best[r["threads"]]["seconds"]:
            best[r["threads"]] = r
    one = best[min(best)]["seconds"]
    identical = "yes" if len({r["sha1"] for r in records}) == 1 else "NO"
    rows = [[t, f"{r['seconds']:.2f}",
             ", ".join(f"{x['seconds']:.2f}" for x in records if x["threads"] == t),
             f"{one / r['seconds']:.2f}", f"{r['cpu_seconds'] / r['seconds']:.2f}",
             _fmt(r["sigma2"], ".4g"), r["n_c"], f"{r['other_load']:.2f}"]
            for t, r in sorted(best.items())]
    return (markdown_table(["threads", "seconds (best)", "all runs", "speed-up (vs 1 thread)",
                            "CPU / wall", "σ²", "n_c", "other load"], rows)
            + f"\n\nSame tables (SHA-1 of the eigenvalues) in every run: {identical}")


def main(argv: list[str] | None = None) -> int:
    """Run the grid, print the environment and markdown tables, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000],
                        help="training-set sizes N_t")
    parser.add_argument("--n-draws", type=int, default=100)
    parser.add_argument("--only", choices=["workers", "threads"],
                        help="run one table: 1 and 2 workers, or the thread scaling")
    parser.add_argument("--scaling-draws", type=int, default=50,
                        help="draws in the thread-scaling runs")
    parser.add_argument("--scaling-n-train", type=int, default=500,
                        help="training rows in the thread-scaling runs")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh-process runs per thread count, the best counted")
    parser.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: N_t = 200, 10 draws, one run per thread count")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the thread-scaling runs solve their eigenproblems")
    args = parser.parse_args(argv)
    if args.child_threads is not None:
        print(json.dumps(scaling_child(args.child_threads, args.scaling_draws,
                                       args.scaling_n_train, args.device)))
        return 0
    if args.quick:
        args.sizes, args.n_draws = [200], 10
        args.scaling_draws, args.scaling_n_train, args.repeats = 10, 200, 1
    env = environment()
    print_environment(env, [sys.executable, *sys.argv])
    results: dict[str, Any] = {}
    if args.only != "threads":
        X, _, _ = make_square(2000, random_state=0)
        results["workers"] = run(X, args.sizes, args.n_draws)
        print(f"## select_model: {args.n_draws} draws, 20-point σ² grid, make_square(2000)\n")
        print(table(results["workers"]))
    if args.only != "workers":
        results["threads"] = run_scaling(args.scaling_draws, args.scaling_n_train, args.repeats,
                                         args.device)
        print(f"\n## Thread scaling: MDD, {args.scaling_draws} draws, N_t = "
              f"{args.scaling_n_train}, make_two_rings({SCALING_ROWS}), threaded scheduler, "
              f"eigenproblems on {args.device}, best of {args.repeats} fresh processes\n")
        print(scaling_table(results["threads"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "args": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
