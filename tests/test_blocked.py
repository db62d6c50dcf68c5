
import dask
import dask.array as da
import numpy as np
import pytest
from dask.array.utils import assert_eq
from sklearn.preprocessing import KernelCenterer

from dkpca.blocked import (
    center_kernel_inplace,
    gather_kernel,
    kernel_diagonal,
    kernel_matrix,
    kernel_product,
    tile_rows,
    tree_sum,
)
from dkpca.kernels import RBF, Linear, Polynomial

KERNELS = [RBF(gamma=0.2), Polynomial(2, 0.3, 1.0), Linear()]
# block_bytes values giving 1 tile, several tiles, and a ragged last tile for n = 203.
BLOCK_BYTES = [2**30, 64 * 64 * 8, 50 * 50 * 8]
CHUNKS = [203, 50, (100, 3, 100)]


@pytest.fixture
def X():
    return np.random.default_rng(3).normal(size=(203, 5))


def test_tile_rows_respects_memory():
    for itemsize in (4, 8):
        for budget in (2**20, 128 * 2**20):
            t = tile_rows(itemsize, budget)
            assert t * t * itemsize <= budget < (t + 1) ** 2 * itemsize


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("chunks", CHUNKS)
def test_lazy_kernel_matrix(kernel, chunks, X):
    Xd = da.from_array(X, chunks=(chunks, -1))
    K = kernel_matrix(kernel, Xd, block_bytes=64 * 64 * 8)
    assert_eq(K, kernel.pairwise(X))
    Y = X[:17] + 1
    assert_eq(kernel_matrix(kernel, Xd, da.from_array(Y, chunks=5)), kernel.pairwise(X, Y))


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("block_bytes", BLOCK_BYTES)
def test_gather_kernel(kernel, block_bytes, X):
    K, row_sums = gather_kernel(kernel, da.from_array(X, chunks=(37, -1)), block_bytes=block_bytes)
    dense = kernel.pairwise(X)
    np.testing.assert_allclose(np.triu(K), np.triu(dense), atol=1e-12)
    np.testing.assert_allclose(row_sums, dense.sum(axis=1), atol=1e-10)


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("block_bytes", BLOCK_BYTES)
def test_blocked_centered_kernel_equals_kernel_centerer(kernel, block_bytes, X):
    expected = KernelCenterer().fit_transform(kernel.pairwise(X))
    K, row_sums = gather_kernel(kernel, da.from_array(X, chunks=(60, -1)), block_bytes=block_bytes)
    row_means = row_sums / len(X)
    center_kernel_inplace(K, row_means, row_means.mean())
    np.testing.assert_allclose(np.triu(K), np.triu(expected), atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("chunks", CHUNKS)
def test_lazy_kernel_product(kernel, chunks, X):
    Y = np.random.default_rng(1).normal(size=(150, 5))
    V = np.random.default_rng(2).normal(size=(150, 3))
    Xd = da.from_array(X, chunks=(chunks, -1))
    result = kernel_product(kernel, Xd, Y, V, block_bytes=40 * 40 * 8)
    assert result.chunks == (Xd.chunks[0], (3,))
    assert_eq(result, kernel.pairwise(X, Y) @ V)


def test_kernel_product_strips_large_row_chunks():
    # One 600-row chunk against a 16 KiB budget: the kernel is evaluated in strips.
    X = np.random.default_rng(4).normal(size=(600, 3))
    V = np.ones((600, 1))
    result = kernel_product(RBF(gamma=1.0), da.from_array(X), X, V, block_bytes=2**14)
    np.testing.assert_allclose(result.compute(), RBF(gamma=1.0).pairwise(X) @ V, atol=1e-10)


def test_lazy_kernel_product_pickles(X):
    # Fitted models keep such a product lazily: its task function must be importable.
    import pickle

    V = np.random.default_rng(2).normal(size=(len(X), 2))
    result = kernel_product(RBF(gamma=0.5), da.from_array(X, chunks=(50, -1)), X, V)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(result)).compute(), result.compute(),
                               rtol=1e-12)


def test_kernel_diagonal(X):
    d = kernel_diagonal(Polynomial(2, 0.3, 1.0), da.from_array(X, chunks=50))
    assert_eq(d, np.diag(Polynomial(2, 0.3, 1.0).pairwise(X)))


def test_tree_sum_many_parts():
    parts = [dask.delayed(np.full)(3, float(i)) for i in range(50)]
    np.testing.assert_array_equal(tree_sum(parts, split_every=3).compute(), np.full(3, 1225.0))
