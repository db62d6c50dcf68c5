"""Landmark selection at equal rank: uniform Nyström, fixed-size FS and FS2, and ICF.

Data: ``n`` rows of ``d = 8`` features from a mixture of 30 Gaussian clusters whose sizes and
widths differ (seeded, float64, standardised), RBF kernel with ``gamma = 1/d``. Every method
builds a rank-``M`` Nyström approximation (``M`` landmarks, or ``M`` ICF pivots with
``ICF(tol=1e-12)``, near 0) and the same one-pass feature PCA, 10 components.

Per method and ``n`` it reports the selection time (the landmarks or pivots alone: the
``select_landmarks``, ``select_fixed_size`` or ``incomplete_cholesky`` call), the whole
``KernelPCA.fit`` time, the passes the selection made over the data, and the accuracy against
a reference: the mean over the 10 components of the eigenvalue difference ``|λ - λ'| / λ``
(tutorial eq. 67) and of the eigenvector similarity ``|vᵀv'|`` (eq. 66). The reference is
``KernelPCA(10, solver="randomized")`` (block Krylov to a ``1e-6`` residual; exact kernel,
streamed when it does not fit in memory), fitted once per ``n``.

Usage::

    python benchmarks/bench_landmarks.py                  # n = 10,000, 30,000, 100,000; M = 500
    python benchmarks/bench_landmarks.py --n 20000 --m 200
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np
from _common import environment, markdown_table, print_environment, wait_for_quiet

from dkpca import KernelPCA
from dkpca.blocked import DEFAULT_BLOCK_BYTES
from dkpca.options import ICF, FixedSize, Nystrom, SolverOptions
from dkpca.solvers import incomplete_cholesky, select_fixed_size, select_landmarks

D, K, CHUNK = 8, 10, 25_000
#: Each method's solver, given ``M`` (landmarks or the most pivots).
METHODS: dict[str, Callable[[int], SolverOptions]] = {
    "uniform Nyström": lambda m: Nystrom(n_landmarks=m),
    "FS": lambda m: FixedSize(n_landmarks=m, selection="renyi"),
    "FS2": lambda m: FixedSize(n_landmarks=m, selection="renyi_kmeans"),
    "ICF": lambda m: ICF(tol=1e-12, max_rank=m),
}


def make_data(n: int) -> np.ndarray:
    """A mixture of 30 Gaussian clusters of unequal sizes and widths, standardised."""
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=4.0, size=(30, D))
    weights = rng.dirichlet(np.full(30, 0.5))
    widths = rng.uniform(0.3, 2.0, size=30)
    labels = rng.choice(30, size=n, p=weights)
    X = centres[labels] + rng.normal(size=(n, D)) * widths[labels, None]
    return (X - X.mean(axis=0)) / X.std(axis=0)


def _selection_time(options: SolverOptions, X: da.Array) -> tuple[float, int]:
    """Seconds and passes over the data of the selection step alone."""
    kernel = KernelPCA(kernel="rbf", gamma=1 / D)._resolve_kernel(D)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    if isinstance(options, Nystrom):
        select_landmarks(kernel, X, options.n_landmarks, options.sampling, rng=rng,
                         block_bytes=DEFAULT_BLOCK_BYTES)
        passes = 1
    elif isinstance(options, FixedSize):
        result = select_fixed_size(X, options.n_landmarks, options.selection, rng=rng,
                                   tol=options.tol, max_iter=options.max_iter)
        passes = len(result.entropy_trace)
    else:
        passes = incomplete_cholesky(kernel, X, tol=options.tol,
                                     max_rank=options.max_rank).n_passes
    return time.perf_counter() - start, passes


def _accuracy(model: KernelPCA, reference: KernelPCA) -> tuple[float, float]:
    values = np.abs(model.eigenvalues_ / reference.eigenvalues_ - 1).mean()
    V = np.asarray(model.eigenvectors_)
    similarity = np.abs(np.sum(V * reference.eigenvectors_, axis=0)).mean()
    return float(values), float(similarity)


def run(n: int, m: int) -> list[list[Any]]:
    """One row per method at size ``n``."""
    X = make_data(n)
    Xd = da.from_array(X, chunks=(CHUNK, -1))
    wait_for_quiet(0.2)
    start = time.perf_counter()
    reference = KernelPCA(K, gamma=1 / D, solver="randomized", random_state=0).fit(Xd)
    print(f"n = {n:,}: reference (randomized, {reference.n_iter_} passes) "
          f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    rows = []
    for label, method in METHODS.items():
        options = method(m)
        wait_for_quiet(0.2)
        selection_s, passes = _selection_time(options, Xd)
        start = time.perf_counter()
        model = KernelPCA(K, gamma=1 / D, solver=options, random_state=0).fit(Xd)
        fit_s = time.perf_counter() - start
        values, similarity = _accuracy(model, reference)
        rows.append([f"{n:,}", label, m, f"{selection_s:.2f}", passes, f"{fit_s:.2f}",
                     f"{values:.2e}", f"{similarity:.4f}"])
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the grid and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--m", type=int, default=500)
    args = parser.parse_args(argv)
    print_environment(environment(), [sys.executable, *sys.argv])
    rows = [row for n in args.n for row in run(n, args.m)]
    print(markdown_table(["n", "method", "rank M", "selection s", "selection passes", "fit s",
                          "eigenvalue diff. (eq. 67)", "similarity (eq. 66)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
