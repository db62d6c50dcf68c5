"""Leave-one-out projections: exact refits on 1 and 2 dask workers versus the approximation.

Data: ``make_unbalanced_semicircles(N, D, snr=500, random_state=0)`` (the LOO paper's §4.1
simulation). Model: ``KernelPCA(5, kernel=RBF(c=c)).fit(X)`` with ``c`` = 0.05 times the median
squared distance between the points. ``loo_projections(kp, X, "exact")`` (``N`` refits, one
dask task each) runs on a ``LocalCluster`` of 1 and then 2 worker processes (1 thread each;
dask's nanny limits their BLAS to 1 thread), started before timing and warmed up by an
untimed exact LOO of a 20-point model. ``loo_projections(kp, X, "approximate")`` (one Gram
inverse, in the client process) is timed beside each, and once more in this process with
BLAS limited to 1 thread and no cluster. The exact projections are then timed on dask's
threaded scheduler, on 1 and 2 threads, in this process. For this model (exact solver) the
refits share one kernel matrix, evaluated in the call (``dkpca.generalization._kernel_folds``):
a task is a group of folds' eigenproblems (solved together, a stack at a time) and
projections, no kernel evaluation. ``--model linear``: the same with ``PCA(5)`` (its exact
refits share the Gram matrix ``X Xᵀ``, the linear kernel).

Plain references, in this process without dask tasks (BLAS 1 thread, dask's sync scheduler):

- "plain loop, left-out": ``N`` refits of ``KernelPCA`` on the ``N - 1``-point subsets, each
  transforming only its left-out point: the bare cost of exact LOO.
- "plain loop, aligned": the same work as one exact task each: every refit transforms all
  ``N`` points and its components are matched (order and sign) to the full model's. Its result
  is checked against the dask one.

Accuracy: per component, the correlation between the approximate and the exact (1-worker) LOO
projections and the ratio of their standard deviations (approximate / exact); the training
projections' std over the exact LOO std (the variance inflation) is shown beside them.

Memory: "client MiB" is the peak resident-set increase of this process (the client, holding the
scheduler and nannies) over the call, sampled by ``_common.Monitor``; "workers MiB" the same for
the summed RSS of its child processes (the workers). "other load" counts cores kept busy by
processes outside this process tree.

Usage::

    python benchmarks/bench_loo.py                  # N = 500, D = 1000
    python benchmarks/bench_loo.py --quick          # N = 100, D = 300
    python benchmarks/bench_loo.py --n 200 --d 500 --json results/loo.json
    python benchmarks/bench_loo.py --model linear   # PCA(5) instead of kernel PCA
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import dask
import numpy as np
from _common import (
    environment,
    markdown_table,
    print_environment,
    timed_on_cluster,
)
from distributed import Client, LocalCluster
from scipy.spatial.distance import pdist
from threadpoolctl import threadpool_limits

from dkpca import PCA, KernelPCA
from dkpca.datasets import make_unbalanced_semicircles
from dkpca.generalization import loo_projections
from dkpca.generalization.loo import _match
from dkpca.kernels import RBF

WORKERS = (1, 2)
THREADS = (1, 2)
N_COMPONENTS = 5
C_FACTOR = 0.05
SNR = 500.0
WARMUP_N = 20


def _model(X: np.ndarray, c: float, kind: str) -> KernelPCA | PCA:
    """The benchmarked model fitted on ``X``: RBF kernel PCA, or linear PCA (``c`` unused)."""
    if kind == "linear":
        return PCA(N_COMPONENTS).fit(X)
    return KernelPCA(N_COMPONENTS, kernel=RBF(c=c)).fit(X)


def plain_loop(X: np.ndarray, c: float, full_scores: np.ndarray, aligned: bool,
               kind: str) -> np.ndarray:
    """``N`` serial refits without dask tasks: the left-out point's projection ``(N, k)``.

    ``aligned``: transform every point and match components to ``full_scores`` (the work of
    one exact task); otherwise transform the left-out point only (signs and order unaligned).
    """
    out = np.empty((len(X), N_COMPONENTS))
    with threadpool_limits(1), dask.config.set(scheduler="sync"):
        for n in range(len(X)):
            keep = np.arange(len(X)) != n
            model = _model(X[keep], c, kind)
            if aligned:
                scores = np.asarray(model.transform(X))
                order, signs = _match(full_scores, scores)
                out[n] = scores[n, order] * signs
            else:
                out[n] = np.asarray(model.transform(X[n : n + 1]))[0]
    return out


def approximate_in_process(kp: KernelPCA | PCA, X: np.ndarray) -> np.ndarray:
    """The approximate LOO projections with BLAS limited to 1 thread, no cluster."""
    with threadpool_limits(1), dask.config.set(scheduler="sync"):
        return loo_projections(kp, X, "approximate")


def _log(label: str, stats: dict[str, float]) -> None:
    print(f"{label}: {stats['seconds']:.2f} s, other load {stats['other_load']:.2f}",
          file=sys.stderr, flush=True)


def run(n: int, d: int, kind: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Timing records per (workers, method), then the in-process ones; and the accuracy."""
    X, _ = make_unbalanced_semicircles(n, d, snr=SNR, random_state=0)
    c = C_FACTOR * float(np.median(pdist(X, "sqeuclidean")))
    kp = _model(X, c, kind)
    full_scores = np.asarray(kp.transform(X))
    warm_X = X[:WARMUP_N]
    warm = _model(warm_X, C_FACTOR * float(np.median(pdist(warm_X, "sqeuclidean"))), kind)
    records: list[dict[str, Any]] = []
    exact: dict[int, np.ndarray] = {}
    approx = None
    for workers in WORKERS:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            client.wait_for_workers(workers)
            loo_projections(warm, warm_X, "exact")  # warm-up, untimed
            loo_projections(warm, warm_X, "approximate")
            for method in ("exact", "approximate"):
                res, stats = timed_on_cluster(True, loo_projections, kp, X, method)
                records.append({"n": n, "d": d, "workers": workers, "method": method, **stats})
                _log(f"N={n} D={d} workers={workers} {method}", stats)
                if method == "exact":
                    exact[workers] = res
                else:
                    approx = res
    for threads in THREADS:
        with dask.config.set(scheduler="threads", num_workers=threads):
            res, stats = timed_on_cluster(False, loo_projections, kp, X, "exact")
        label = f"threads:{threads}"
        records.append({"n": n, "d": d, "workers": label, "method": "exact", **stats})
        _log(f"N={n} D={d} {label} exact", stats)
        exact[label] = res
    for label, func, args in [
        ("in-process", approximate_in_process, (kp, X)),
        ("plain loop, left-out", plain_loop, (X, c, full_scores, False, kind)),
        ("plain loop, aligned", plain_loop, (X, c, full_scores, True, kind)),
    ]:
        res, stats = timed_on_cluster(False, func, *args)
        method = "approximate" if label == "in-process" else "exact"
        records.append({"n": n, "d": d, "workers": label, "method": method, **stats})
        _log(f"N={n} D={d} {label} {method}", stats)
        if label == "plain loop, aligned":
            plain = res
    reference = exact[1]
    ref_std = reference.std(axis=0)
    accuracy = {
        "c": c,
        "corr_approx_exact": [float(np.corrcoef(approx[:, j], reference[:, j])[0, 1])
                              for j in range(N_COMPONENTS)],
        "std_ratio_approx_exact": (approx.std(axis=0) / ref_std).tolist(),
        "std_ratio_train_exact": (full_scores.std(axis=0) / ref_std).tolist(),
        "max_abs_diff_2w_1w": float(np.abs(exact[2] - reference).max()),
        "max_abs_diff_threads_1w": max(float(np.abs(exact[f"threads:{t}"] - reference).max())
                                       for t in THREADS),
        "max_abs_diff_plain_aligned": float(np.abs(plain - reference).max()),
    }
    print(f"N={n} D={d} accuracy: {accuracy}", file=sys.stderr, flush=True)
    return records, accuracy


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None or np.isnan(value) else format(value, spec)


def table(records: list[dict[str, Any]]) -> str:
    """Markdown table with the speed-ups and ratios."""
    def seconds(workers, method):
        return next((r["seconds"] for r in records
                     if (r["workers"], r["method"]) == (workers, method)), None)

    plain = seconds("plain loop, aligned", "exact")
    rows = []
    for r in records:
        w, m, s = r["workers"], r["method"], r["seconds"]
        one = seconds("threads:1" if str(w).startswith("threads:") else 1, m)
        speedup = one / s if w in (2, "threads:2") and one else None
        if m == "approximate":
            exact_time = plain if w == "in-process" else seconds(w, "exact")
            ratio = s / exact_time if exact_time else None
        else:
            ratio = None
        timed_exact = w in WORKERS or str(w).startswith("threads:")
        vs_plain = s / plain if m == "exact" and plain and timed_exact else None
        rows.append([r["n"], r["d"], w, m, _fmt(s, ".3f" if s < 10 else ".1f"),
                     _fmt(speedup, ".2f"), _fmt(ratio, ".4f"), _fmt(vs_plain, ".2f"),
                     _fmt(r["client_mib"], ".0f"), _fmt(r["workers_mib"], ".0f"),
                     f"{r['other_load']:.2f}"])
    return markdown_table(["N", "D", "workers", "method", "seconds", "speed-up (1 → 2)",
                           "approx/exact time", "time / plain loop", "client MiB",
                           "workers MiB", "other load"], rows)


def accuracy_table(accuracy: dict[str, Any]) -> str:
    """Per-component agreement of the approximate with the exact LOO projections."""
    rows = [[j + 1, f"{accuracy['corr_approx_exact'][j]:.4f}",
             f"{accuracy['std_ratio_approx_exact'][j]:.3f}",
             f"{accuracy['std_ratio_train_exact'][j]:.3f}"] for j in range(N_COMPONENTS)]
    return markdown_table(["component", "corr(approx, exact)", "std approx / exact",
                           "std train / exact LOO"], rows)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the environment and markdown tables, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="number of points N")
    parser.add_argument("--d", type=int, default=1000, help="dimensions D")
    parser.add_argument("--quick", action="store_true", help="smoke test: N = 100, D = 300")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--model", choices=("rbf", "linear"), default="rbf",
                        help="RBF kernel PCA (the default) or linear PCA")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.d = 100, 300
    env = environment()
    print_environment(env, [sys.executable, *sys.argv])
    records, accuracy = run(args.n, args.d, args.model)
    model = (f"PCA({N_COMPONENTS})" if args.model == "linear" else
             f"KernelPCA({N_COMPONENTS}, RBF(c={accuracy['c']:.4g}))")
    print(f"## loo_projections: {model}, "
          f"make_unbalanced_semicircles({args.n}, {args.d}, snr={SNR:g})\n")
    print(table(records))
    print("\n### Approximate versus exact (1 worker) LOO projections\n")
    print(accuracy_table(accuracy))
    print(f"\nmax |exact 2 workers - exact 1 worker| = {accuracy['max_abs_diff_2w_1w']:.3g}; "
          f"max |exact on threads - exact 1 worker| = "
          f"{accuracy['max_abs_diff_threads_1w']:.3g}; "
          f"max |plain aligned - exact| = {accuracy['max_abs_diff_plain_aligned']:.3g}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "args": vars(args), "results": records,
                       "accuracy": accuracy}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
