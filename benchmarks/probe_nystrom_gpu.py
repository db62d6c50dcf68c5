"""Where the time of a Nyström fit on a GPU goes, and what the first fit in a process costs.

Issue 31. ``N`` standard normal float32 rows in 64 dimensions (``N`` from the command line),
100,000-row chunks, ``KernelPCA(10, solver=Nystrom(n_landmarks=LANDMARKS))``, RBF, on the threaded
scheduler with ``dkpca.device = "cuda"``. In one process, one after another:

1. the pass's scatter product on one strip of ``k(x, L)`` (the rows of
   :data:`~dkpca.solvers.nystrom.GPU_STRIP_BYTES`, 2,000 columns, float32 and float64): CuPy's
   ``Kᵀ @ K`` (a GEMM) against dkpca's :func:`~dkpca.linalg.crossproduct` (cuBLAS ``syrk``,
   then the mirrored triangle), the best of five, timed with the GPU synchronised;
2. each step of the pass on one 100,000-row float32 chunk, timed the same way: the copy to
   the GPU, and per strip (of :func:`~dkpca.solvers.nystrom.gpu_strip_rows` rows, as the
   pass takes them) the kernel, the shift, the column sums (in float64; in float32; as a
   product with a row of ones; as the pass takes them) and the scatter; then the whole chunk
   as a task of the pass computes it, on the same chunk and on chunks not read before;
3. a first fit on 200,000 rows (CuPy compiles its kernels here; the first call of each kind
   of GPU work runs alone, :func:`dkpca._device.first_call_alone`);
4. a fit on all rows in memory, on the threaded scheduler (dkpca's default) and on the
   synchronous one (one task at a time: whether threads contend for the GPU);
5. with ``--all``, the same rows from a Zarr store in a temporary folder, and the CPU fit of
   the first 1,000,000 rows, for scale.

dkpca's log lines (with milliseconds since the start) split each fit: landmarks chosen, the
pass over the data, the basis. Every 30 s the stacks of all threads are printed
(``faulthandler``): where a slow step is stuck.

Usage::

    python benchmarks/probe_nystrom_gpu.py 4000000 [--all]
"""

from __future__ import annotations

import faulthandler
import logging
import sys
import tempfile
import time

import dask
import dask.array as da
import numpy as np

import dkpca
from dkpca._device import import_cupy, to_device
from dkpca.kernels import RBF
from dkpca.linalg import column_sums, crossproduct
from dkpca.options import Nystrom
from dkpca.solvers.nystrom import GPU_STRIP_BYTES, _kernel_moments, gpu_strip_rows

LANDMARKS = 2000


def _fit(X: da.Array, label: str, device: str = "cuda", scheduler: str = "threads") -> None:
    start = time.perf_counter()
    with dask.config.set({"scheduler": scheduler, "dkpca.device": device}):
        dkpca.KernelPCA(10, solver=Nystrom(n_landmarks=LANDMARKS), random_state=0).fit(X)
    print(f"=== {label}: {time.perf_counter() - start:.2f} s", flush=True)


def _best_seconds(function, repeats: int = 5) -> float:
    """The best of ``repeats`` synchronised calls, after one untimed (cuBLAS, compiles)."""
    synchronize = import_cupy().cuda.Device().synchronize
    function()
    seconds = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        function()
        synchronize()
        seconds.append(time.perf_counter() - start)
    return min(seconds)


def _crossproduct_probe() -> None:
    cupy = import_cupy()
    for dtype in (np.float32, np.float64):
        rows = GPU_STRIP_BYTES // (LANDMARKS * np.dtype(dtype).itemsize)
        K = cupy.random.random_sample((rows, LANDMARKS)).astype(dtype)
        flops = 2.0 * rows * LANDMARKS**2
        for label, product in (("K.T @ K (GEMM)", lambda A: A.T @ A),
                               ("crossproduct (syrk)", crossproduct)):
            best = _best_seconds(lambda product=product, K=K: product(K))
            print(f"=== {np.dtype(dtype).name} strip {rows} x {LANDMARKS}, {label}: "
                  f"{best * 1e3:.2f} ms ({flops / best / 1e12:.1f} TFLOP/s of the GEMM's flops)",
                  flush=True)
        difference = float(abs(crossproduct(K) - K.T @ K).max() / abs(K.T @ K).max())
        print(f"=== {np.dtype(dtype).name}: largest difference {difference:.1e}", flush=True)


def _step_probe() -> None:
    cupy = import_cupy()
    rng = np.random.default_rng(0)
    chunk = rng.standard_normal((100_000, 64), dtype=np.float32)
    landmarks_host = chunk[:LANDMARKS].copy()
    kernel = RBF(gamma=1 / 64)
    shift_host = kernel.pairwise(landmarks_host).astype(np.float64).mean(axis=0)
    landmarks, shift = to_device(landmarks_host, "cuda"), to_device(shift_host, "cuda")
    rows = gpu_strip_rows(LANDMARKS, np.dtype(np.float32))
    strip = to_device(chunk[:rows], "cuda")
    K = kernel.pairwise(strip, landmarks)
    ones = cupy.ones(rows, dtype=np.float32)
    fresh = iter(rng.standard_normal((6, 100_000, 64), dtype=np.float32))  # one per call
    steps = {
        "copy the chunk to the GPU": lambda: to_device(chunk, "cuda"),
        "strip: the kernel": lambda: kernel.pairwise(strip, landmarks),
        "strip: minus the shift": lambda: K.__isub__(shift.astype(K.dtype)),
        "strip: column sums, float64": lambda: K.sum(axis=0, dtype=np.float64),
        "strip: column sums, float32": lambda: K.sum(axis=0),
        "strip: column sums, ones @ K": lambda: ones @ K,
        "strip: column sums as the pass takes them": lambda: column_sums(K),
        "strip: scatter (crossproduct)": lambda: crossproduct(K),
        "strip: diagonal sum": lambda: kernel.diag(strip).sum(dtype=np.float64),
        "chunk: the pass's task": lambda: _kernel_moments(chunk, landmarks_host, kernel, rows,
                                                         shift_host, "cuda"),
        "chunk: the pass's task, a chunk not read before": lambda: _kernel_moments(
            next(fresh), landmarks_host, kernel, rows, shift_host, "cuda"),
    }
    for label, step in steps.items():
        print(f"=== {label} ({rows} rows a strip): {_best_seconds(step) * 1e3:.2f} ms",
              flush=True)


def main() -> None:
    logging.basicConfig(level=logging.INFO,
                        format="%(relativeCreated)7d ms %(name)s: %(message)s")
    for name in ("distributed", "numcodecs", "zarr", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)
    n = int(sys.argv[1])
    faulthandler.dump_traceback_later(30, repeat=True, file=sys.stderr)
    _crossproduct_probe()
    _step_probe()
    X = np.random.default_rng(0).standard_normal((n, 64), dtype=np.float32)
    in_memory = da.from_array(X, chunks=(100_000, 64))
    _fit(in_memory[:200_000], "first fit, 200,000 rows")
    _fit(in_memory, f"in memory {n}, threads")
    _fit(in_memory, f"in memory {n}, synchronous", scheduler="synchronous")
    if "--all" not in sys.argv:
        return
    with tempfile.TemporaryDirectory() as scratch:
        in_memory.to_zarr(f"{scratch}/X.zarr")
        _fit(da.from_zarr(f"{scratch}/X.zarr"), f"zarr {n}")
    _fit(in_memory[:1_000_000], "in memory 1,000,000, cpu", device="cpu")


if __name__ == "__main__":
    main()
