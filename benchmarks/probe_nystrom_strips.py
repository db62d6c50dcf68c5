"""How the size of a GPU strip of ``k(x, L)`` moves a Nyström fit's eigenvalues and its pass.

Issue 31. Each strip's scatter is a float32 ``syrk`` summed into float64: the longer the strip,
the more float32 additions each entry takes, and ``K_LL^(-1/2)`` (kept down to
``RCOND = 1e-10`` of its largest eigenvalue) magnifies that error in its smallest directions.
``N`` rows (command line) of the Gaussian mixture of ``bench_gpu.py``, 100,000-row chunks in
memory, 2,000 landmarks, 10 components, on the threaded scheduler. One process: the CPU fit
(float32, the default strips), then GPU fits at several strip lengths
(:data:`~dkpca.solvers.nystrom.GPU_FLOAT32_STRIP_ROWS`), and a GPU fit of the float64 data
(16,777-row strips): the reference for every eigenvalue.

With ``--cpu`` (no GPU needed) it asks the same of the CPU's strips, whose length is
``8 MiB / (m × itemsize)`` rows and so grows as the landmarks get fewer: float32 against
float64 fits on the CPU at 100, 300 and 1,000 landmarks.

Usage::

    python benchmarks/probe_nystrom_strips.py 4000000
    python benchmarks/probe_nystrom_strips.py 1000000 --cpu
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
from dkpca.blocked import DEFAULT_BLOCK_BYTES, STRIP_BYTES
from dkpca.options import Nystrom
from dkpca.solvers import nystrom

LANDMARKS = 2000


def _fit(X: da.Array, device: str, landmarks: int = LANDMARKS) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    with dask.config.set({"scheduler": "threads", "dkpca.device": device}):
        model = dkpca.KernelPCA(10, solver=Nystrom(n_landmarks=landmarks), random_state=0).fit(X)
    return model.eigenvalues_, time.perf_counter() - start


def _cpu(X64: np.ndarray) -> None:
    print(f"\nNyström on the CPU, {len(X64)} x 64; float32 against float64 fits")
    print("| landmarks | float32 strip rows | float32 fit (s) | float64 fit (s) "
          "| largest relative difference | 10th eigenvalue (float32 / float64) |")
    print("|---|---|---|---|---|---|")
    for landmarks in (100, 300, 1000):
        runs = {dtype: _fit(da.from_array(X64.astype(dtype), chunks=(100_000, 64)), "cpu",
                            landmarks) for dtype in (np.float32, np.float64)}
        (low, low_s), (high, high_s) = runs[np.float32], runs[np.float64]
        rows = min(DEFAULT_BLOCK_BYTES // 4, STRIP_BYTES) // (landmarks * 4)
        print(f"| {landmarks} | {rows} | {low_s:.2f} | {high_s:.2f} "
              f"| {np.max(np.abs(low - high) / high):.1e} | {low[-1]:.3f} / {high[-1]:.3f} |")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)7d ms %(message)s")
    logging.getLogger("distributed").setLevel(logging.WARNING)
    n = int(sys.argv[1])
    X64 = _data(n, 64)
    if "--cpu" in sys.argv:
        _cpu(X64)
        return
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
