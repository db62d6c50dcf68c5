"""Float32 data far from the origin: the RBF kernel keeps float32 rounding, not the offset's.

The float32 expansion ``||x||² - 2<x, y> + ||y||²`` about the origin loses the digits of
``||x - y||²`` to the norms (``280 ± 10`` per feature: ~1e-4 of the kernel), so
:class:`~dkpca.kernels.RBF` moves float32 blocks by a common point first. The references are
float64: scikit-learn's kernel and kernel PCA, or (for the approximate ICF solver) the same
solver on float64 data.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.decomposition import KernelPCA as SKKernelPCA
from sklearn.metrics.pairwise import rbf_kernel

from dkpca import KernelPCA
from dkpca.kernels import RBF

#: Float32 rounding of a kernel value or a score, with room for n = 200 terms summed.
_TOL = 1e-5


def _far(n: int, d: int, offset: float, spread: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (offset + spread * rng.normal(size=(n, d))).astype(np.float32)


def _relative_error(Z: np.ndarray, R: np.ndarray) -> float:
    """Max error of ``Z`` against ``R``, modulo column signs, relative to ``R``'s largest."""
    Z = np.asarray(Z, dtype=np.float64)
    signs = np.sign((Z * R).sum(axis=0))
    return float(np.abs(Z * signs - R).max() / np.abs(R).max())


@pytest.mark.parametrize(("offset", "spread", "gamma"), [(280.0, 10.0, 0.01), (100.0, 0.1, 5.0)])
def test_rbf_blocks_far_from_the_origin_keep_float32_accuracy(offset, spread, gamma):
    X, Y = _far(60, 4, offset, spread), _far(50, 4, offset, spread, seed=1)
    kernel = RBF(gamma=gamma)
    want = rbf_kernel(X.astype(np.float64), Y.astype(np.float64), gamma=gamma)
    got = kernel.pairwise(X, Y)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=_TOL)
    np.testing.assert_allclose(kernel.pairwise(Y, X), want.T, rtol=0, atol=_TOL)
    same = kernel.pairwise(X)
    np.testing.assert_allclose(same, rbf_kernel(X.astype(np.float64), gamma=gamma),
                               rtol=0, atol=_TOL)
    np.testing.assert_allclose(np.diag(same), 1.0, rtol=0, atol=_TOL)
    # Each block is moved by its own point: blocks assembled equal the whole to rounding.
    parts = np.block([[kernel.pairwise(X[a:b], Y[c:e]) for c, e in ((0, 7), (7, 50))]
                      for a, b in ((0, 25), (25, 60))])
    np.testing.assert_allclose(parts, got, rtol=0, atol=_TOL)


def test_non_finite_rows_spoil_only_their_own_entries():
    # A feature whose mean is NaN is not moved: the other rows' entries stay finite.
    X = _far(10, 3, 280.0, 10.0)
    X[2, 1] = np.nan
    K = RBF(gamma=0.01).pairwise(X)
    assert np.isnan(K[2]).all() and np.isnan(K[:, 2]).all()
    assert np.isfinite(np.delete(np.delete(K, 2, axis=0), 2, axis=1)).all()


def test_rbf_far_from_the_origin_on_the_device(cupy):
    # The move runs on the blocks' own device, with no host array in it.
    X, Y = _far(40, 4, 280.0, 10.0), _far(30, 4, 280.0, 10.0, seed=1)
    got = RBF(gamma=0.01).pairwise(cupy.asarray(X), cupy.asarray(Y))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.get(), rbf_kernel(X.astype(float), Y.astype(float),
                                                     gamma=0.01), rtol=0, atol=_TOL)


def test_rbf_far_from_the_origin_on_the_array_api_standard():
    xps = pytest.importorskip("array_api_strict")
    X, Y = _far(40, 4, 280.0, 10.0), _far(30, 4, 280.0, 10.0, seed=1)
    got = RBF(gamma=0.01).pairwise(xps.asarray(X), xps.asarray(Y))
    assert got.dtype == xps.float32
    np.testing.assert_allclose(np.asarray(got), rbf_kernel(X.astype(float), Y.astype(float),
                                                           gamma=0.01), rtol=0, atol=_TOL)


@pytest.fixture(scope="module", params=[(280.0, 10.0, 0.01), (100.0, 0.1, 5.0)],
                ids=["kelvin", "narrow"])
def far(request):
    """Float32 data far from the origin, and scikit-learn's float64 fit of it."""
    offset, spread, gamma = request.param
    X = _far(200, 4, offset, spread)
    reference = SKKernelPCA(3, kernel="rbf", gamma=gamma).fit(X.astype(np.float64))
    return X, gamma, reference


@pytest.mark.parametrize("solver", ["exact", "randomized", "nystrom"])
def test_kernel_pca_of_float32_far_from_the_origin_equals_sklearn(far, solver):
    X, gamma, reference = far
    model = KernelPCA(3, gamma=gamma, solver=solver, random_state=0).fit(X)
    want = reference.transform(X[:20].astype(np.float64))
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=_TOL)
    assert _relative_error(model.transform(X[:20]), want) < _TOL
    assert _relative_error(np.asarray(model.fit_transform(X))[:20], want) < _TOL


def test_icf_of_float32_far_from_the_origin_equals_its_float64_fit(far):
    # ICF approximates the kernel: its own float64 fit is the reference (a float32 kernel
    # expanded about the origin made the narrow case fail as "not positive semi-definite").
    X, gamma, _ = far
    want = KernelPCA(3, gamma=gamma, solver="icf", random_state=0).fit(X.astype(np.float64))
    got = KernelPCA(3, gamma=gamma, solver="icf", random_state=0).fit(X)
    np.testing.assert_allclose(got.eigenvalues_, want.eigenvalues_, rtol=_TOL)
    assert _relative_error(got.transform(X[:20]),
                           want.transform(X[:20].astype(np.float64))) < _TOL


def test_float32_fits_far_from_the_origin_do_not_depend_on_the_chunks(far):
    X, gamma, _ = far
    with dask.config.set(scheduler="sync"):
        fits = [KernelPCA(3, gamma=gamma, solver="exact").fit(da.from_array(X, chunks=c))
                for c in ((200, 4), (64, 4), (50, 2))]
        scores = [np.asarray(f.transform(X[:20])) for f in fits]
    for fit, Z in zip(fits[1:], scores[1:], strict=True):
        np.testing.assert_allclose(fit.eigenvalues_, fits[0].eigenvalues_, rtol=_TOL)
        assert _relative_error(Z, scores[0]) < _TOL
