"""Krylov bookkeeping: the client-side work of a randomized kernel PCA fit beside its products.

Issue 30, point 4: on flat spectra (``d = 784``) the orthogonalisation and Rayleigh–Ritz of
:func:`dkpca.linalg.block_krylov_eigh` once took more than half the fit. This benchmark fits
``KernelPCA(10, solver="randomized")`` (RBF, ``gamma = 1/d``, ``random_state=0``) on
standard normal data whose first 20 features are stretched (a decaying-then-flat spectrum),
and splits the Krylov time into the kernel products (``K V``, timed around the operator) and
the rest (bookkeeping: block orthogonalisation, the Rayleigh–Ritz eigenproblem, residuals).

Three variants run alternately in this one process, ``--repeat`` times each:

- ``bookkeeping on 1 thread`` (dkpca's choice up to
  :data:`dkpca.solvers.randomized.ONE_THREAD_BOOKKEEPING_ROWS` rows): the whole Krylov loop
  outside its passes runs on one BLAS thread;
- ``bookkeeping on all threads, eigh on 1``: dkpca's choice above that size: multithreaded
  BLAS, the small eigenproblems on one thread;
- ``all on all threads``: those eigenproblems left to multithreaded LAPACK too.

Each variant is timed on a quiet machine and with one core kept busy by a background process
multiplying matrices (as when a dask worker or another job shares the node): multithreaded
LAPACK on small matrices stalls when a core is taken. The reference for the fit as a whole is
scikit-learn's ``KernelPCA(eigen_solver="randomized")`` and ``"arpack"`` on the same data, with
the eigenvalue error of each against ``numpy.linalg.eigh`` of the centred kernel.

Usage::

    python benchmarks/bench_krylov.py                  # 10,000 x 784
    python benchmarks/bench_krylov.py --n 5000 --repeat 2
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import sys
import time

import numpy as np
from _common import environment, markdown_table, print_environment, wait_for_quiet


def _data(n: int, d: int) -> np.ndarray:
    X = np.random.default_rng(0).standard_normal((n, d))
    X[:, :20] *= np.linspace(3.0, 1.2, 20)
    return X


def _busy(stop) -> None:
    """Keep one core busy with single-threaded GEMMs until ``stop`` is set."""
    from threadpoolctl import threadpool_limits

    A = np.random.default_rng(1).standard_normal((512, 512))
    with threadpool_limits(1):
        while not stop.is_set():
            A @ A


@contextlib.contextmanager
def _load(busy: bool):
    if not busy:
        yield
        return
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=_busy, args=(stop,), daemon=True)
    process.start()
    time.sleep(1.0)  # spawned and spinning
    try:
        yield
    finally:
        stop.set()
        process.join()


VARIANTS = ("bookkeeping on 1 thread", "bookkeeping on all threads, eigh on 1",
            "all on all threads")


def _timed_fit(X: np.ndarray, variant: str) -> dict[str, float]:
    import dkpca
    from dkpca import linalg
    from dkpca.solvers import randomized

    krylov = linalg.block_krylov_eigh
    times: dict[str, float] = {}

    def timed_krylov(matmul, start, k, **options):
        spent = [0.0]

        def product(V):
            begin = time.perf_counter()
            result = matmul(V)
            spent[0] += time.perf_counter() - begin
            return result

        begin = time.perf_counter()
        result = krylov(product, start, k, **options)
        times.update(krylov=time.perf_counter() - begin, products=spent[0],
                     passes=result.n_passes)
        return result

    single, rows = linalg.single_threaded_blas, randomized.ONE_THREAD_BOOKKEEPING_ROWS
    randomized.block_krylov_eigh = timed_krylov
    if variant != VARIANTS[0]:
        randomized.ONE_THREAD_BOOKKEEPING_ROWS = 0
    if variant == VARIANTS[2]:
        linalg.single_threaded_blas = contextlib.nullcontext
    try:
        begin = time.perf_counter()
        model = dkpca.KernelPCA(10, solver="randomized", random_state=0).fit(X)
        times["fit"] = time.perf_counter() - begin
    finally:
        randomized.block_krylov_eigh = krylov
        linalg.single_threaded_blas = single
        randomized.ONE_THREAD_BOOKKEEPING_ROWS = rows
    times["bookkeeping"] = times["krylov"] - times["products"]
    times["eigenvalues"] = model.eigenvalues_
    return times


def _reference(X: np.ndarray) -> np.ndarray:
    from sklearn.metrics.pairwise import rbf_kernel

    K = rbf_kernel(X, gamma=1.0 / X.shape[1])
    row = K.mean(axis=0)
    K -= row[:, None] + row[None, :] - row.mean()
    return np.linalg.eigvalsh(K)[::-1][:10]


def _sklearn(X: np.ndarray, solver: str) -> tuple[float, np.ndarray]:
    from sklearn.decomposition import KernelPCA

    begin = time.perf_counter()
    model = KernelPCA(10, kernel="rbf", gamma=1.0 / X.shape[1], eigen_solver=solver,
                      random_state=0).fit(X)
    return time.perf_counter() - begin, model.eigenvalues_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--d", type=int, default=784)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print_environment(environment(), sys.argv)
    X = _data(args.n, args.d)
    exact = _reference(X)
    _timed_fit(X[: args.n // 10], VARIANTS[0])  # imports and first calls, untimed

    def error(values):
        return float(np.max(np.abs(np.asarray(values) - exact)) / exact[0])

    rows = []
    for busy in (False, True):
        runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
        with _load(busy):
            for _ in range(args.repeat):
                for name, results in runs.items():
                    if not busy:
                        wait_for_quiet(0.3, patience=30.0)
                    results.append(_timed_fit(X, name))
        for name, results in runs.items():
            median = {key: statistics.median(r[key] for r in results)
                      for key in ("fit", "products", "bookkeeping")}
            rows.append([
                "one core busy" if busy else "quiet", name, f"{median['fit']:.2f}",
                f"{median['products']:.2f}", f"{median['bookkeeping']:.2f}",
                f"{median['bookkeeping'] / median['fit']:.0%}", results[0]["passes"],
                f"{error(results[0]['eigenvalues']):.1e}",
            ])
    for solver in ("randomized", "arpack"):
        wait_for_quiet(0.3, patience=30.0)
        seconds, values = _sklearn(X, solver)
        rows.append(["quiet", f"scikit-learn {solver}", f"{seconds:.2f}", "", "", "", "",
                     f"{error(values):.1e}"])
    print(f"\nKernelPCA(10), RBF, {args.n} x {args.d}; medians of {args.repeat} fits\n")
    print(markdown_table(["machine", "variant", "fit s", "products s", "bookkeeping s",
                          "bookkeeping / fit", "passes", "eigenvalue error"], rows))


if __name__ == "__main__":
    main()
