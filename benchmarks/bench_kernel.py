"""Blocked RBF kernel evaluation on dask versus its unavoidable cost.

What is measured, for every case (dtype, number of features ``d``, number of samples ``n``):

``dkpca``
    ``compute(kernel_matrix(RBF(gamma=1/d), da.from_array(X, chunks=(rows, -1), name=False)))``:
    the full ``n × n`` kernel matrix evaluated tile by tile on dask's threaded scheduler (all
    cores, BLAS single-threaded inside the tiles) and gathered into one numpy array. Graph
    construction is included.
``tiles``
    The same graph reduced to a ``1 × 1`` corner of every tile before it is gathered: the tile
    evaluation alone, without assembling the ``n × n`` result. A diagnostic that splits the
    ``dkpca`` time into kernel work and gathering.
``gather``
    ``gather_kernel(RBF(gamma=1/d), X)``: what the exact solver does. K is symmetric, so only
    the tiles on and above the diagonal are evaluated and written into one preallocated
    ``n × n`` array (LAPACK reads one triangle).
``cached tiles``
    ``cache_kernel_tiles(RBF(gamma=1/d), X, dtype=X.dtype)``: what the randomized solver
    caches, the upper tiles persisted where dask computed them (half the memory, no
    assembly), each stored less its mean, in the data's precision.
``matmul``
    ``X @ Y.T`` in numpy with ``Y = X.copy()`` (so that numpy calls ``gemm``, not ``syrk``), all
    BLAS threads, writing a fresh ``n × n`` array.
``exp``
    One ``np.exp`` pass over an ``n × n`` array of realistic RBF exponents (``-gamma ||x-y||²``)
    into a preallocated output, timed in one thread and split over two threads (row halves on
    a ``ThreadPoolExecutor``); the faster of the two counts.

The *bound* is ``matmul + exp``: one GEMM of the same shape and one exponential pass over the
output, each on all cores; any RBF kernel evaluation that produces the full matrix does at
least that work. The reported ratios are ``dkpca / bound`` (the stated goal is at most 1.4)
and, for the two symmetric paths the solvers use, ``gather / bound`` and ``cached / bound``.
Each measurement is repeated ``--repeat`` times, interleaved (one round of every measurement,
then the next round) so that background load hits all of them alike; the minimum is kept. The
``other load`` column is the average number of cores other processes kept busy meanwhile;
each round first waits (up to 30 s) for that load to drop below ``--max-other-load``.

``dkpca`` allocates twice the memory the bound does (the tiles, then the gathered result), so
where first touches of memory are expensive (on the reference machine, a virtual machine whose
host reclaims idle guest memory, a cold gigabyte costs 1-2 s against 0.1 s warm) the gap
between ``dkpca`` and ``tiles`` grows and varies from run to run; ``tiles`` is the stable
measure of the kernel evaluation itself.

Usage::

    python benchmarks/bench_kernel.py                      # the full grid
    python benchmarks/bench_kernel.py --n 8000 --d 64 --dtype float32
    python benchmarks/bench_kernel.py --quick --json results/kernel.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import dask.array as da
import numpy as np
from _common import Monitor, environment, markdown_table, print_environment, wait_for_quiet

from dkpca.blocked import DEFAULT_BLOCK_BYTES, compute, gather_kernel, kernel_matrix
from dkpca.kernels import RBF
from dkpca.tiles import cache_kernel_tiles

#: The ratio ``dkpca / bound`` the issue asks for.
GOAL_RATIO = 1.4


@dataclass
class KernelResult:
    """Best-of-``repeat`` timings (seconds) of one case."""

    dtype: str
    d: int
    n: int
    dkpca_s: float
    tiles_s: float
    gather_s: float
    cached_s: float
    matmul_s: float
    exp_1thread_s: float
    exp_2threads_s: float
    max_abs_diff: float
    other_load: float

    @property
    def exp_s(self) -> float:
        """The faster exponential pass."""
        return min(self.exp_1thread_s, self.exp_2threads_s)

    @property
    def bound_s(self) -> float:
        """``matmul + exp``: the unavoidable work."""
        return self.matmul_s + self.exp_s

    @property
    def ratio(self) -> float:
        """``dkpca / bound``."""
        return self.dkpca_s / self.bound_s

    @property
    def gather_ratio(self) -> float:
        """``gather / bound``: the symmetric gather of the exact solver."""
        return self.gather_s / self.bound_s

    @property
    def cached_ratio(self) -> float:
        """``cached tiles / bound``: the randomized solver's cache."""
        return self.cached_s / self.bound_s

    @property
    def tiles_ratio(self) -> float:
        """``tiles / bound``: the kernel evaluation without the gathering."""
        return self.tiles_s / self.bound_s


def _timed(fn: Callable[[], object]) -> float:
    """Wall time of one call of ``fn``; its result is dropped before returning."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _corner(block: np.ndarray) -> np.ndarray:
    return block[:1, :1]


def _exp_split(pool: ThreadPoolExecutor, E: np.ndarray, out: np.ndarray) -> None:
    """``np.exp(E, out=out)`` with the rows split between the pool's two threads."""
    half = E.shape[0] // 2
    parts = [(E[:half], out[:half]), (E[half:], out[half:])]
    for future in [pool.submit(np.exp, src, out=dst) for src, dst in parts]:
        future.result()


def rbf_exponents(X: np.ndarray, gamma: float) -> np.ndarray:
    """``-gamma ||x_i - x_j||²`` for all pairs: a realistic input for the ``exp`` pass.

    Parameters
    ----------
    X : (n, d) array
    gamma : float

    Returns
    -------
    (n, n) array of ``X``'s dtype
    """
    squared = np.einsum("ij,ij->i", X, X)
    E = X @ X.copy().T
    E *= 2 * gamma
    E -= gamma * squared[:, None]
    E -= gamma * squared[None, :]
    np.minimum(E, 0, out=E)
    return E


def bench_case(
    dtype: str,
    d: int,
    n: int,
    *,
    chunk_rows: int,
    repeat: int,
    max_other_load: float,
) -> KernelResult:
    """Time dkpca's blocked kernel and its bound for one case.

    Parameters
    ----------
    dtype : {"float32", "float64"}
    d, n : int
        Features and samples.
    chunk_rows : int
        Row chunk of the dask input (dkpca rechunks it to its tiles).
    repeat : int
        Interleaved rounds; the minimum of each measurement is kept.
    max_other_load : float
        Each round starts once other processes keep at most this many cores busy (or after
        waiting 30 s).

    Returns
    -------
    KernelResult
    """
    X = np.random.default_rng(0).standard_normal((n, d)).astype(dtype)
    Y = X.copy()
    gamma = 1.0 / d
    kernel = RBF(gamma=gamma)

    def lazy_kernel() -> da.Array:
        # name=False: a random graph key, as dkpca.as_dask does, instead of hashing X each time
        return kernel_matrix(kernel, da.from_array(X, chunks=(chunk_rows, -1), name=False))

    def tiles_only() -> None:
        K = lazy_kernel()
        corners = ((1,) * K.numblocks[0], (1,) * K.numblocks[1])
        compute(K.map_blocks(_corner, chunks=corners))

    (K,) = compute(lazy_kernel())  # also warms up dask's thread pool
    E = rbf_exponents(X, gamma)
    max_abs_diff = float(np.abs(K - np.exp(E)).max())
    del K
    out = np.zeros_like(E)  # touched once, so the exp timings take no page faults
    with ThreadPoolExecutor(2) as pool:
        measurements: dict[str, Callable[[], object]] = {
            "dkpca": lambda: compute(lazy_kernel()),
            "tiles": tiles_only,
            "gather": lambda: gather_kernel(kernel, da.from_array(X, chunks=(chunk_rows, -1))),
            "cached": lambda: cache_kernel_tiles(
                kernel, da.from_array(X, chunks=(chunk_rows, -1)), block_bytes=DEFAULT_BLOCK_BYTES,
                dtype=X.dtype,
            ),
            "matmul": lambda: X @ Y.T,
            "exp_1thread": lambda: np.exp(E, out=out),
            "exp_2threads": lambda: _exp_split(pool, E, out),
        }
        best = dict.fromkeys(measurements, float("inf"))
        with Monitor() as monitor:
            for _ in range(repeat):
                wait_for_quiet(max_other_load, patience=30.0)
                for name, fn in measurements.items():
                    best[name] = min(best[name], _timed(fn))
    return KernelResult(
        dtype=dtype,
        d=d,
        n=n,
        dkpca_s=best["dkpca"],
        tiles_s=best["tiles"],
        gather_s=best["gather"],
        cached_s=best["cached"],
        matmul_s=best["matmul"],
        exp_1thread_s=best["exp_1thread"],
        exp_2threads_s=best["exp_2threads"],
        max_abs_diff=max_abs_diff,
        other_load=monitor.other_load,
    )


def results_table(results: Sequence[KernelResult]) -> str:
    """The markdown table of all cases."""
    header = [
        "dtype",
        "d",
        "n",
        "dkpca (s)",
        "tiles only (s)",
        "matmul (s)",
        "exp 1 thr (s)",
        "exp 2 thr (s)",
        "bound (s)",
        "dkpca / bound",
        f"<= {GOAL_RATIO}?",
        "tiles / bound",
        "gather (s)",
        "gather / bound",
        "cached tiles (s)",
        "cached / bound",
        "max abs diff",
        "other load",
    ]
    rows = [
        [
            r.dtype,
            r.d,
            r.n,
            f"{r.dkpca_s:.3f}",
            f"{r.tiles_s:.3f}",
            f"{r.matmul_s:.3f}",
            f"{r.exp_1thread_s:.3f}",
            f"{r.exp_2threads_s:.3f}",
            f"{r.bound_s:.3f}",
            f"{r.ratio:.2f}",
            "yes" if r.ratio <= GOAL_RATIO else "no",
            f"{r.tiles_ratio:.2f}",
            f"{r.gather_s:.3f}",
            f"{r.gather_ratio:.2f}",
            f"{r.cached_s:.3f}",
            f"{r.cached_ratio:.2f}",
            f"{r.max_abs_diff:.1e}",
            f"{r.other_load:.2f}",
        ]
        for r in results
    ]
    return markdown_table(header, rows)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[8000, 10000], help="samples")
    parser.add_argument("--d", type=int, nargs="+", default=[64, 784], help="features")
    parser.add_argument(
        "--dtype", nargs="+", choices=["float32", "float64"], default=["float32", "float64"]
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the minimum is kept")
    parser.add_argument(
        "--chunk-rows", type=int, default=2048, help="row chunk of the dask input array"
    )
    parser.add_argument(
        "--max-other-load",
        type=float,
        default=0.5,
        help="each round waits (up to 30 s) until other processes keep at most this many "
        "cores busy",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: n=2000, d=64, float64, 1 round"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.d, args.dtype, args.repeat = [2000], [64], ["float64"], 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid, print the environment and a markdown table, optionally write JSON."""
    args = parse_args(argv)
    env = environment()
    print_environment(env, sys.argv)
    results = []
    for dtype in args.dtype:
        for d in args.d:
            for n in args.n:
                result = bench_case(
                    dtype,
                    d,
                    n,
                    chunk_rows=args.chunk_rows,
                    repeat=args.repeat,
                    max_other_load=args.max_other_load,
                )
                print(
                    f"{dtype} d={d} n={n}: dkpca {result.dkpca_s:.3f} s, bound "
                    f"{result.bound_s:.3f} s, ratio {result.ratio:.2f}",
                    file=sys.stderr,
                    flush=True,
                )
                results.append(result)
    print("## Blocked RBF kernel: dkpca versus matmul + exp\n")
    print(results_table(results))
    if args.json:
        records = [
            {
                **asdict(r),
                "exp_s": r.exp_s,
                "bound_s": r.bound_s,
                "ratio": r.ratio,
                "tiles_ratio": r.tiles_ratio,
            }
            for r in results
        ]
        with open(args.json, "w") as f:
            json.dump({"environment": env, "args": vars(args), "results": records}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
