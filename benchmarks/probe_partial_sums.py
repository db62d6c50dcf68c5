"""The client's sum of the holders' overlapping partials: one by one, or in bands on its cores.

In the symmetric tile layout each holder returns a double-double partial product over every
row its tiles touch: the first holder every row, the others the rows from their first tile
block to the end. The client adds them with TwoSum once a pass, while the workers wait for the
next one. This probe builds such partials for ``W`` holders (tiles dealt in row-major runs of
equal bytes, so holder ``w`` starts at row ``n (1 - sqrt(1 - w / W))``), ``n × b`` float64,
and times, on fresh copies each round:

* *one by one*: each partial's rows at once, in order, on one thread (dkpca's sum before
  2026-11-29): ``_sum_partials`` with one band of every row;
* *bands, 1 thread*: ``dkpca._tile_transport._sum_partials`` with one core: every partial in
  turn within each band of rows, so that a band's arrays stay in cache;
* *bands, all cores*: the same, the bands shared among this process's cores.

Every result is checked equal, bit for bit, to the one-by-one sum.

Usage::

    python benchmarks/probe_partial_sums.py --n 100000 --holders 2 4 8
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from unittest import mock

import numpy as np

import dkpca._tile_transport as transport
from dkpca.moments import available_cores


def symmetric_partials(n: int, b: int, holders: int, seed: int = 0) -> list:
    """The double-double partials of ``holders`` holders of the symmetric layout."""
    rng = np.random.default_rng(seed)
    starts = [int(n * (1 - np.sqrt(1 - w / holders))) for w in range(holders)]
    return [(lo, rng.standard_normal((n - lo, b)), rng.standard_normal((n - lo, b)) * 1e-17)
            for lo in starts]


def timed(sum_fn: Callable[[int, list], np.ndarray], n: int, partials: list,
          rounds: int) -> tuple[float, np.ndarray]:
    """Median seconds of ``sum_fn`` over ``rounds`` fresh copies of the partials, and a result."""
    seconds = []
    for _ in range(rounds):
        copies = [(lo, high.copy(), low.copy()) for lo, high, low in partials]
        start = time.perf_counter()
        result = sum_fn(n, copies)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--b", type=int, default=32, help="columns of V (the Krylov block)")
    parser.add_argument("--holders", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    cores = available_cores()
    print(f"{args.n} × {args.b} partials, {cores} cores, median of {args.rounds} rounds\n")
    print("| holders | rows added | one by one (ms) | bands, 1 thread (ms) | "
          f"bands, {cores} threads (ms) | one by one / bands on all cores | equal |")
    print("|---|---|---|---|---|---|---|")
    def banded(n: int, partials: list) -> np.ndarray:
        return transport._sum_partials(n, partials, reused=True)

    for holders in args.holders:
        partials = symmetric_partials(args.n, args.b, holders)
        with mock.patch.object(transport, "available_cores", lambda: 1):
            with mock.patch.object(transport, "SUM_BAND_BYTES", 8 * args.n * args.b):
                plain, reference = timed(banded, args.n, partials, args.rounds)
            single, first = timed(banded, args.n, partials, args.rounds)
        threaded, second = timed(banded, args.n, partials, args.rounds)
        equal = np.array_equal(first, reference) and np.array_equal(second, reference)
        rows = sum(len(high) for _, high, _ in partials[1:])
        print(f"| {holders} | {rows:,} | {1e3 * plain:.1f} | {1e3 * single:.1f} | "
              f"{1e3 * threaded:.1f} | {plain / threaded:.2f} | {equal} |")


if __name__ == "__main__":
    main()
