"""Where the time of a Nyström fit on a GPU goes, and what the first fit in a process costs.

Issue 31. ``N`` standard normal float32 rows in 64 dimensions (``N`` from the command line),
100,000-row chunks, ``KernelPCA(10, solver=Nystrom(n_landmarks=2000))``, RBF, on the threaded
scheduler with ``dkpca.device = "cuda"``. In one process, one after another:

1. a first fit on 200,000 rows (CuPy compiles its kernels here);
2. a fit on all rows in memory, the chunks' sums added on the GPU (dkpca's code);
3. the same, each chunk's sums copied to the host as they used to be (``_kernel_moments``
   wrapped to return host arrays);
4. the same rows from a Zarr store in a temporary folder;
5. the CPU fit of the first 1,000,000 rows, for scale.

dkpca's log lines (with milliseconds since the start) split each fit: landmarks chosen, the
pass over the data, the basis. Every 30 s the stacks of all threads are printed
(``faulthandler``): where a slow step is stuck.

Usage::

    python benchmarks/probe_nystrom_gpu.py 4000000
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
from dkpca._device import to_host
from dkpca.options import Nystrom
from dkpca.solvers import nystrom


def _fit(X: da.Array, label: str, device: str = "cuda") -> None:
    start = time.perf_counter()
    with dask.config.set({"scheduler": "threads", "dkpca.device": device}):
        dkpca.KernelPCA(10, solver=Nystrom(n_landmarks=2000), random_state=0).fit(X)
    print(f"=== {label}: {time.perf_counter() - start:.2f} s", flush=True)


def main() -> None:
    logging.basicConfig(level=logging.INFO,
                        format="%(relativeCreated)7d ms %(name)s: %(message)s")
    for name in ("distributed", "numcodecs", "zarr", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)
    n = int(sys.argv[1])
    X = np.random.default_rng(0).standard_normal((n, 64), dtype=np.float32)
    in_memory = da.from_array(X, chunks=(100_000, 64))
    faulthandler.dump_traceback_later(30, repeat=True, file=sys.stderr)
    _fit(in_memory[:200_000], "first fit, 200,000 rows")
    _fit(in_memory, f"in memory {n}, sums on the GPU")
    moments = nystrom._kernel_moments
    nystrom._kernel_moments = lambda *args, **kwargs: to_host(moments(*args, **kwargs))
    _fit(in_memory, f"in memory {n}, sums per chunk to the host")
    nystrom._kernel_moments = moments
    with tempfile.TemporaryDirectory() as scratch:
        in_memory.to_zarr(f"{scratch}/X.zarr")
        _fit(da.from_zarr(f"{scratch}/X.zarr"), f"zarr {n}, sums on the GPU")
    _fit(in_memory[:1_000_000], "in memory 1,000,000, cpu", device="cpu")


if __name__ == "__main__":
    main()
