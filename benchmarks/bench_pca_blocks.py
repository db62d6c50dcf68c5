"""One block's products in randomized linear PCA: float64 against float32 GEMMs, beside numpy.

The randomized solver's pass multiplies every block twice, ``X_c V`` and ``X_cᵀ P`` (see
``dkpca/_pca_products.py``). This times both on one ``--rows × --cols`` float32 block
(feature offsets ``N(5, 2²)`` plus unit noise, as ``bench_pca_randomized.py``'s data) with
``--width`` vectors, on one thread (a task's setting), best of ``--repeats``:

* ``dkpca float64``: the products in float64 (float64 data, or a tolerance below 1e-6);
* ``dkpca float32``: float32 GEMMs on the block centred by its float32 mean, the mean's
  rounding added back and the result in float64 (float32 data at ``tol >= 1e-6``);
* ``numpy``: the plain whole-block reference, ``(X.astype(float64) - μ) @ V`` and
  ``(X.astype(float64) - μ).T @ P``.

*error* is the largest entry of the difference from the float64 products, relative to the
largest entry of the products. Peak memory is the largest extra allocation of one call
(``tracemalloc``).

    .venv/bin/python benchmarks/bench_pca_blocks.py
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from collections.abc import Callable

import numpy as np
from _common import best_time, dkpca_source, environment, markdown_table, print_environment

from dkpca._pca_products import centred_rtimes, centred_times
from dkpca.linalg import single_threaded_blas


def peak_bytes(call: Callable[[], object]) -> int:
    """Largest memory allocated at once during one call."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> int:
    """Time the block products and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2500)
    parser.add_argument("--cols", type=int, default=2500)
    parser.add_argument("--width", type=int, default=20, help="columns of V")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    print_environment(environment(), [sys.executable, *sys.argv])
    print(f"dkpca: {dkpca_source()}\n", flush=True)

    rng = np.random.default_rng(0)
    X = (rng.standard_normal((args.rows, args.cols))
         + rng.normal(5.0, 2.0, args.cols)).astype(np.float32)
    mean = X.mean(axis=0, dtype=np.float64)
    V = rng.standard_normal((args.cols, args.width))
    P = rng.standard_normal((args.rows, args.width))
    methods = {
        "dkpca float64": (lambda: centred_times(X, V, mean, np.float64),
                          lambda: centred_rtimes(X, P, mean, np.float64)),
        "dkpca float32": (lambda: centred_times(X, V, mean, np.float32),
                          lambda: centred_rtimes(X, P, mean, np.float32)),
        "numpy": (lambda: (X.astype(np.float64) - mean) @ V,
                  lambda: (X.astype(np.float64) - mean).T @ P),
    }
    exact = [methods["dkpca float64"][0](), methods["dkpca float64"][1]()]
    rows, seconds = [], {}
    with single_threaded_blas():
        for name, (times, rtimes) in methods.items():
            t, r = best_time(times, args.repeats), best_time(rtimes, args.repeats)
            seconds[name] = t + r
            errors = [np.abs(f() - e).max() / np.abs(e).max()
                      for f, e in zip((times, rtimes), exact, strict=True)]
            peak = max(peak_bytes(times), peak_bytes(rtimes))
            rows.append([name, f"{1e3 * t:.1f}", f"{1e3 * r:.1f}", f"{1e3 * (t + r):.1f}",
                         f"{max(errors):.1e}", f"{peak / 2**20:.1f}"])
    for row, name in zip(rows, methods, strict=True):
        row.append(f"{seconds['numpy'] / seconds[name]:.2f}")
    print(f"One {args.rows:,} × {args.cols:,} float32 block, {args.width} vectors, one thread, "
          f"best of {args.repeats}:\n")
    print(markdown_table(["method", "X_c V (ms)", "X_cᵀ P (ms)", "both (ms)",
                          "error vs float64", "peak MiB", "numpy / this"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
