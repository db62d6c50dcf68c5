"""How the size of a GPU strip of ``k(x, L)`` moves a Nyström fit's eigenvalues and its pass.

Issue 31. Each strip's scatter is a float32 ``syrk`` summed into float64: the longer the strip,
the more float32 additions each entry takes, and ``K_LL^(-1/2)`` (kept down to
``RCOND = 1e-10`` of its largest eigenvalue) magnifies that error in its smallest directions.
``N`` rows (command line) of the Gaussian mixture of ``bench_gpu.py``, 100,000-row chunks in
memory, 2,000 landmarks, 10 components, on the threaded scheduler. One process: the CPU fit
(float32, the default strips), then GPU fits at several strip lengths
(:data:`~dkpca.solvers.nystrom.GPU_FLOAT32_STRIP_ROWS`), and a GPU fit of the float64 data
(16,777-row strips): the reference for every eigenvalue.

Usage::

    python benchmarks/probe_nystrom_strips.py 4000000
"""

from __future__ import annotations

import logging
import sys
import time

import dask
import dask.array as da
import numpy as np
from bench_gpu import _data

import dkpca
from dkpca.options import Nystrom
from dkpca.solvers import nystrom

LANDMARKS = 2000


def _fit(X: da.Array, device: str) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    with dask.config.set({"scheduler": "threads", "dkpca.device": device}):
        model = dkpca.KernelPCA(10, solver=Nystrom(n_landmarks=LANDMARKS), random_state=0).fit(X)
    return model.eigenvalues_, time.perf_counter() - start


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)7d ms %(message)s")
    logging.getLogger("distributed").setLevel(logging.WARNING)
    n = int(sys.argv[1])
    X64 = _data(n, 64)
    X32 = da.from_array(X64.astype(np.float32), chunks=(100_000, 64))
    _fit(X32[:200_000], "cuda")  # CuPy compiles its kernels
    runs = {"cpu float32": _fit(X32, "cpu")}
    for rows in (4194, 8388, 16777, 33554):  # 32, 64, 128 and 256 MiB at 2,000 landmarks
        nystrom.GPU_FLOAT32_STRIP_ROWS = rows
        runs[f"gpu float32, {rows} rows a strip"] = _fit(X32, "cuda")
    runs["gpu float64 (reference)"] = _fit(da.from_array(X64, chunks=(100_000, 64)), "cuda")
    reference = runs["gpu float64 (reference)"][0]
    print(f"\nNyström, {n} x 64, {LANDMARKS} landmarks; eigenvalues against the float64 GPU fit")
    print("| fit | seconds | largest relative difference | 10th eigenvalue |")
    print("|---|---|---|---|")
    for label, (eigenvalues, seconds) in runs.items():
        difference = np.max(np.abs(eigenvalues - reference) / reference)
        print(f"| {label} | {seconds:.2f} | {difference:.1e} | {eigenvalues[-1]:.2f} |")


if __name__ == "__main__":
    main()
