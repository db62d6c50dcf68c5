"""Scale-out: the same kernel PCA fit on threads and on ``LocalCluster``s of several shapes.

The data are a 10-centre Gaussian mixture in ``d`` dimensions (``sklearn.datasets.make_blobs``,
``random_state=0``), standardised per feature; the fit is ``KernelPCA(10)`` with the RBF kernel,
``gamma = 1/d``, ``random_state=0`` and the default solver choice (randomized, float32 tiles
cached on the holders: the workers, or this process on threads). Each configuration runs in a
fresh process (spawned), which fits once untimed on a tenth of the rows with the randomized
solver (imports, cluster start, the tile engine's first use: without ``solver=`` a tenth of
20,000 rows would get the exact solver), then times the fit, then measures the float32 GEMM
rate of a 4096-row tile times a ``4096 × b`` block (``b`` the Krylov block width) on as many
BLAS threads as the configuration has cores (after the fit: its freed buffers would be memory
the fit finds recently used, see ``--settle``). With ``--warm-up full`` the untimed fit is of
every row, as the timed one: the timed fit is then a process's second of its size, as on a
cluster that has fitted before.

``--settle S`` waits ``S`` seconds before each configuration's process starts. On machines that
hand freed memory back to their host (this development VM: ``probe_fresh_memory.py``), memory
freed long ago costs up to 20 times more to write than memory freed a moment before, so the
tiles' build in a fresh process took longer or shorter by how soon it followed the previous
configuration's exit; a cluster's start puts its tiles further from it than the threaded
fit's. With a pause longer than the host's reclaim (15 s here) every configuration starts
equally far from it.

Reported per configuration: whole-fit time, the time its tiles took to build (the
``KernelTiles`` construction: the kernel's evaluation and the first write of the tiles'
memory), the median Krylov pass (from the solver's own log), the pass's bound (``2 n² b``
flops, what the stored upper tiles cost for ``K V``, at that GEMM rate), pass / bound, and
both times relative to the threaded fit on the same cores; then the product alone: the best of
7 back-to-back ``K V`` products (``KernelTiles.matmul``, a random ``n × b`` block) on the fit's
own tiles, where they are held, without the solver's work between passes. The table of
medians over rounds (``--rounds``) also gives the fit less its build, and each against the
threaded fit.

Usage::

    python benchmarks/bench_scaling.py                        # this machine's cores
    python benchmarks/bench_scaling.py --n 100000 --configs threads:16 1x16 2x8 4x4 8x2 threads:4
    python benchmarks/bench_scaling.py --configs threads:2 2x1:stripes 2x1:symmetric
    python benchmarks/bench_scaling.py --configs threads:2 1x2 2x1 --rounds 5
    python benchmarks/bench_scaling.py --configs threads:2 1x2 2x1 --rounds 5 --warm-up full
    python benchmarks/bench_scaling.py --configs threads:2 1x2 2x1 --rounds 5 --settle 15

A cluster configuration uses the default tile layout (``auto``: stripes where they fit) unless
it names one (``dkpca.tile-layout``, see :func:`dkpca.tiles.tile_layout`), and distributed's
default housekeeping unless it says ``quiet`` (``2x1:quiet``, ``8x2:stripes:quiet``: the
cluster starts inside :func:`dkpca.cluster.quiet_housekeeping`, as the command line's does).

``--rounds R`` runs the whole list of configurations ``R`` times, one round after another, so
that each round's cluster fits are compared with that round's threaded fit: a shared machine's
speed drifts by more than the gaps measured, and a drift then moves both sides of a ratio. A
table per round is printed, then one of each configuration's medians over the rounds, of the
times and of the per-round ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import os
import statistics
import sys
import time

import numpy as np
from _common import environment, markdown_table, print_environment, wait_for_quiet


def _configs(cores: int) -> list[str]:
    """Threads on all cores, then every ``workers x threads`` split of them (and 4 cores)."""
    shapes = [f"{w}x{cores // w}" for w in (1, 2, 4, 8, 16) if w <= cores and cores % w == 0]
    smaller = ["threads:4"] if cores >= 16 else []
    return [f"threads:{cores}", *shapes, *smaller]


def _cores(config: str) -> int:
    if config.startswith("threads:"):
        return int(config.split(":")[1])
    workers, threads = map(int, _shape(config).split("x"))
    return workers * threads


def _shape(config: str) -> str:
    """``WxT`` of a cluster configuration, without its layout (``WxT:stripes``)."""
    return config.split(":")[0]


def _layout(config: str) -> str:
    """The ``dkpca.tile-layout`` a configuration asks for (``auto`` unless it names one)."""
    if config.startswith("threads:"):
        return "auto"
    return next((part for part in config.split(":")[1:] if part in ("symmetric", "stripes")),
                "auto")


def _quiet(config: str) -> bool:
    """Whether a cluster configuration starts with :func:`dkpca.cluster.quiet_housekeeping`."""
    return not config.startswith("threads:") and "quiet" in config.split(":")[1:]


def _data(n: int, d: int) -> np.ndarray:
    from sklearn.datasets import make_blobs
    from sklearn.preprocessing import StandardScaler

    X, _ = make_blobs(n_samples=n, n_features=d, centers=10, random_state=0)
    return StandardScaler().fit_transform(X)


def _gemm_rate(width: int, threads: int) -> float:
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    tile = rng.standard_normal((4096, 4096)).astype(np.float32)
    block = rng.standard_normal((4096, width)).astype(np.float32)
    with threadpool_limits(threads, user_api="blas"):
        tile @ block
        best = min(_seconds(lambda: tile @ block) for _ in range(7))
    return 2 * 4096 * 4096 * width / best


def _seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


class _PassLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("kernel pass"):
            self.seconds.append(float(record.args[1]))


@contextlib.contextmanager
def _scheduler(config: str, cores: int):
    """The configuration's scheduler: local threads, or a client of a ``LocalCluster``."""
    import dask

    if config.startswith("threads:"):
        with dask.config.set(scheduler="threads", num_workers=cores):
            yield
        return
    from distributed import Client, LocalCluster

    from dkpca.cluster import quiet_housekeeping

    workers, threads = map(int, _shape(config).split("x"))
    with (quiet_housekeeping() if _quiet(config) else contextlib.nullcontext()):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                               dashboard_address=":0")
    with (cluster, Client(cluster),
          dask.config.set({"dkpca.tile-layout": _layout(config)})):
        yield


def _child(config: str, n: int, d: int, block_size: str | None, warm_full: bool,
           queue) -> None:
    import dkpca
    from dkpca.solvers.randomized import AUTO_BLOCK_WIDTH

    cores = _cores(config)
    X = _data(n, d)
    passes = _PassLog()
    solver_log = logging.getLogger("dkpca.solvers.randomized")
    solver_log.addHandler(passes)
    solver_log.setLevel(logging.INFO)

    def fit(data, **solver):
        options = {} if block_size is None else {"block_size": block_size}
        return dkpca.KernelPCA(10, random_state=0, **options, **solver).fit(data)

    made = _keep_tiles()
    with _scheduler(config, cores):
        # The timed fit's solver: on a tenth of 20,000 rows the default would pick the exact
        # solver, and the tile engine's first use (a worker's first tiles) would be timed.
        fit(X if warm_full else X[: n // 10], solver="randomized")
        made.clear()  # the warm-up's tiles go (the timed fit's are measured alone)
        passes.seconds.clear()
        wait_for_quiet(0.3, patience=30.0)
        start = time.perf_counter()
        model = fit(X)
        elapsed = time.perf_counter() - start
        tiles, build = made[-1]
        product = _product_seconds(tiles, AUTO_BLOCK_WIDTH)
    # after the fit: the rate's buffers, freed, would be memory the fit finds recently used
    rate = _gemm_rate(AUTO_BLOCK_WIDTH, cores)
    queue.put({"config": config, "cores": cores, "fit_s": elapsed, "solver": model.solver_,
               "layout": tiles.layout, "tile_rows": len(tiles.bounds), "build_s": build,
               "passes": len(passes.seconds),
               "pass_s": statistics.median(passes.seconds) if passes.seconds else float("nan"),
               "product_s": product,
               "bound_s": 2.0 * n * n * AUTO_BLOCK_WIDTH / rate, "gemm_gflops": rate / 1e9,
               "eigenvalues": model.eigenvalues_.tolist()})


def _keep_tiles() -> list:
    """Keep every ``KernelTiles`` the fits make, with the seconds its tiles took to build."""
    from dkpca import tiles

    made, init = [], tiles.KernelTiles.__init__

    def keeping(self, *args, **kwargs):
        start = time.perf_counter()
        init(self, *args, **kwargs)
        made.append((self, time.perf_counter() - start))

    tiles.KernelTiles.__init__ = keeping
    return made


def _product_seconds(tiles, width: int) -> float:
    """Best of 7 back-to-back ``K V`` products on the fit's own tiles: the engine alone."""
    V = np.random.default_rng(0).standard_normal((tiles.n, width))
    tiles.matmul(V)
    return min(_seconds(lambda: tiles.matmul(V)) for _ in range(7))


def _run(config: str, n: int, d: int, block_size: str | None = None,
         warm_full: bool = False) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child, args=(config, n, d, block_size, warm_full, queue))
    child.start()
    child.join()
    if child.exitcode != 0:
        return {"config": config, "cores": _cores(config), "error": f"exit {child.exitcode}"}
    return queue.get()


def _rows(results: list[dict]) -> list[list[object]]:
    """One table row per configuration of a round, ratios against that round's threaded fit."""
    threaded = {r["cores"]: r for r in results
                if r["config"].startswith("threads:") and "error" not in r}
    first = results[0].get("eigenvalues")
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["config"], r["error"], "", "", "", "", "", "", "", "", ""])
            continue
        base = threaded.get(r["cores"])
        spread = max(abs(a - b) / b for a, b in zip(r["eigenvalues"], first, strict=True)) \
            if first else float("nan")
        rows.append([r["config"], r["layout"], f"{r['fit_s']:.2f}", f"{r['build_s']:.2f}",
                     f"{r['pass_s']:.3f}", r["passes"],
                     f"{r['bound_s']:.3f}", f"{r['pass_s'] / r['bound_s']:.2f}",
                     f"{r['fit_s'] / base['fit_s']:.2f} / {r['pass_s'] / base['pass_s']:.2f}"
                     if base else "", f"{r['product_s']:.3f}"
                     + (f" [{r['product_s'] / base['product_s']:.2f}]" if base else ""),
                     f"{spread:.1e}"])
    return rows


def _median_rows(rounds: list[list[dict]]) -> list[list[object]]:
    """Each configuration's medians over the rounds: times, and ratios taken within a round."""
    rows = []
    for position, config in enumerate(r["config"] for r in rounds[0]):
        keys = ("fit", "build", "rest", "pass", "product")
        ratios: dict[str, list[float]] = {key: [] for key in keys}
        times: dict[str, list[float]] = {key: [] for key in keys}
        for results in rounds:
            r = results[position]
            base = next((b for b in results if b["config"].startswith("threads:")
                         and b["cores"] == r["cores"] and "error" not in b), None)
            if "error" in r or base is None:
                continue
            r, base = ({**x, "rest_s": x["fit_s"] - x["build_s"]} for x in (r, base))
            for key, values in times.items():
                values.append(r[f"{key}_s"])
                ratios[key].append(r[f"{key}_s"] / base[f"{key}_s"])
        if not times["fit"]:
            rows.append([config, "every round failed"] + [""] * (2 * len(keys)))
            continue
        rows.append([config, len(times["fit"])]
                    + [f"{statistics.median(times[key]):.3f}" for key in times]
                    + [f"{statistics.median(ratios[key]):.2f} ({min(ratios[key]):.2f}–"
                       f"{max(ratios[key]):.2f})" for key in ratios])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--configs", nargs="+", default=None,
                        help="threads:T or WxT (workers x threads), WxT:symmetric or "
                             "WxT:stripes for a tile layout, :quiet for quiet housekeeping; "
                             "default: this machine's")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the configurations this many times, one round after another, "
                             "and report the medians of the per-round ratios")
    parser.add_argument("--block-size", default=None,
                        help="KernelPCA's block_size (memory of one tile), e.g. 100MB; "
                             "default: KernelPCA's")
    parser.add_argument("--warm-up", choices=("tenth", "full"), default="tenth",
                        help="the untimed fit before the timed one: on a tenth of the rows "
                             "(default) or on all of them")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait before each configuration's process starts, so "
                             "that memory the previous one freed is as far behind every fit")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    print_environment(environment(), sys.argv)
    configs = args.configs or _configs(os.cpu_count() or 1)
    header = ["configuration", "layout", "fit (s)", "tiles built (s)", "pass (s)", "passes",
              "pass bound (s)",
              "pass / bound", "vs threads (fit / pass)", "product alone (s) [vs threads]",
              "eigenvalue spread"]
    rounds = []
    for number in range(1, args.rounds + 1):
        results = []
        for config in configs:  # each one printed as it ends: a run cut short still reports
            time.sleep(args.settle)
            results.append(_run(config, args.n, args.d, args.block_size,
                                args.warm_up == "full"))
            print(f"round {number}, {config}: " + json.dumps(
                {k: v for k, v in results[-1].items() if k != "eigenvalues"}), flush=True)
        rounds.append(results)
        print(f"\nRound {number}: KernelPCA(10), RBF, {args.n} x {args.d} Gaussian mixture, "
              f"default solver ({results[0].get('solver', '?')})\n")
        print(markdown_table(header, _rows(results)), flush=True)
    if args.rounds > 1:
        print(f"\nMedians over {args.rounds} rounds (ratios against the same round's threaded "
              "fit, with their range)\n")
        print(markdown_table(["configuration", "rounds", "fit (s)", "tiles built (s)",
                              "fit less build (s)", "pass (s)", "product alone (s)",
                              "fit vs threads", "build vs threads", "fit less build vs threads",
                              "pass vs threads", "product alone vs threads"],
                             _median_rows(rounds)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rounds if args.rounds > 1 else rounds[0], out, indent=2)


if __name__ == "__main__":
    main()
