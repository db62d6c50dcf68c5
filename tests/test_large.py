"""Large cases, run by `make test-all` (marked slow)."""

import dask.array as da
import numpy as np
import pytest

from dkpca import KernelPCA

pytestmark = pytest.mark.slow


def test_large_kernel_does_not_crash_blas_and_is_consistent():
    # n = 20,000, d = 784 is where `X @ X.T` on one buffer crashes OpenBLAS's syrk with two
    # threads (API notes); the kernel tiles multiply distinct buffers.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 784)) @ np.diag(np.linspace(2.0, 0.1, 784))
    kp = KernelPCA(5, solver="randomized", random_state=0).fit(X)
    np.testing.assert_allclose(kp.eigenvectors_.T @ kp.eigenvectors_, np.eye(5), atol=1e-8)
    # Projecting training rows again equals the training scores from the eigenvectors.
    rows = slice(0, 500)
    expected = kp.eigenvectors_[rows] * np.sqrt(kp.eigenvalues_)
    got = kp.transform(X[rows])
    np.testing.assert_allclose(got, expected, atol=1e-6 * np.abs(expected).max())


def test_streaming_randomized_matches_cached_at_scale():
    X = np.random.default_rng(1).normal(size=(6000, 32))
    kwargs = {"solver": "randomized", "random_state": 0}
    cached = KernelPCA(5, **kwargs).fit(X)
    streamed = KernelPCA(5, max_memory="64MiB", block_size="8MiB", **kwargs)
    streamed.fit(da.from_array(X, chunks=(1000, -1)))
    np.testing.assert_allclose(streamed.eigenvalues_, cached.eigenvalues_, rtol=1e-9)
