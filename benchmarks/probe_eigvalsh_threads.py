"""Why MDD's draws stop scaling at 8 threads: the eigensolver, or the memory it streams.

Issue 30 asks MDD's draws to run at least 8 times faster on 16 threads than on 1; on the
16-core machine they stopped at 5.5 times, with 13 cores busy (BENCHMARKS.md §5), and the GIL
allows 11.5 times. A draw's time is almost all ``numpy.linalg.eigvalsh`` of 500 × 500 centred
kernel matrices (LAPACK ``syevd``), whose tridiagonal reduction reads the whole trailing
matrix once per column (matrix-vector products, memory-bound once the matrices of all threads
exceed the caches). This probe runs ``T`` threads side by side, each solving its own matrices,
for ``T`` = 1, 2, 4, ... up to ``--max-threads``, and prints each method's throughput and its
speed-up over one thread:

* ``syevd``: dkpca's call (``numpy.linalg.eigvalsh`` on stacks of ``⌈501 / n⌉`` matrices,
  which releases the GIL);
* ``ssyevd``: the same call on the matrices rounded to float32 (LAPACK ``ssyevd``): half the
  bytes each reduction streams, at float32's accuracy (printed against float64's);
* ``syevd_2stage``: LAPACK's two-stage solver (``dsyevd_2stage``: a blocked reduction to a band
  matrix, then a band-to-tridiagonal sweep that stays in cache), called through ``ctypes``
  (which releases the GIL) in the OpenBLAS library that SciPy's wheels ship; skipped where
  that library or symbol is missing;
* ``triad``: ``a = b + s c`` on 32 MiB float64 arrays per thread, the memory's own scaling.

BLAS runs on one thread in each (``threadpoolctl``), as in dkpca's draws.

Usage::

    python benchmarks/probe_eigvalsh_threads.py --n 500 1000 --max-threads 16
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
import threadpoolctl

from dkpca.selection._spectra import _GIL_FREE_ROWS  # the stacks dkpca solves at once

LAPACK_ROW_MAJOR = 101


def centred_kernels(n: int, count: int, seed: int) -> np.ndarray:
    """``count`` centred RBF kernel matrices of ``n`` Gaussian points in 5 dimensions."""
    rng = np.random.default_rng(seed)
    out = np.empty((count, n, n))
    for i in range(count):
        X = rng.standard_normal((n, 5))
        sq = np.einsum("ij,ij->i", X, X)
        K = np.exp(-(sq[:, None] + sq[None, :] - 2 * X @ X.T) / 10.0)
        row = K.mean(axis=0)
        out[i] = K - row - row[:, None] + row.mean()
    return out


def two_stage_solver() -> Callable[[np.ndarray], np.ndarray] | None:
    """``dsyevd_2stage`` (eigenvalues only) from SciPy's OpenBLAS, or None where it is missing."""
    libs = sorted(glob.glob(str(Path(scipy.__file__).parent.parent / "scipy.libs"
                                / "libscipy_openblas*.so*")))
    for path in libs:
        lib = ctypes.CDLL(path)
        for name in ("scipy_LAPACKE_dsyevd_2stage", "LAPACKE_dsyevd_2stage"):
            fn = getattr(lib, name, None)
            if fn is None:
                continue
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_int, ctypes.c_char, ctypes.c_char, ctypes.c_int,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]

            def solve(A: np.ndarray, fn=fn) -> np.ndarray:
                A = np.array(A, order="C")  # overwritten by LAPACK
                n = A.shape[0]
                w = np.empty(n)
                info = fn(LAPACK_ROW_MAJOR, b"N", b"U", n, A.ctypes.data, n, w.ctypes.data)
                if info != 0:
                    raise RuntimeError(f"dsyevd_2stage failed: info = {info}")
                return w
            return solve
    return None


def run_threads(threads: int, work: Callable[[int], None]) -> float:
    """Wall seconds for ``threads`` threads to run ``work(thread index)`` side by side."""
    barrier = threading.Barrier(threads + 1)
    errors: list[Exception] = []

    def body(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except Exception as err:  # noqa: BLE001 (raised after the join)
            errors.append(err)

    pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


def probe_order(n: int, counts: list[int], solves: int,
                two_stage: Callable[[np.ndarray], np.ndarray] | None) -> None:
    """Print each solver's throughput on matrices of order ``n`` at each thread count."""
    stack = max(1, -(-_GIL_FREE_ROWS // n))
    mats = {i: centred_kernels(n, stack, seed=i) for i in range(max(counts))}

    def syevd(i: int) -> None:
        for _ in range(solves // stack):
            np.linalg.eigvalsh(mats[i], UPLO="U")

    singles = {i: m.astype(np.float32) for i, m in mats.items()}
    ref = np.linalg.eigvalsh(mats[0], UPLO="U")
    err = (np.abs(np.linalg.eigvalsh(singles[0], UPLO="U") - ref).max(axis=-1)
           / np.abs(ref).max(axis=-1)).max()
    print(f"n = {n}: float32 eigenvalues against float64's, largest difference {err:.1e} "
          "of the largest eigenvalue")

    def ssyevd(i: int) -> None:
        for _ in range(solves // stack):
            np.linalg.eigvalsh(singles[i], UPLO="U")

    methods: dict[str, Callable[[int], None]] = {"syevd": syevd, "ssyevd": ssyevd}
    if two_stage is not None:
        err = np.abs(two_stage(mats[0][0]) - ref[0]).max() / np.abs(ref[0]).max()
        print(f"n = {n}: two-stage eigenvalues against syevd's, largest relative "
              f"difference {err:.1e}")

        def syevd_2stage(i: int) -> None:
            for _ in range(solves):
                two_stage(mats[i][0])

        methods["syevd_2stage"] = syevd_2stage
    print("\n| n | method | threads | seconds | ms a matrix (per thread) | "
          "speed-up over 1 thread |")
    print("|---|---|---|---|---|---|")
    for name, work in methods.items():
        run_threads(1, work)  # warm-up
        base = None
        for t in counts:
            wall = run_threads(t, work)
            rate = t * solves / wall
            base = base or rate
            print(f"| {n} | {name} | {t} | {wall:.2f} | {1e3 * wall / solves:.2f} "
                  f"| {rate / base:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[500])
    parser.add_argument("--max-threads", type=int, default=os.cpu_count())
    parser.add_argument("--solves", type=int, default=24,
                        help="matrices each thread solves per measurement")
    args = parser.parse_args()
    counts = [2**i for i in range(int(math.log2(args.max_threads)) + 1)]
    if counts[-1] != args.max_threads:
        counts.append(args.max_threads)
    two_stage = two_stage_solver()
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, {os.cpu_count()} CPUs; "
          f"BLAS on 1 thread; two-stage solver: {'found' if two_stage else 'missing'}")
    with threadpoolctl.threadpool_limits(1):
        for n in args.n:
            probe_order(n, counts, args.solves, two_stage)
    arrays = {i: (np.ones(4 << 20), np.ones(4 << 20), np.empty(4 << 20))
              for i in range(max(counts))}

    def triad(i: int) -> None:
        b, c, a = arrays[i]
        for _ in range(20):
            np.multiply(c, 3.0, out=a)
            np.add(a, b, out=a)

    print("\n| method | threads | seconds | GB/s | speed-up over 1 thread |")
    print("|---|---|---|---|---|")
    run_threads(1, triad)
    base = None
    for t in counts:
        wall = run_threads(t, triad)
        gbs = t * 20 * 5 * (32 << 20) / wall / 1e9  # multiply: 1 read, 1 write; add: 2 reads, 1 write
        base = base or gbs
        print(f"| triad | {t} | {wall:.2f} | {gbs:.1f} | {gbs / base:.2f} |")


if __name__ == "__main__":
    main()
