"""Randomized kernel PCA: block Krylov iteration on the centred kernel operator."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import warnings

import dask.array as da
import numpy as np

from dkpca._device import array_module, c_float64, configured_device, to_device, to_host
from dkpca._tile_holders import device_memory
from dkpca.blocked import center_columns, compute, kernel_diagonal
from dkpca.kernels import Kernel
from dkpca.linalg import KrylovResult, block_krylov_eigh, single_threaded_blas
from dkpca.tiles import KernelTiles, cache_memory_budget, cached_kernel_bytes, storage_dtype

from ._basis import KernelBasis
from ._common import (
    basis_from_eigenpairs,
    check_finite_kernel,
    check_kernel_device,
    in_memory_rows,
)
from ._components import FLOAT32_ZERO_RATIO, ZERO_RATIO, ComponentRule

__all__ = ["fit_randomized"]

logger = logging.getLogger(__name__)

#: First guess for the number of components when a rule (fraction, threshold) sets it.
_INITIAL_COMPONENTS = 16

#: Krylov block width when ``n_oversamples`` is not given: ``k + 10``, widened to this. A
#: tall-skinny GEMM runs far below the BLAS peak, so a pass with 32 columns costs little more
#: than one with 20 and needs fewer passes on flat spectra; much wider blocks grow the
#: client's orthogonalisation work (``O(n · columns · b)`` a pass) faster than they save passes.
AUTO_BLOCK_WIDTH = 32

#: Smallest tile on a GPU (1 GiB: 16384² float32). Each tile costs a few dozen kernel launches
#: whatever its size: on an H100 at 100,000 × 64 a cached pass took 0.37 / 0.14 / 0.14 s with
#: 64 MiB / 256 MiB / 1 GiB tiles (``benchmarks/bench_gpu.py --tile-probe``), and a streamed
#: pass at 1,000,000 rows 25.4 s with 256 MiB tiles, 15.3 s with 1 GiB.
GPU_TILE_BYTES = 2**30

#: Up to this many rows the client's Krylov bookkeeping (orthogonalisation, Rayleigh–Ritz) runs
#: on one BLAS thread. After a multithreaded call, OpenBLAS's idle threads spin for about 0.1 s
#: (``OPENBLAS_THREAD_TIMEOUT``), taking cores from the pass that follows. At 10,000 × 784 a
#: pass takes tens of milliseconds: on 2 cores the products took 1.32 s of a 2.76 s fit with
#: multithreaded bookkeeping, 0.95 s of 2.44 s with one thread (``benchmarks/bench_krylov.py``,
#: BENCHMARKS.md §10); at 20,000 × 64 the fit took the same time either way. With more rows
#: the bookkeeping grows (``O(n · columns · b)`` a pass) and the pass hides the spin.
ONE_THREAD_BOOKKEEPING_ROWS = 20_000

#: Share of the GPUs' free memory the cached tiles may take; the rest holds the data rows, one
#: tile being evaluated and the products.
GPU_CACHE_SHARE = 0.8


def device_limits(block_bytes: int, max_memory: int | None,
                  data_bytes: int) -> tuple[int, int]:
    """Return the tile size and the cache budget for the device of the ``dkpca.device`` setting.

    ``max_memory`` is the caller's cap on the cached tiles, ``None`` for automatic: on the CPU,
    :func:`~dkpca.tiles.cache_memory_budget` (the workers' or this machine's memory). On a GPU
    tiles are at least :data:`GPU_TILE_BYTES` and the budget is the holders' GPU memory (a
    share of what is free, less the data rows and two tiles of work space), capped by
    ``max_memory`` when given.

    Examples
    --------
    >>> device_limits(2**20, 2**30, 10**6)
    (1048576, 1073741824)
    """
    if configured_device() == "cpu":
        return block_bytes, cache_memory_budget() if max_memory is None else max_memory
    block_bytes = max(block_bytes, GPU_TILE_BYTES)
    budget = max(0, int(GPU_CACHE_SHARE * device_memory()) - data_bytes - 2 * block_bytes)
    return block_bytes, budget if max_memory is None else min(budget, max_memory)


def block_width(k: int, n: int, n_oversamples: int | None) -> int:
    """Columns of the Krylov block for ``k`` components of an ``n × n`` operator.

    Examples
    --------
    >>> block_width(10, 10_000, None), block_width(10, 10_000, 5), block_width(30, 100, None)
    (32, 15, 40)
    """
    width = k + n_oversamples if n_oversamples is not None else max(k + 10, AUTO_BLOCK_WIDTH)
    return min(n, width)


class _CenteredKernelOperator:
    """``Q -> H K H Q`` (``H = I - 11ᵀ/n``), computed as ``H (K (H Q))``.

    The kernel's upper tiles are cached where they were computed (see :mod:`dkpca.tiles`) when
    they fit in ``max_memory`` bytes; otherwise every product re-evaluates them, and the first
    product carries one extra column, ``1/n``, that yields ``K``'s row means without a pass of
    their own. ``source`` is what the tiles are evaluated from: the caller's in-memory data
    where it has it (sent to the workers once, never inside a task graph), else ``X``.
    """

    def __init__(
        self, kernel: Kernel, X: da.Array, *, block_bytes: int, max_memory: int, dtype: np.dtype,
        source: np.ndarray | da.Array | None = None, owner: str = "KernelPCA",
    ):
        self.kernel, self.X, self.dtype, self.owner = kernel, X, dtype, owner
        self.n_passes = 0
        self.pass_seconds: list[float] = []
        n = X.shape[0]
        source = X if source is None else source
        cached = cached_kernel_bytes(n, dtype.itemsize, block_bytes) <= max_memory
        self.tiles = KernelTiles(kernel, source, block_bytes=block_bytes, dtype=dtype,
                                 cached=cached, max_memory=max_memory)
        self.row_means: np.ndarray | None = None
        with self.tiles.released_on_error():
            if cached:
                self.row_means = self.tiles.row_sums / n
                check_finite_kernel(self.row_means, X, owner)
                self.diagonal_sum = self.tiles.trace
            else:
                (self.diagonal_sum,) = compute(kernel_diagonal(kernel, X).sum(dtype=np.float64))
                logger.info("randomized solver re-evaluating %s kernel tiles (kernel > "
                            "max_memory)", dtype)

    def __call__(self, Q: np.ndarray) -> np.ndarray:
        """Return ``H K H Q``, on ``Q``'s device (a GPU's basis never leaves it)."""
        self.n_passes += 1
        start = time.perf_counter()
        xp = array_module(Q)
        # Q is orthogonal to the ones vector up to rounding, but K's eigenvalue along it is
        # large (about n · mean(K)), so the residue must go: H K H Q exactly, for any Q.
        Q = Q - xp.mean(Q, axis=0)
        if self.row_means is None:
            n, b = Q.shape
            augmented = xp.empty((n, b + 1), dtype=xp.float64)
            augmented[:, :b], augmented[:, b] = Q, 1.0 / n
            W = self.tiles.matmul(augmented)
            self.row_means = to_host(W[:, -1]).copy()
            check_finite_kernel(self.row_means, self.X, self.owner)
            W = W[:, :-1]
        else:
            W = self.tiles.matmul(Q)
        W = c_float64(W)
        center_columns(W)
        self.pass_seconds.append(time.perf_counter() - start)
        logger.info("kernel pass %d: %.3f s", self.n_passes, self.pass_seconds[-1])
        return W

    def total_variance(self) -> float:
        """Trace of the centred kernel: ``sum(diag K) - n · mean(K)``."""
        return self.diagonal_sum - self.X.shape[0] * float(self.row_means.mean())


def _on_host(result: KrylovResult) -> KrylovResult:
    """Return ``result`` with its eigenpairs copied to the host (unchanged if they are there)."""
    return dataclasses.replace(result, eigenvalues=to_host(result.eigenvalues),
                               eigenvectors=to_host(result.eigenvectors))


def bookkeeping_threads(n: int) -> contextlib.AbstractContextManager:
    """Hold BLAS to one thread for the Krylov bookkeeping of ``n`` rows, when ``n`` is small.

    Up to :data:`ONE_THREAD_BOOKKEEPING_ROWS` rows; above it every thread stays. The passes
    inside set their own threads (their tasks run BLAS on one thread each).

    Examples
    --------
    >>> from dkpca.linalg import blas_single_threaded
    >>> with bookkeeping_threads(10_000):
    ...     blas_single_threaded()
    True
    """
    if n <= ONE_THREAD_BOOKKEEPING_ROWS:
        return single_threaded_blas()
    return contextlib.nullcontext()


def fit_randomized(
    kernel: Kernel,
    X: da.Array,
    rule: ComponentRule,
    *,
    seed: np.random.SeedSequence,
    block_bytes: int,
    max_memory: int | None = None,
    cache_dtype: np.dtype | str | None = None,
    n_oversamples: int | None = None,
    tol: float = 1e-6,
    max_iter: int = 30,
    basis_data: np.ndarray | da.Array | None = None,
    owner: str = "KernelPCA",
) -> tuple[KernelBasis, np.ndarray, KrylovResult]:
    """Randomized kernel PCA by block Krylov iteration.

    A random block of :func:`block_width` columns starts a block Lanczos iteration on the
    centred kernel operator (:func:`dkpca.linalg.block_krylov_eigh`), which stops once the
    residual of every wanted eigenpair is below ``tol`` relative to the first eigenvalue.
    With a variance-fraction or threshold rule, the number of components is found by doubling
    the first guess until the rule is decided.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
    rule : ComponentRule
    seed : numpy.random.SeedSequence
        Source of the random start block (generated in memory, so independent of chunking).
    block_bytes : int
        Memory for one kernel tile.
    max_memory : int, optional
        Bytes the kernel's upper tiles may take where they are cached; above, tiles are
        re-evaluated every pass. By default the workers' memory under a distributed client,
        else this machine's, or the GPUs' with ``dkpca.device = "cuda"`` (see
        :func:`device_limits`).
    cache_dtype : numpy dtype, optional
        Precision of the stored (or streamed) tiles; the data's by default. Products are
        accumulated in float64 either way (see :mod:`dkpca.tiles`).
    n_oversamples : int, optional
        Block width beyond ``k``; by default ``k + 10`` widened to :data:`AUTO_BLOCK_WIDTH`.
    tol, max_iter
        Relative residual tolerance, maximum passes.
    basis_data : array, optional
        What the fitted basis keeps as training data (default ``X``).
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Returns
    -------
    basis : KernelBasis
    eigenvectors : (n, k) array
    result : KrylovResult
        Passes, convergence and residual of the final run.

    Notes
    -----
    Cached: memory about ``n² × itemsize / 2`` (the upper tiles, on the workers under a
    distributed client), time ``O(n² d)`` once plus ``O(n² b)`` per pass.
    Streaming: memory one tile per thread plus the ``n × (passes · b)`` Krylov basis; each
    pass costs a full kernel evaluation (``O(n² d)``, halved by symmetry).
    A fit that fails or is interrupted cancels its tasks and releases the tiles (see
    :meth:`dkpca.tiles.KernelTiles.release`) before the error propagates.

    References
    ----------
    C. Musco and C. Musco, "Randomized block Krylov methods for stronger and faster
    approximate singular value decomposition", Advances in Neural Information Processing
    Systems 28, 2015.

    N. Halko, P.-G. Martinsson and J. A. Tropp, "Finding structure with randomness:
    probabilistic algorithms for constructing approximate matrix decompositions", SIAM Review
    53(2), 217–288, 2011.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = da.from_array(np.random.default_rng(0).normal(size=(300, 3)))
    >>> basis, _, res = fit_randomized(RBF(gamma=0.5), X, ComponentRule(count=3),
    ...     seed=np.random.SeedSequence(0), block_bytes=2**20, max_memory=2**30)
    >>> res.converged, basis.n_components
    (True, 3)
    """
    n = X.shape[0]
    dtype = storage_dtype(X, cache_dtype)
    check_kernel_device(kernel, owner)
    tile_bytes, cache_bytes = device_limits(block_bytes, max_memory, X.nbytes)
    operator = _CenteredKernelOperator(
        kernel, X, block_bytes=tile_bytes, max_memory=cache_bytes, dtype=dtype,
        source=in_memory_rows(X, basis_data),
        owner=owner,
    )
    rng = np.random.default_rng(seed)
    # Holders in this process on a GPU: the Krylov basis lives on the GPU beside the tiles.
    device = configured_device() if operator.tiles.local else "cpu"
    k = rule.count if rule.count is not None else min(n, _INITIAL_COMPONENTS)
    # A failed (or interrupted) fit leaves nothing on the workers, although its traceback,
    # kept by the caller, holds the operator.
    with operator.tiles.released_on_error():
        while True:
            k = min(k, n)
            start = rng.standard_normal((n, block_width(k, n, n_oversamples)))
            start -= start.mean(axis=0)  # orthogonal to the ones vector, see center_columns
            with bookkeeping_threads(n):
                result = _on_host(block_krylov_eigh(operator, to_device(start, device), k,
                                                    tol=tol, max_iter=max_iter))
            total = operator.total_variance()
            if k >= n or rule.satisfied_by(result.eigenvalues, total):
                break
            logger.info("component rule needs more than %d components; doubling", k)
            k *= 2
    if not result.converged:
        warnings.warn(
            f"{owner}: the randomized solver stopped after {result.n_passes} passes with "
            f"relative residual {result.residual:.2g} > tol={tol:g}; raise "
            f"Randomized(max_iter=...) or use solver='exact'.",
            UserWarning,
            stacklevel=3,
        )
    logger.info("randomized solver: %d passes, residual %.3g", operator.n_passes, result.residual)
    basis, vectors = basis_from_eigenpairs(
        kernel,
        X if basis_data is None else basis_data,
        result.eigenvalues,
        result.eigenvectors,
        operator.row_means,
        total,
        rule,
        block_bytes,
        owner,
        FLOAT32_ZERO_RATIO if dtype == np.float32 else ZERO_RATIO,
    )
    return basis, vectors, result
