"""How much of a fan-out's work holds the GIL: the share that no number of threads can overlap.

Issue 30 asks MDD's draws to run at least 8 times faster on 16 threads than on 1; on the
16-core machine they stopped at 5.5 times (BENCHMARKS.md §5). Work that holds the GIL runs one
thread at a time, so if a share ``s`` of a task's time holds it, ``T`` threads are at most
``1 / (s + (1 - s) / T)`` times faster than one (Amdahl). This probe measures ``s`` on any
machine: it runs the call twice under ``py-spy record`` (sampling at ``--rate`` Hz), once
counting the samples of the dask worker threads that are running and once those holding the
GIL (``--gil``), and prints their ratio, that ceiling for 16 threads, and the functions that
hold the GIL most.

The calls (``--call``), each on the threaded scheduler with ``--threads`` threads, after an
untimed warm-up in the main thread (not counted: only the worker threads' samples are):

* ``mdd``: ``select_model`` by MDD on ``make_two_rings(2000, random_state=0)``, 500 training
  rows, ``--draws`` draws, ``random_state=0`` (the call of §5's thread-scaling table);
* ``kpa``: the same with ``method="kpa"`` (permutations);
* ``independence``: ``independence_test`` on 2,000 × 12 normal scores, 2,000 permutations;
* ``loo``: exact ``loo_projections`` of §6's model, ``KernelPCA(5, RBF(c))`` on
  ``make_unbalanced_semicircles(500, 1000, snr=500)`` with ``c`` 0.05 times the median squared
  distance (``--draws`` unused).

Needs py-spy (``pip install py-spy``; on Linux it reads the child's memory, which a container
may forbid without ``SYS_PTRACE``).

Usage::

    python benchmarks/probe_gil_share.py --call mdd
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: A frame of every stack that a worker thread of dask's threaded scheduler runs.
WORKER_FRAME = "Thread._bootstrap"


def run_call(call: str, threads: int, draws: int) -> None:
    """The measured call (in the child that py-spy samples)."""
    import dask
    import numpy as np
    from scipy.spatial.distance import pdist

    import dkpca
    from dkpca.datasets import make_two_rings, make_unbalanced_semicircles
    from dkpca.generalization import loo_projections
    from dkpca.kernels import RBF

    def semicircles(n: int) -> tuple[dkpca.KernelPCA, np.ndarray]:
        S, _ = make_unbalanced_semicircles(n, 1000, snr=500.0, random_state=0)
        c = 0.05 * float(np.median(pdist(S, "sqeuclidean")))
        return dkpca.KernelPCA(5, kernel=RBF(c=c)).fit(S), S

    def loo(n: int) -> object:
        return loo_projections(*semicircles(500 if n == draws else 20), "exact")

    R, _, _ = make_two_rings(2000, random_state=0)
    scores = np.random.default_rng(0).normal(size=(2000, 12))
    calls = {
        "mdd": lambda n: dkpca.select_model(R, n_train=500, n_draws=n, random_state=0),
        "kpa": lambda n: dkpca.select_model(R, method="kpa", n_train=500, n_draws=n,
                                            random_state=0),
        "independence": lambda n: dkpca.independence_test(scores, n_permutations=n * 40,
                                                          random_state=0),
        "loo": loo,
    }
    calls[call](2)  # warm-up: imports and first calls, in the main thread
    with dask.config.set(scheduler="threads", num_workers=threads):
        calls[call](draws)


def worker_samples(raw: Path) -> tuple[int, collections.Counter]:
    """Samples of the worker threads in py-spy's raw output, and their innermost functions."""
    total, leaves = 0, collections.Counter()
    for line in raw.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        if any(frame.startswith(WORKER_FRAME) for frame in frames):
            total += int(count)
            leaves[frames[-1]] += int(count)
    return total, leaves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--call", choices=("mdd", "kpa", "independence", "loo"), default="mdd")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--draws", type=int, default=50)
    parser.add_argument("--rate", type=int, default=200, help="samples a second")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_call(args.call, args.threads, args.draws)
        return 0
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("probe_gil_share: py-spy is not installed (pip install py-spy)")
    child = [sys.executable, __file__, "--child", "--call", args.call,
             "--threads", str(args.threads), "--draws", str(args.draws)]
    counts = {}
    with tempfile.TemporaryDirectory() as folder:
        for mode in ("running", "gil"):
            raw = Path(folder) / f"{mode}.txt"
            extra = ["--gil"] if mode == "gil" else []
            subprocess.run([spy, "record", "--format", "raw", "-r", str(args.rate), *extra,
                            "-o", str(raw), "--", *child], check=True, capture_output=True)
            counts[mode] = worker_samples(raw)
    running, held = counts["running"][0], counts["gil"][0]
    share = held / running if running else float("nan")
    ceiling = 1 / (share + (1 - share) / 16)
    print(f"{args.call}, {args.threads} thread(s), {args.draws} draws: worker threads running "
          f"{running} samples, holding the GIL {held}: share {share:.3f}; "
          f"Amdahl's ceiling on 16 threads {ceiling:.1f}x")
    print("holding the GIL most (samples):")
    for leaf, count in counts["gil"][1].most_common(8):
        print(f"  {count:6d}  {leaf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
