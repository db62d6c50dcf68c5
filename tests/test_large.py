"""Large cases, run by `make test-all` (marked slow)."""

import warnings

import dask.array as da
import numpy as np
import pytest

from dkpca import KernelPCA
from dkpca.blocked import center_columns
from dkpca.options import Randomized
from dkpca.tiles import symmetric_kernel_product

pytestmark = pytest.mark.slow


def test_large_kernel_does_not_crash_blas_and_is_consistent():
    # n = 20,000, d = 784 is where `X @ X.T` on one buffer crashes OpenBLAS's syrk with two
    # threads (API notes); the kernel tiles multiply distinct buffers.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 784)) @ np.diag(np.linspace(2.0, 0.1, 784))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a flat spectrum: may stop at max_iter
        kp = KernelPCA(5, solver=Randomized(cache_dtype="float64"), random_state=0).fit(X)
    U, values = kp.eigenvectors_, kp.eigenvalues_
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e-8)
    # For a training row, transform(x) - u sqrt(λ) is exactly (K_c u - λ u) / sqrt(λ) there:
    # check that identity with the residual from one streaming pass, and that it is small.
    W = symmetric_kernel_product(kp.kernel_, da.from_array(X, chunks=(4096, -1)), U - U.mean(0),
                                 block_bytes=2**27)
    center_columns(W)
    residual = W - U * values
    assert np.linalg.norm(residual, axis=0).max() < 1e-3 * values[0]
    rows = slice(0, 500)
    difference = kp.transform(X[rows]) - U[rows] * np.sqrt(values)
    np.testing.assert_allclose(
        difference, residual[rows] / np.sqrt(values), atol=1e-9 * np.sqrt(values[0])
    )


def test_streaming_randomized_matches_cached_at_scale():
    X = np.random.default_rng(1).normal(size=(6000, 32))
    kwargs = {"solver": Randomized(cache_dtype="float64"), "random_state": 0}
    cached = KernelPCA(5, **kwargs).fit(X)
    streamed = KernelPCA(5, max_memory="64MiB", block_size="8MiB", **kwargs)
    streamed.fit(da.from_array(X, chunks=(1000, -1)))
    np.testing.assert_allclose(streamed.eigenvalues_, cached.eigenvalues_, rtol=1e-9)


def test_crossproduct_of_a_large_block_on_one_blas_thread():
    # Kernel moments go through syrk when BLAS is single-threaded (as inside dkpca's tasks);
    # the crash of API notes §9.5 needs several BLAS threads. A large case, as those notes ask.
    from threadpoolctl import threadpool_limits

    from dkpca.linalg import crossproduct

    A = np.random.default_rng(1).standard_normal((20_000, 2_000))
    with threadpool_limits(limits=1, user_api="blas"):
        G = crossproduct(A)
    expected = sum(B.T @ B.copy() for B in np.array_split(A, 4))
    np.testing.assert_allclose(G, expected, rtol=1e-10, atol=1e-10 * np.abs(expected).max())
