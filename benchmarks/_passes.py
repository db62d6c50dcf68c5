"""One Krylov pass of the randomized solver against its hardware bound.

A pass multiplies the centred kernel by an ``n × b`` block. The bound is taken from rates
measured in the same process, just before:

* ``gemm``: a float32 GEMM of two 4096 × 4096 matrices on every BLAS thread (flop/s);
* ``gemm_tall``: a float32 GEMM of the products' own shape, a 4096 × 4096 tile times a
  4096 × b block, on every BLAS thread: what BLAS itself reaches on this shape;
* ``copy``: ``np.copyto`` of 256 MiB, counted as bytes read plus bytes written (byte/s);
* ``expm1``: ``np.expm1`` over a float32 array, split over two threads (entries/s).

Cached pass (the tiles persisted in memory): the larger of ``2 n² b`` flops at the GEMM rate
(every stored tile entry serves ``K_ij V_j`` and ``K_ijᵀ V_i``) and the tiles' bytes, read once,
at the copy rate; the same with the ``gemm_tall`` rate is reported beside it. Streamed pass (the tiles re-evaluated): the kernel's GEMM (``n² (d + 2)``
flops for the upper half) and the product's flops at the GEMM rate, plus the ``n²/2`` entries of
``expm1``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask.array as da
import numpy as np
from _common import best_time

from dkpca.kernels import RBF
from dkpca.solvers.randomized import AUTO_BLOCK_WIDTH
from dkpca.tiles import cache_kernel_tiles, symmetric_kernel_product

__all__ = ["hardware_rates", "measure_passes"]


def hardware_rates(block_width: int) -> dict[str, float]:
    """Measured float32 GEMM rates (flop/s), copy bandwidth (byte/s) and expm1 rate (1/s)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4096, 4096)).astype(np.float32)
    B = rng.standard_normal((4096, 4096)).astype(np.float32)
    A @ B
    gemm = 2 * 4096**3 / best_time(lambda: A @ B)
    tall = B[:, :block_width].copy()
    A @ tall
    gemm_tall = 2 * 4096**2 * block_width / best_time(lambda: A @ tall, repeat=5)
    source = np.ones(2**28 // 8)
    target = np.empty_like(source)
    np.copyto(target, source)
    copy = 2 * source.nbytes / best_time(lambda: np.copyto(target, source))
    E = -rng.random((4096, 8192), dtype=np.float32)
    out = np.empty_like(E)
    halves = np.array_split(np.arange(E.shape[0]), 2)
    with ThreadPoolExecutor(2) as pool:

        def expm1_split() -> None:
            list(pool.map(lambda rows: np.expm1(E[rows[0]:rows[-1] + 1],
                                                out=out[rows[0]:rows[-1] + 1]), halves))

        expm1_split()
        expm1 = E.size / best_time(expm1_split)
    return {"gemm_flops": gemm, "gemm_tall_flops": gemm_tall, "copy_bytes": copy,
            "expm1_entries": expm1}


def _cached_pass(
    kernel: RBF, Xd: da.Array, V: np.ndarray, block_bytes: int
) -> tuple[float, float, int]:
    """Seconds to cache the float32 tiles, seconds of the best of three products, tile bytes.

    The tiles are released on return.
    """
    start = time.perf_counter()
    tiles = cache_kernel_tiles(kernel, Xd, block_bytes=block_bytes, dtype=np.float32)
    cache_s = time.perf_counter() - start
    tiles.matmul(V)
    return cache_s, best_time(lambda: tiles.matmul(V)), tiles.nbytes


def measure_passes(X: np.ndarray, *, block_bytes: int = 128 * 2**20) -> dict[str, Any]:
    """Time the cache, one cached pass and one streamed pass (float32 tiles) against bounds.

    Each pass is the best of three products with a random ``n × b`` block, ``b`` the default
    block width. Returns times, bounds and their ratios, and the rates they came from.
    """
    n, d = X.shape
    b = AUTO_BLOCK_WIDTH
    kernel = RBF(gamma=1.0 / d)
    Xd = da.from_array(X, chunks=(min(n, 10_000), -1))
    V = np.random.default_rng(0).standard_normal((n, b))
    rates = hardware_rates(b)
    cache_s, cached_s, tile_bytes = _cached_pass(kernel, Xd, V, block_bytes)
    product_flops = 2.0 * n * n * b
    cached_bound = max(product_flops / rates["gemm_flops"], tile_bytes / rates["copy_bytes"])
    blas_bound = max(product_flops / rates["gemm_tall_flops"], tile_bytes / rates["copy_bytes"])
    streamed_s = best_time(lambda: symmetric_kernel_product(
        kernel, Xd, V, block_bytes=block_bytes, dtype=np.float32), repeat=2)
    upper = n * n / 2.0
    streamed_bound = ((2.0 * upper * (d + 2) + product_flops) / rates["gemm_flops"]
                      + upper / rates["expm1_entries"])
    cache_bound = 2.0 * upper * (d + 2) / rates["gemm_flops"] + upper / rates["expm1_entries"]
    return {
        "block_width": b,
        "rates": rates,
        "cache_s": cache_s,
        "cache_bound_s": cache_bound,
        "cached_pass_s": cached_s,
        "cached_bound_s": cached_bound,
        "cached_ratio": cached_s / cached_bound,
        "cached_blas_bound_s": blas_bound,
        "cached_blas_ratio": cached_s / blas_bound,
        "streamed_pass_s": streamed_s,
        "streamed_bound_s": streamed_bound,
        "streamed_ratio": streamed_s / streamed_bound,
    }
