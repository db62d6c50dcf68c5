"""Would MDD choose the same with its spectra solved in float32? Its choices, side by side.

MDD's draws are mostly ``eigvalsh`` of 500 × 500 centred kernel matrices, and on 16 threads
LAPACK's ``syevd`` on them scales 5.55 times (BENCHMARKS.md §5), short of issue 30's 8.
Rounded to float32 (``ssyevd``) a matrix streams half the bytes and may stay in each core's
cache; ``probe_eigvalsh_threads.py`` measures whether that scales, this probe whether it would
change what MDD selects, and times MDD itself both ways. For each data set
(``bench_selection.py``'s scaling case first: ``make_two_rings(2000)`` with 500 training rows;
then four of the MDD paper's sets at ``select_model``'s defaults; ``--sets N`` keeps the first
``N``) it runs :func:`dkpca.select_model` (MDD, ``--draws`` draws, ``random_state=0``) twice:
the spectra solved as shipped (float64), then rounded to float32 first (the data's spectrum and
the noise draws alike: this probe swaps the solver of :mod:`dkpca.selection._spectra`), on the
threaded scheduler with ``--threads`` threads. It prints both choices, both times, and the
largest difference between the two tables' data and noise eigenvalues, relative to each
``σ²``'s largest eigenvalue.

Usage::

    python benchmarks/probe_mdd_float32.py
    python benchmarks/probe_mdd_float32.py --threads 16 --sets 1   # then --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import dask
import numpy as np
from _common import environment, markdown_table, print_environment


def _solved_in_float32(kernels: np.ndarray) -> np.ndarray:
    return np.linalg.eigvalsh(kernels.astype(np.float32), UPLO="U").astype(np.float64)


def _data_sets() -> dict[str, tuple[np.ndarray, int | None]]:
    """Each data set and its training rows (``None``: ``select_model``'s default)."""
    from dkpca import datasets

    return {
        "two rings, 2,000, 500 training rows (bench_selection.py's)":
            (datasets.make_two_rings(2000, random_state=0)[0], 500),
        "rings, 2,000": (datasets.make_rings(2000, random_state=0)[0], None),
        "semicircles, 1,000": (datasets.make_semicircles(1000, random_state=0)[0], None),
        "square, 1,000": (datasets.make_square(1000, random_state=0)[0], None),
        "signal in noise, 1,000 × 2,000":
            (datasets.make_signal_in_noise(1000, random_state=0)[0], None),
    }


def _selected(X: np.ndarray, n_train: int | None, draws: int, solver: Callable) -> tuple:
    from dkpca import select_model
    from dkpca.selection import _spectra

    shipped = _spectra._eigvalsh
    _spectra._eigvalsh = solver
    try:
        start = time.perf_counter()
        result = select_model(X, "mdd", n_draws=draws, n_train=n_train, random_state=0)
        return result, time.perf_counter() - start
    finally:
        _spectra._eigvalsh = shipped


def _largest_difference(a, b) -> float:
    """Largest difference of the two tables' eigenvalues, relative to each width's largest."""
    worst = 0.0
    for name in ("data_eigenvalues", "noise_eigenvalues"):
        x, y = a.table[name].values, b.table[name].values
        scale = np.nanmax(np.abs(x), axis=1, keepdims=True)
        worst = max(worst, float(np.nanmax(np.abs(x - y) / scale)))
    return worst


def main() -> None:
    from dkpca.selection import _spectra

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of the threaded scheduler (default: dask's)")
    parser.add_argument("--sets", type=int, default=None, help="only the first SETS data sets")
    args = parser.parse_args()
    print_environment(environment(), sys.argv)
    rows = []
    options = {"scheduler": "threads"}
    if args.threads:
        options["num_workers"] = args.threads
    with dask.config.set(options):
        for name, (X, n_train) in list(_data_sets().items())[: args.sets]:
            as_shipped, shipped_s = _selected(X, n_train, args.draws, _spectra._eigvalsh)
            rounded, rounded_s = _selected(X, n_train, args.draws, _solved_in_float32)
            rows.append([name, f"{as_shipped.sigma2:.4g} / {as_shipped.n_components}"
                         if as_shipped.sigma2 else "none",
                         f"{rounded.sigma2:.4g} / {rounded.n_components}"
                         if rounded.sigma2 else "none",
                         "yes" if (as_shipped.sigma2, as_shipped.n_components)
                         == (rounded.sigma2, rounded.n_components) else "**no**",
                         f"{_largest_difference(as_shipped, rounded):.1e}",
                         f"{shipped_s:.2f}", f"{rounded_s:.2f}"])
            print(rows[-1], flush=True)
    print()
    print(markdown_table(["data", "float64: σ² / components", "float32: σ² / components",
                          "same choice", "largest difference", "float64 (s)", "float32 (s)"],
                         rows))


if __name__ == "__main__":
    main()
