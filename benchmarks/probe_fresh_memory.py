"""What memory costs the first time a process writes it, against how long ago it was freed.

A cached fit writes its kernel tiles into memory it has just allocated (953 MiB at 20,000 rows
in float32), in this process on threads or in the workers on a ``LocalCluster``. On some
machines (virtual machines and sandboxes that hand freed memory back to their host) such memory
costs far more when it was freed long ago than when it was freed a moment before: then the
tiles' build, and a fit, take longer or shorter by how recently this or another process freed
memory, which no code in the fit controls. This probe measures it: for each pause ``s`` in
``--pauses``, it writes ``--gib`` GiB (``numpy.ones``), frees it, waits ``s`` seconds and times
writing the same amount again, in a fresh allocation. It prints the seconds and GiB/s of each.

Usage::

    python benchmarks/probe_fresh_memory.py
    python benchmarks/probe_fresh_memory.py --gib 0.5 --pauses 0 1 5 20
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _common import environment, markdown_table, print_environment


def _written(gib: float) -> tuple[float, np.ndarray]:
    """Seconds to allocate ``gib`` GiB and write every byte of it, and the array."""
    start = time.perf_counter()
    array = np.ones(int(gib * 2**30) // 8)
    return time.perf_counter() - start, array


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--pauses", type=float, nargs="+", default=[0, 0.5, 1, 2, 5, 10, 20])
    args = parser.parse_args()
    print_environment(environment(), sys.argv)
    rows = []
    for pause in args.pauses:
        _, array = _written(args.gib)
        del array  # an allocation this large is unmapped when freed: its pages go back
        time.sleep(pause)
        seconds, array = _written(args.gib)
        del array
        rows.append([f"{pause:g}", f"{seconds:.3f}", f"{args.gib / seconds:.2f}"])
        print(f"freed {pause:g} s before: {seconds:.3f} s", flush=True)
    print()
    print(markdown_table(["freed before (s)", f"writing {args.gib:g} GiB afresh (s)", "GiB/s"],
                         rows))


if __name__ == "__main__":
    main()
