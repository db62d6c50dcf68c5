"""Kernel tiles kept where they were computed: products, float32 storage, placement, memory."""

from __future__ import annotations

import logging
import os
import threading
import time
import tracemalloc
import warnings

import dask.array as da
import numpy as np
import psutil
import pytest
import scipy.linalg
from conftest import tasks_run
from sklearn.datasets import make_classification
from sklearn.preprocessing import KernelCenterer, StandardScaler

from dkpca import KernelPCA
from dkpca._cluster_workers import cluster_workers
from dkpca._kernel_solvers import resolve_cache_dtype
from dkpca._tile_layout import deal_stripes, stripe_pairs
from dkpca.blocked import center_columns
from dkpca.kernels import RBF, Linear, Polynomial, Sigmoid
from dkpca.options import Randomized
from dkpca.tiles import (
    KernelTiles,
    StoredTile,
    balanced_tile_rows,
    cache_kernel_tiles,
    cache_memory_budget,
    cached_kernel_bytes,
    evaluate_tile,
    striped_kernel_bytes,
    symmetric_kernel_product,
    tile_layout,
)

KERNELS = [RBF(gamma=0.2), Polynomial(2, 0.3, 1.0), Linear(), Sigmoid(0.01, 0.5),
           RBF(gamma=0.5) + Linear()]
# block_bytes values giving 1 tile, several tiles, and a ragged last tile for n = 203.
BLOCK_BYTES = [2**30, 64 * 64 * 8, 50 * 50 * 8]
CHUNKS = [203, 50, (100, 3, 100)]


@pytest.fixture
def X():
    return np.random.default_rng(3).normal(size=(203, 5))


def _exact_top(K: np.ndarray, k: int) -> np.ndarray:
    Kc = KernelCenterer().fit_transform(K)
    n = len(Kc)
    return scipy.linalg.eigh(Kc, eigvals_only=True, subset_by_index=(n - k, n - 1))[::-1]


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("block_bytes", BLOCK_BYTES)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cached_tiles_multiply_like_the_dense_kernel(kernel, block_bytes, dtype, X):
    tiles = cache_kernel_tiles(kernel, da.from_array(X, chunks=(37, -1)),
                               block_bytes=block_bytes, dtype=dtype)
    dense = kernel.pairwise(X)
    V = np.random.default_rng(0).normal(size=(X.shape[0], 3))
    rtol = 1e-12 if dtype == "float64" else 1e-6
    scale = np.abs(dense).max() * np.abs(V).sum(axis=0).max()
    np.testing.assert_allclose(tiles.matmul(V), dense @ V, atol=rtol * scale)
    np.testing.assert_allclose(tiles.row_sums, dense.sum(axis=1), atol=rtol * dense.shape[0]
                               * np.abs(dense).max())
    assert tiles.trace == pytest.approx(np.trace(dense), rel=rtol)
    n_tiles = len(tiles.bounds)
    assert tiles.n_tiles == n_tiles * (n_tiles + 1) // 2
    assert tiles.dtype == np.dtype(dtype)
    sizes = [stop - start for start, stop in tiles.bounds]
    itemsize = np.dtype(dtype).itemsize
    assert tiles.nbytes == (len(X) ** 2 + sum(s * s for s in sizes)) // 2 * itemsize
    assert tiles.nbytes == cached_kernel_bytes(len(X), itemsize, block_bytes)


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("block_bytes", BLOCK_BYTES)
def test_streamed_product_equals_dense(kernel, chunks, block_bytes, X):
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(X.shape[0], 4))
    Q -= Q.mean(axis=0)  # the solvers' blocks are orthogonal to the ones vector
    K = kernel.pairwise(X)
    Kc = KernelCenterer().fit_transform(K)
    W = symmetric_kernel_product(
        kernel, da.from_array(X, chunks=(chunks, -1)), Q, block_bytes=block_bytes
    )
    assert W.dtype == np.float64
    np.testing.assert_allclose(W, K @ Q, atol=1e-10)
    means = center_columns(W)
    np.testing.assert_allclose(W, Kc @ Q, atol=1e-10)
    np.testing.assert_allclose(means, K.mean(axis=0) @ Q, atol=1e-10)


def test_streamed_product_never_holds_the_kernel():
    n = 3000
    X = da.from_array(np.random.default_rng(5).normal(size=(n, 4)), chunks=(500, -1))
    Q = np.ones((n, 2))
    tracemalloc.start()
    try:
        symmetric_kernel_product(RBF(gamma=0.5), X, Q, block_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * n * 8 / 8, f"peak {peak / 2**20:.1f} MiB for a {n * n * 8 / 2**20} MiB kernel"


def test_released_tiles_say_so_instead_of_multiplying(X):
    # A failed fit releases its tiles (nothing left on the workers); they cannot multiply after.
    tiles = cache_kernel_tiles(RBF(gamma=0.2), X, block_bytes=64 * 64 * 8)
    np.testing.assert_allclose(tiles.matmul(np.ones((len(X), 1))).ravel(),
                               RBF(gamma=0.2).pairwise(X).sum(axis=1), rtol=1e-12)
    with pytest.raises(KeyboardInterrupt), tiles.released_on_error():
        raise KeyboardInterrupt
    assert tiles.states == []
    with pytest.raises(RuntimeError, match="released"):
        tiles.matmul(np.ones((len(X), 1)))


def test_shift_keeps_a_nearly_constant_kernel_exact():
    # gamma tiny: every entry is 1 - O(1e-6). Rounded to float32 as they are, the entries
    # would lose all their variation; stored less the tile's mean they keep it.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    kernel = RBF(gamma=1e-6)
    K = kernel.pairwise(X)
    tile = StoredTile.evaluate(kernel, X, X, np.dtype(np.float32), True)
    V = rng.normal(size=(300, 2))
    V -= V.mean(axis=0)
    (product,) = tile.products(V, None)
    naive = K.astype(np.float32).astype(np.float64) @ V
    exact = K @ V
    error = np.abs(product - exact).max()
    assert error < 1e-3 * np.abs(naive - exact).max()
    # Within float32 rounding of the stored variation (not of the entries, ~1): the bound is
    # eps32 |K - c| |V|; the error's share of it depends on the CPU's BLAS kernels (0.4 here).
    assert error < np.finfo(np.float32).eps * (np.abs(K - K.mean()) @ np.abs(V)).max()


def test_rbf_tiles_near_zero_and_near_one_keep_their_digits():
    # gamma large: K ~ I, the off-diagonal entries are tiny and must not be rounded as 1 - tiny;
    # gamma small: K ~ 1, the entries' variation must not be rounded away.
    X = np.random.default_rng(2).normal(size=(200, 4))
    for gamma, c in ((3.0, 0.0), (1e-6, 1.0)):
        kernel = RBF(gamma=gamma)
        K, offset = evaluate_tile(kernel, X, X, np.dtype(np.float32))
        assert offset == c
        exact = kernel.pairwise(X) - c
        off = ~np.eye(200, dtype=bool)
        relative = np.abs(K.astype(float) - exact)[off] / np.abs(exact)[off]
        assert np.median(relative) < 1e-4


def test_float32_evaluation_of_offset_data_is_accurate():
    X = np.random.default_rng(1).normal(size=(50, 8)) * 3 + 1e4
    kernel = RBF(gamma=0.05)
    K32, c = evaluate_tile(kernel, X[:20], X, np.dtype(np.float32))
    assert K32.dtype == np.float32 and c == 0.0  # entries far from 1: stored as they are
    np.testing.assert_allclose(K32 + c, kernel.pairwise(X[:20], X), atol=2e-6)


def test_balanced_tiles_give_every_thread_work():
    import dask

    with dask.config.set(num_workers=4):
        t = balanced_tile_rows(10_000, 4, 128 * 2**20)
    r = -(-10_000 // t)
    assert r * (r + 1) // 2 >= 12 and t * t * 4 <= 128 * 2**20


def _accuracy_data(n: int, d: int, unscaled: bool) -> np.ndarray:
    X, _ = make_classification(n_samples=n, n_features=d, n_informative=min(d, 20),
                               random_state=0)
    return X * 5.0 + 1e3 if unscaled else StandardScaler().fit_transform(X)


def _float32_matches_exact(n: int, d: int, gamma_d: float, unscaled: bool) -> None:
    X = _accuracy_data(n, d, unscaled)
    gamma = gamma_d / d
    reference = _exact_top(RBF(gamma=gamma).pairwise(X), 10)
    fits = {}
    for cache_dtype in ("auto", "float64"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # K ~ I: may stop at max_iter
            kp = KernelPCA(10, gamma=gamma,
                           solver=Randomized(cache_dtype=cache_dtype, max_iter=40),
                           random_state=0)
            fits[cache_dtype] = kp.fit(X)
    assert resolve_cache_dtype(fits["auto"].solver, X.dtype) == np.float32  # the default
    # Storage alone: the same iteration on float64 tiles.
    np.testing.assert_allclose(fits["auto"].eigenvalues_, fits["float64"].eigenvalues_,
                               rtol=2e-7)
    np.testing.assert_allclose(fits["auto"].eigenvalues_, reference, rtol=1e-6)


GAMMAS = [0.01, 1.0, 10.0]


@pytest.mark.parametrize("unscaled", [False, True], ids=["standardised", "offset"])
@pytest.mark.parametrize("gamma_d", GAMMAS)
@pytest.mark.parametrize("d", [64, 784])
def test_float32_cache_keeps_eigenvalues_small(d, gamma_d, unscaled):
    _float32_matches_exact(1200, d, gamma_d, unscaled)


# At n = 5,000, d = 784, gamma = 10/d, K ~ I and the ten eigenvalues lie within 4e-6 of each
# other: the default residual tolerance (1e-6 λ₁) stops after one pass, 4e-6 off, with float64
# tiles alike (the storage check above still holds there).
_UNRESOLVED = pytest.mark.xfail(reason="tol=1e-6 does not resolve a spectrum flatter than 1e-6",
                                raises=AssertionError)


@pytest.mark.slow
@pytest.mark.parametrize("unscaled", [False, True], ids=["standardised", "offset"])
@pytest.mark.parametrize("gamma_d", GAMMAS)
@pytest.mark.parametrize("d", [64, 784])
def test_float32_cache_keeps_eigenvalues(d, gamma_d, unscaled, request):
    if (d, gamma_d, unscaled) == (784, 10.0, False):
        request.applymarker(_UNRESOLVED)
    _float32_matches_exact(5000, d, gamma_d, unscaled)


def test_cache_dtype_resolution():
    assert resolve_cache_dtype(Randomized(), np.dtype("float64")) == np.float32
    assert resolve_cache_dtype(Randomized(tol=1e-9), np.dtype("float64")) == np.float64
    assert resolve_cache_dtype(Randomized(tol=1e-9), np.dtype("float32")) == np.float32
    explicit = Randomized(cache_dtype="float64")
    assert resolve_cache_dtype(explicit, np.dtype("float32")) == np.float64


@pytest.mark.parametrize("cache_dtype", ["float32", "float64"])
def test_streamed_and_cached_agree(digits, cache_dtype):
    kwargs = {"solver": Randomized(cache_dtype=cache_dtype), "random_state": 0}
    cached = KernelPCA(5, **kwargs).fit(digits)
    streamed = KernelPCA(5, max_memory=1000, **kwargs).fit(digits)
    rtol = 1e-10 if cache_dtype == "float64" else 1e-6
    np.testing.assert_allclose(streamed.eigenvalues_, cached.eigenvalues_, rtol=rtol)
    np.testing.assert_allclose(cached.eigenvalues_, _exact_top(
        cached.kernel_.pairwise(digits), 5), rtol=rtol)


def test_flat_spectrum_converges_within_the_default_passes():
    # d = 300 with 10 informative features: eigenvalues 6-10 within a few percent (the
    # benchmark's d = 784 case, smaller). The default block converges well inside max_iter.
    X, _ = make_classification(n_samples=3000, n_features=300, n_informative=10, random_state=0)
    X = StandardScaler().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "stopped after max_iter" warning
        kp = KernelPCA(10, solver="randomized", random_state=0).fit(X)
    assert kp.n_iter_ < Randomized().max_iter
    reference = _exact_top(kp.kernel_.pairwise(X), 10)
    np.testing.assert_allclose(kp.eigenvalues_, reference, rtol=1e-6)
    # A narrow block (the former default, k + 10 columns) needs more passes on the same data.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        narrow = KernelPCA(10, solver=Randomized(n_oversamples=10), random_state=0).fit(X)
    assert narrow.n_iter_ > kp.n_iter_


# --- a distributed cluster of worker processes ------------------------------------------------

distributed = pytest.importorskip("distributed")


class PeakRSS(threading.Thread):
    """Peak resident memory of this process above its level at the start, sampled every 5 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.process = psutil.Process(os.getpid())
        self.base = self.peak = self.process.memory_info().rss
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.005)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join()

    @property
    def increase(self) -> int:
        return self.peak - self.base


@pytest.mark.distributed
def test_tiles_stay_on_the_workers(process_client, caplog):
    # The client holds the data, O(n b) blocks and the Krylov basis; the tiles (about 500 MB
    # in float32) live in the worker processes.
    X = np.random.default_rng(0).normal(size=(16_000, 16))
    kwargs = {"solver": Randomized(n_oversamples=5), "random_state": 0}
    KernelPCA(3, **kwargs).fit(X[:3000])  # first use: imports, buffers, allocator arenas
    with caplog.at_level(logging.INFO, logger="dkpca.tiles"), PeakRSS() as rss:
        on_cluster = KernelPCA(3, **kwargs).fit(X)
    assert "cached" in caplog.text
    tile_bytes = cached_kernel_bytes(len(X), 4, 128 * 2**20)
    assert tile_bytes > 450 * 2**20
    assert rss.increase < 0.1 * tile_bytes, f"client grew by {rss.increase / 2**20:.0f} MiB"
    with _threads():
        threaded = KernelPCA(3, **kwargs).fit(X)
    assert threaded.n_iter_ == on_cluster.n_iter_
    # float32 tiles computed in other processes can differ in a last bit (numpy's SIMD loops
    # treat a buffer's unaligned head apart); float64 tiles agree to 1e-10 (next test).
    np.testing.assert_allclose(on_cluster.eigenvalues_, threaded.eigenvalues_, rtol=1e-8)


@pytest.mark.distributed
def test_cluster_and_threads_give_the_same_float64_result(process_client):
    X = np.random.default_rng(1).normal(size=(5_000, 16))
    kwargs = {"solver": Randomized(cache_dtype="float64"), "random_state": 0}
    on_cluster = KernelPCA(4, **kwargs).fit(X)
    with _threads():
        threaded = KernelPCA(4, **kwargs).fit(X)
    assert threaded.n_iter_ == on_cluster.n_iter_
    np.testing.assert_allclose(on_cluster.eigenvalues_, threaded.eigenvalues_, rtol=1e-10)
    X_new = X[:100] + 0.1
    np.testing.assert_allclose(on_cluster.transform(X_new), threaded.transform(X_new),
                               rtol=1e-8, atol=1e-10)


def _threads():
    """Run the block on the threaded scheduler although a client exists."""
    import dask

    return dask.config.set(scheduler="threads")


@pytest.mark.distributed
def test_auto_max_memory_counts_the_workers_memory(process_client, caplog):
    workers = cluster_workers(process_client).values()
    budget = cache_memory_budget()
    limits = sum(w["memory_limit"] for w in workers)
    assert 0 < budget <= 0.5 * limits
    assert budget < psutil.virtual_memory().available // 2  # not this machine's memory
    # A kernel whose float32 tiles exceed the workers' budget is streamed, not cached.
    n = int(np.sqrt(2.2 * budget / 4))
    assert cached_kernel_bytes(n, 4, 128 * 2**20) > budget
    X = da.from_array(np.random.default_rng(1).normal(size=(n, 2)), chunks=(10_000, -1))
    with caplog.at_level(logging.INFO, logger="dkpca.solvers.randomized"):
        kp = KernelPCA(2, solver=Randomized(tol=1e-2, max_iter=2), random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # max_iter=2: not converged
            kp.fit(X)
    assert "re-evaluating" in caplog.text


# --- holders: one task per worker, data sent once, the same result on any layout ----------


@pytest.mark.distributed
def test_a_pass_runs_one_task_per_worker_whatever_the_tiles(process_client, sockets_only):
    # The task path (workers off the client's machine); on it, a pass calls each worker
    # directly and runs no task (tests/test_shared_memory.py).
    X = np.random.default_rng(0).normal(size=(3_000, 8))
    V = np.random.default_rng(1).normal(size=(3_000, 4))
    counts = {}
    for block_bytes in (2**30, 300 * 300 * 8):  # few tiles, then 55
        tiles = cache_kernel_tiles(RBF(gamma=0.1), X, block_bytes=block_bytes, dtype="float64")
        counts[tiles.n_tiles] = tasks_run(process_client, lambda t=tiles: t.matmul(V))
    workers = len(cluster_workers(process_client))
    assert max(counts) >= 50 and min(counts) <= 10, counts
    assert set(counts.values()) == {workers}, counts  # one product task on each worker


@pytest.mark.distributed
def test_products_bypass_the_scheduler_on_a_local_cluster(process_client, monkeypatch,
                                                          sockets_only):
    # Through sockets (shared memory off), V out and the partials back go between the client
    # and the workers; the scheduler would relay every byte twice. A client told not to reach
    # the workers still gets them through it.
    scheduler = process_client.cluster.scheduler
    relayed = []
    for op in ("scatter", "gather"):
        handler = scheduler.handlers[op]

        def counting(*args, _op=op, _handler=handler, **kwargs):
            relayed.append(_op)
            return _handler(*args, **kwargs)

        monkeypatch.setitem(scheduler.handlers, op, counting)
    X = np.random.default_rng(0).normal(size=(2_000, 8))
    V = np.random.default_rng(1).normal(size=(2_000, 4))
    tiles = cache_kernel_tiles(RBF(gamma=0.1), X, block_bytes=300 * 300 * 8, dtype="float64")
    relayed.clear()
    direct = tiles.matmul(V)
    assert relayed == []
    monkeypatch.setattr(process_client, "direct_to_workers", False)
    relayed_product = tiles.matmul(V)
    assert sorted(set(relayed)) == ["gather", "scatter"]
    np.testing.assert_array_equal(direct, relayed_product)


@pytest.mark.distributed
def test_a_scatter_to_a_vanished_worker_is_recovered(process_client, monkeypatch, caplog,
                                                     sockets_only):
    # Right after a worker dies, a recovery can still see it in the scheduler's list and keep
    # its holder there; the next scatter to it then waits and raises "No valid workers found".
    # That is a lost worker too: recover again and finish the product.
    import dkpca.tiles

    X = np.random.default_rng(0).normal(size=(600, 8))
    V = np.random.default_rng(1).normal(size=(600, 3))
    tiles = cache_kernel_tiles(RBF(gamma=0.1), X, block_bytes=200 * 200 * 8, dtype="float64")
    expected = tiles.matmul(V)
    scatter, failures = dkpca.tiles._scatter_to_each, []

    async def vanished_once(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise TimeoutError("No valid workers found")
        return await scatter(*args, **kwargs)

    monkeypatch.setattr(dkpca.tiles, "_scatter_to_each", vanished_once)
    with caplog.at_level(logging.WARNING, logger="dkpca.tiles"):
        np.testing.assert_array_equal(tiles.matmul(V), expected)
    assert failures and "kernel tiles lost with a worker (TimeoutError" in caplog.text


@pytest.mark.distributed
def test_in_memory_data_is_sent_once_never_inside_a_graph(process_client, caplog):
    import dask

    X = np.random.default_rng(0).normal(size=(20_000, 64))  # 10 MiB
    with (dask.config.set({"distributed.admin.large-graph-warning-threshold": "1MiB"}),
          warnings.catch_warnings()):
        warnings.filterwarnings("error", message=".*large graph.*")
        model = KernelPCA(3, solver=Randomized(n_oversamples=5), random_state=0).fit(X)
    assert model.n_iter_ > 1


@pytest.mark.distributed
@pytest.mark.parametrize("layout", ["symmetric", "stripes"])
def test_in_memory_blocks_are_scattered_in_one_call_dense_or_sparse(process_client, monkeypatch,
                                                                    layout):
    import dask
    import scipy.sparse as sp

    calls = []
    scatter = type(process_client).scatter

    def counting(self, data, *args, **kwargs):
        calls.append(len(data) if isinstance(data, list) else 1)
        return scatter(self, data, *args, **kwargs)

    monkeypatch.setattr(type(process_client), "scatter", counting)
    dense = np.random.default_rng(0).normal(size=(900, 6))
    dense[np.abs(dense) < 1.0] = 0.0
    reference = RBF(gamma=0.2).pairwise(dense) @ np.ones((900, 2))
    with dask.config.set({"dkpca.tile-layout": layout}):
        for X in (dense, sp.csr_matrix(dense)):
            calls.clear()
            tiles = cache_kernel_tiles(RBF(gamma=0.2), X, block_bytes=300 * 300 * 8,
                                       dtype="float64")
            assert calls == [len(tiles.bounds)] and len(tiles.bounds) >= 3  # one scatter, all
            np.testing.assert_allclose(tiles.matmul(np.ones((900, 2))), reference, rtol=1e-12)


@pytest.mark.distributed
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stripes_return_each_row_once_and_equal_the_symmetric_layout(process_client,
                                                                     monkeypatch, dtype,
                                                                     sockets_only):
    # 10 row blocks: both layouts cut the same tiles, so the products must agree bit for bit
    # (a tile between two stripes is the same tile for both workers; sums are double-doubles).
    # Through sockets, where each worker returns its partial (shared memory: one result).
    import dask

    import dkpca.tiles

    X = np.random.default_rng(0).normal(size=(3_000, 8))
    V = np.random.default_rng(1).normal(size=(3_000, 4))
    returned = []
    sum_partials = dkpca.tiles._sum_partials
    monkeypatch.setattr(dkpca.tiles, "_sum_partials", lambda n, partials, **kw: returned.append(
        (sum(len(high) for _, high, _ in partials), [low is None for *_, low in partials]))
        or sum_partials(n, partials, **kw))
    products, tiles = {}, {}
    for layout in ("stripes", "symmetric"):
        with dask.config.set({"dkpca.tile-layout": layout}):
            tiles[layout] = cache_kernel_tiles(RBF(gamma=0.1), X, dtype=dtype,
                                               block_bytes=300 * 300 * np.dtype(dtype).itemsize)
        returned.clear()
        products[layout] = tiles[layout].matmul(V)
        assert tiles[layout].layout == layout and len(tiles[layout].bounds) == 10
        # stripes come back rounded (one float64 array each); overlapping partials do not
        if layout == "stripes":
            assert returned == [(3_000, [True, True])]
        else:
            assert returned[0][0] > 4_000 and returned[0][1] == [False, False]
    np.testing.assert_array_equal(products["stripes"], products["symmetric"])
    np.testing.assert_array_equal(tiles["stripes"].row_sums, tiles["symmetric"].row_sums)
    assert tiles["stripes"].trace == tiles["symmetric"].trace
    itemsize = np.dtype(dtype).itemsize
    assert tiles["stripes"].nbytes == striped_kernel_bytes(3_000, 300, [1, 1], itemsize)
    assert tiles["symmetric"].nbytes == cached_kernel_bytes(3_000, itemsize,
                                                            300 * 300 * itemsize)
    exact = RBF(gamma=0.1).pairwise(X) @ V
    rtol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(products["stripes"], exact, rtol=rtol, atol=rtol * 10)


@pytest.mark.distributed
def test_auto_layout_uses_stripes_only_where_they_fit_and_partials_go_by_socket(monkeypatch):
    import dask

    import dkpca._shared_memory
    import dkpca._tile_layout

    monkeypatch.setattr(dkpca._tile_layout, "STRIPES_MIN_HOLDERS", 4)
    X = np.random.default_rng(0).normal(size=(3_000, 8))
    kwargs = {"block_bytes": 300 * 300 * 8, "dtype": np.dtype(np.float64)}
    with (distributed.LocalCluster(n_workers=4, threads_per_worker=1, processes=False,
                                   dashboard_address=":0") as cluster,
          distributed.Client(cluster)):
        # workers on this machine: partials in shared memory, summed on the client's cores
        by_socket = not dkpca._shared_memory.shared_memory_allowed()
        layout = KernelTiles(RBF(gamma=0.1), X, **kwargs, max_memory=2**40).layout
        assert layout == ("stripes" if by_socket else "symmetric")
        with dask.config.set({"dkpca.shared-memory": False}):  # partials through sockets
            tiles = KernelTiles(RBF(gamma=0.1), X, **kwargs, max_memory=2**40)
            assert tiles.layout == "stripes" and len(tiles.bounds) % 4 == 0  # equal stripes
            striped = tiles.nbytes
            rows = tiles.bounds[0][1]
            assert striped == striped_kernel_bytes(3_000, rows, [1] * 4, 8)
            assert cached_kernel_bytes(3_000, 8, 300 * 300 * 8) < striped < 3_000**2 * 8
            tiles = KernelTiles(RBF(gamma=0.1), X, **kwargs, max_memory=striped - 1)
            assert tiles.layout == "symmetric"  # a kernel that fits once is still cached
            streamed = KernelTiles(RBF(gamma=0.1), X, **kwargs, cached=False)
            assert streamed.layout == "symmetric"  # streamed: evaluated twice a pass
    with (dask.config.set({"dkpca.shared-memory": False}),
          distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                   dashboard_address=":0") as cluster,
          distributed.Client(cluster)):
        assert KernelTiles(RBF(gamma=0.1), X, **kwargs).layout == "symmetric"  # too few


def _pass_work_and_bytes(plan):
    """Each holder's products a pass (an off-diagonal tile serves two) and its tiles' area."""
    work, held = [], []
    for _, pairs, _ in plan.kept:
        areas = [(plan.bounds[i][1] - plan.bounds[i][0]) * (plan.bounds[j][1] - plan.bounds[j][0])
                 for i, j in pairs]
        work.append(sum(a * (1 if i == j else 2) for a, (i, j) in zip(areas, pairs, strict=True)))
        held.append(sum(areas))
    return np.array(work, dtype=float), np.array(held, dtype=float)


@pytest.mark.parametrize("holders", [4, 8, 16])
def test_cached_tiles_are_dealt_by_work_within_a_memory_share(holders):
    import dask

    from dkpca._tile_holders import Holder
    from dkpca._tile_layout import WORK_DEAL_MAX_SHARE, plan_tiles

    found = [Holder(f"tcp://10.0.0.{k}:4000", 2) for k in range(holders)]
    args = (100_000, 4, 128 * 2**20, found)
    with dask.config.set(num_workers=16):  # the tile count of 16 cores: 18 row blocks
        cached = plan_tiles(*args, True, lambda: 2**40, partials_by_socket=False)
        streamed = plan_tiles(*args, False, lambda: 2**40)
    assert cached.layout == streamed.layout == "symmetric"
    assert cached.bounds == streamed.bounds and len(cached.bounds) == 18
    work, held = _pass_work_and_bytes(cached)
    area_work, area_held = _pass_work_and_bytes(streamed)  # streamed tiles: dealt by area
    assert np.allclose(area_held.max() / area_held.mean(), 1, atol=0.03)
    if holders < 16:  # by work: the busiest holder closer to the mean, bytes within the share
        assert work.max() / work.mean() < area_work.max() / area_work.mean() - 0.01
        assert work.max() / work.mean() <= 1.015
        assert held.max() / held.mean() <= WORK_DEAL_MAX_SHARE
    else:  # 16 holders of 18 row blocks: by work one would hold 1.12 times its share
        assert [p for _, p, _ in cached.kept] == [p for _, p, _ in streamed.kept]


def test_stripes_deal_whole_row_blocks_by_threads():
    bounds = [(k * 10, k * 10 + 10) for k in range(12)]
    stripes = deal_stripes(bounds, [2, 1, 1])
    assert stripes == [range(6), range(6, 9), range(9, 12)]
    for stripe in stripes:
        pairs = stripe_pairs(stripe, 12)
        assert all(i <= j and (i in stripe or j in stripe) for i, j in pairs)
        assert len(pairs) == sum(1 for i in range(12) for j in range(i, 12)
                                 if i in stripe or j in stripe)
    with pytest.raises(ValueError, match="dkpca.tile-layout must be one of"):
        import dask

        with dask.config.set({"dkpca.tile-layout": "rows"}):
            tile_layout()


@pytest.mark.distributed
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_any_layout_of_holders_gives_the_threaded_result(dtype):
    import dask

    X = np.random.default_rng(2).normal(size=(4_000, 10))
    kwargs = {"solver": Randomized(cache_dtype=dtype), "random_state": 0,
              "block_size": 500 * 500 * 8}
    with dask.config.set(scheduler="threads", num_workers=2):
        threaded = KernelPCA(5, **kwargs).fit(X)
    for workers, threads, layout in [(1, 2, "auto"), (2, 1, "auto"), (3, 1, "symmetric"),
                                     (3, 1, "stripes")]:
        with (distributed.LocalCluster(n_workers=workers, threads_per_worker=threads,
                                       processes=False, dashboard_address=":0") as cluster,
              distributed.Client(cluster), dask.config.set({"dkpca.tile-layout": layout})):
            on_cluster = KernelPCA(5, **kwargs).fit(X)
        # Products are summed as double-doubles, so no summation order enters; tiles made by
        # another thread can still differ in a last bit, which the Krylov iteration amplifies.
        rtol = 1e-8 if dtype == "float32" else 1e-10
        np.testing.assert_allclose(on_cluster.eigenvalues_, threaded.eigenvalues_, rtol=rtol)
        assert on_cluster.n_iter_ == threaded.n_iter_


def test_double_double_sums_do_not_depend_on_order():
    from dkpca._tile_holders import two_sum_into

    terms = np.random.default_rng(0).normal(size=(200, 50)) * np.logspace(-8, 8, 200)[:, None]
    totals = []
    for order in (range(200), reversed(range(200)), np.random.default_rng(1).permutation(200)):
        high, low = np.zeros(50), np.zeros(50)
        for k in order:
            two_sum_into(high, low, terms[k])
        totals.append(high + low)
    plain = [terms[list(order)].sum(axis=0) for order in (range(200), range(199, -1, -1))]
    assert not np.array_equal(*plain)  # plain float64 sums do depend on the order
    np.testing.assert_array_equal(totals[0], totals[1])
    np.testing.assert_array_equal(totals[0], totals[2])


def _partials_summed_one_by_one(n, partials):
    """The sum as each partial's rows at once, in order: the spec of ``_sum_partials``."""
    from dkpca._tile_holders import two_sum_into

    high, low = np.zeros((n, *partials[0][1].shape[1:])), np.zeros((n, *partials[0][1].shape[1:]))
    touched = np.zeros(n, dtype=bool)
    for lo, part_high, part_low in partials:
        rows = slice(lo, lo + len(part_high))
        if touched[rows].any():
            two_sum_into(high[rows], low[rows], part_high)
            low[rows] += part_low
        else:
            high[rows], low[rows] = part_high, part_low
        touched[rows] = True
    return high + low


@pytest.mark.parametrize("columns", [(), (3,)])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("reused", [False, True])
def test_partials_summed_in_bands_on_threads_equal_one_by_one(monkeypatch, columns, threads,
                                                              reused):
    """Bands of rows, shared among threads, give every row the same sum bit for bit.

    The symmetric layout's partials (every row for the first holder, rows to the end for the
    others), and ones that leave rows untouched, start or end inside a band, or are read-only
    (a socket's), whichever thread adds which band.
    """
    import dkpca._tile_transport as transport

    monkeypatch.setattr(transport, "SUM_BAND_BYTES", 8 * 7 * int(np.prod(columns)))  # 7 rows
    monkeypatch.setattr(transport, "THREADED_SUM_ELEMENTS", 1 if threads > 1 else 10**9)
    monkeypatch.setattr(transport, "available_cores", lambda: threads)
    rng = np.random.default_rng(0)
    n = 100

    def partial(lo, hi, writable=True):
        scale = 10.0 ** rng.integers(-8, 8, size=(hi - lo, *[1] * len(columns)))
        high = rng.normal(size=(hi - lo, *columns)) * scale
        low = high * 1e-17 * rng.normal(size=high.shape)
        for array in (high, low):
            array.flags.writeable = writable
        return lo, high, low

    cases = {
        "symmetric": [partial(0, n), partial(30, n), partial(52, n), partial(81, n)],
        "gaps": [partial(5, 40), partial(33, 61), partial(70, 96), partial(10, 12)],
        "read-only": [partial(0, n, writable=False), partial(45, n, writable=False)],
    }
    for name, partials in cases.items():
        expected = _partials_summed_one_by_one(n, partials)
        copies = [(lo, high.copy(), low.copy()) for lo, high, low in partials]
        for (_, high, low), (_, source, _) in zip(copies, partials, strict=True):
            high.flags.writeable = low.flags.writeable = source.flags.writeable
        total = transport._sum_partials(n, copies, reused=reused)
        np.testing.assert_array_equal(total, expected, err_msg=name)
        assert total.shape == (n, *columns)
        if reused:  # a new array: the partials' memory is written again by the next product
            assert not any(np.shares_memory(total, high) for _, high, _ in copies)


def test_a_partial_no_other_overlaps_is_rounded_where_it_is_made():
    """The one holder's partial comes back as one float64 array: the same numbers, half the bytes."""
    import dask

    from dkpca._tile_holders import state_product

    rng = np.random.default_rng(3)
    X, V = rng.normal(size=(900, 5)), rng.normal(size=(900, 3))
    with dask.config.set(scheduler="threads"):  # this process, whatever client another test left
        tiles = cache_kernel_tiles(RBF(gamma=0.3), X, dtype="float32",
                                   block_bytes=300 * 300 * 4)
    assert len(tiles.holders) == 1 and len(tiles.bounds) == 3
    lo, high, low = state_product(tiles.states[0], V, 2)
    rounded_lo, rounded, none = state_product(tiles.states[0], V, 2, exclusive=True)
    assert lo == rounded_lo == 0 and low is not None and none is None
    np.testing.assert_array_equal(rounded, high + low)
    np.testing.assert_array_equal(tiles.matmul(V), high + low)
    np.testing.assert_allclose(tiles.matmul(V), RBF(gamma=0.3).pairwise(X) @ V, rtol=1e-5,
                               atol=1e-4)
    # summed in arrays given (a shared-memory file's rows): the same numbers, in them
    out = np.zeros((950, 3)), np.zeros((950, 3))
    given = out[0][50:], out[1][50:]
    _, into_high, into_low = state_product(tiles.states[0], V, 2, out=given)
    assert into_high is given[0] and into_low is given[1]
    np.testing.assert_array_equal(out[0][50:] + out[1][50:], high + low)  # any order of tiles
    assert not out[0][:50].any() and not out[1][:50].any()
    out[0][...] = 0.0
    _, into_rounded, none = state_product(tiles.states[0], V, 2, exclusive=True,
                                          out=(out[0][50:], None))
    assert none is None and into_rounded.base is out[0]
    np.testing.assert_array_equal(into_rounded, rounded)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reused_buffers_give_the_same_numbers(dtype):
    """Products and double-double sums through a ProductScratch equal the fresh-array ones."""
    from dkpca._tile_holders import two_sum_into
    from dkpca._tile_values import ProductScratch

    rng = np.random.default_rng(0)
    Xi, Xj = rng.normal(size=(70, 4)), rng.normal(size=(50, 4)) + 0.3
    tile = StoredTile.evaluate(RBF(gamma=0.2), Xi, Xj, np.dtype(dtype), False)
    Vi, Vj = rng.normal(size=(70, 6)), rng.normal(size=(50, 6))
    scratch = ProductScratch(80, 6, np.dtype(dtype))  # larger than any tile: views are cut
    scratch.results[0].fill(np.nan)  # stale contents must not leak into a result
    fresh = tile.products(Vi, Vj)
    reused = tile.products(Vi, Vj, scratch)
    for a, b in zip(fresh, reused, strict=True):
        np.testing.assert_array_equal(a, b)
    terms = rng.normal(size=(30, 70, 6)) * np.logspace(-8, 8, 30)[:, None, None]
    sums = []
    for buffers in (None, scratch.sums):
        high, low = np.zeros((70, 6)), np.zeros((70, 6))
        for term in terms:
            two_sum_into(high, low, term, buffers)
        sums.append((high, low))
    np.testing.assert_array_equal(sums[0][0], sums[1][0])
    np.testing.assert_array_equal(sums[0][1], sums[1][1])


@pytest.mark.slow
@pytest.mark.distributed
def test_ten_consecutive_fits_on_two_worker_processes(process_client):
    X = np.random.default_rng(4).normal(size=(8_000, 16))
    kwargs = {"solver": Randomized(cache_dtype="float64"), "random_state": 0}
    reference = KernelPCA(5, **kwargs).fit(X)
    for _ in range(10):
        again = KernelPCA(5, **kwargs).fit(X)
        np.testing.assert_allclose(again.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


@pytest.mark.parametrize(("gamma", "near_one"), [(3.0, False), (1e-6, True)])
@pytest.mark.parametrize("diagonal", [True, False])
def test_a_streamed_tile_is_the_kernel_less_its_shift(gamma, near_one, diagonal):
    # Streamed exponential tiles take exp's form and the shift from a subsample and apply both
    # in one pass (dkpca._fused); they must hold what a cached tile of the same blocks holds,
    # K less a shift, to float32 rounding of the stored values, the diagonal exactly 1.
    rng = np.random.default_rng(4)
    Xi = rng.normal(size=(300, 4))
    Xj = Xi if diagonal else rng.normal(size=(250, 4))
    kernel = RBF(gamma=gamma)
    float32 = np.dtype(np.float32)
    tile = StoredTile.evaluate(kernel, Xi, Xj, float32, diagonal, statistics=False)
    cached = StoredTile.evaluate(kernel, Xi, Xj, float32, diagonal)
    assert tile.values.dtype == np.float32 and (tile.shift > 0.5) == near_one
    streamed_kernel = tile.values.astype(np.float64) + tile.shift
    cached_kernel = cached.values.astype(np.float64) + cached.shift
    ulp = np.finfo(np.float32).eps * max(np.abs(tile.values).max(), np.abs(cached.values).max())
    assert np.abs(streamed_kernel - cached_kernel).max() <= 2 * ulp
    if diagonal:
        np.testing.assert_allclose(np.diag(streamed_kernel), 1.0, rtol=0, atol=ulp)
        assert tile.values[0, 0] == np.float32(1 - float(near_one)) - np.float32(
            tile.shift - float(near_one))


def test_a_refused_connection_to_a_killed_worker_is_recovered_and_other_errors_are_not():
    # A direct scatter to a worker killed since the last pass fails in distributed's connect
    # with a plain OSError raised from CommClosedError: that is a lost worker, recovered like
    # KilledWorker. A missing file is the user's error and must surface at once, untouched.
    import logging

    from distributed.comm import CommClosedError

    from dkpca._worker_loss import recovering

    log = logging.getLogger("test")

    def refused():
        try:
            raise CommClosedError("ConnectionRefusedError: [Errno 111] Connection refused")
        except CommClosedError as err:
            raise OSError("Timed out trying to connect to tcp://127.0.0.1:1 after 30 s") from err

    tries, recoveries = [], []

    def attempt():
        tries.append(1)
        if len(tries) == 1:
            refused()
        return "done"

    assert recovering(attempt, lambda: recoveries.append(1), log, "tiles", "again") == "done"
    assert (len(tries), len(recoveries)) == (2, 1)

    def missing():
        tries.append(1)
        raise FileNotFoundError("train.zarr")

    tries.clear(), recoveries.clear()
    with pytest.raises(FileNotFoundError, match="train.zarr"):
        recovering(missing, lambda: recoveries.append(1), log, "tiles", "again")
    assert (len(tries), len(recoveries)) == (1, 0)


def test_the_workers_are_never_read_from_a_cache_the_client_refreshes_without_them():
    # The client refreshes its cached scheduler information on a timer, without the workers;
    # read from that cache (scheduler_info), a holder list or memory budget could come out
    # empty between the refresh it asked for and the read (a recovery in CI found no worker
    # left). With the timer at 1 ms the race shows in about a quarter of such reads.
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        expected = sorted(cluster.scheduler.workers)
        seen = [sorted(cluster_workers(client)) for _ in range(300)]
    assert len(expected) == 2
    assert all(addresses == expected for addresses in seen)
