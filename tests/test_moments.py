"""The one-pass moments of linear PCA: both paths (raw and shifted), threads, no copies."""

import tracemalloc

import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import match_signs
from sklearn.decomposition import PCA as SkPCA

from dkpca import PCA
from dkpca import moments as moments_module
from dkpca.moments import moments_in_memory, shifted_moments


def _reference(X, shift):
    Y = X.astype(np.longdouble) - shift
    return np.vstack([Y.sum(axis=0), Y.T @ Y]).astype(np.float64)


@pytest.mark.parametrize(
    ("offset", "dtype", "raw"),
    [(0.0, np.float64, True), (1e4, np.float64, False), (0.0, np.float32, False)],
)
def test_shifted_moments_match_extended_precision(offset, dtype, raw, monkeypatch):
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(3000, 7)) * np.arange(1, 8) + offset).astype(dtype)
    shift = X[0].astype(np.float64)
    calls = []
    near_origin = moments_module._near_origin
    monkeypatch.setattr(moments_module, "_near_origin",
                        lambda rows: calls.append(near_origin(rows)) or calls[-1])
    got = shifted_moments(X, shift)
    assert calls == ([raw] if dtype == np.float64 else [])
    expected = _reference(X, shift)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


def test_far_from_origin_keeps_the_spectrum():
    # mean² / variance = 1e16: the raw products would lose every digit of the variance.
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4000, 5)) * np.array([5.0, 4.0, 3.0, 2.0, 1.0]) + 1e8
    pca = PCA(5).fit(X)
    Xc = X - X.mean(axis=0)
    expected = np.linalg.eigvalsh(Xc.T @ Xc / (len(X) - 1))[::-1]
    np.testing.assert_allclose(pca.explained_variance_, expected, rtol=1e-7)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_threads_agree(threads):
    X = np.random.default_rng(2).normal(size=(10_001, 9)) + 3.0
    single = shifted_moments(X, X[0])
    np.testing.assert_allclose(moments_in_memory(X, X[0], threads=threads), single,
                               rtol=1e-12, atol=1e-12 * np.abs(single).max())


def test_strips_cover_every_row(monkeypatch):
    monkeypatch.setattr(moments_module, "RAW_STRIP_ROWS", 7)
    monkeypatch.setattr(moments_module, "MIN_STRIP_ROWS", 5)
    monkeypatch.setattr(moments_module, "STRIP_BYTES", 1)
    rng = np.random.default_rng(3)
    for X in (rng.normal(size=(101, 4)), rng.normal(size=(101, 4)) + 1e6):
        shift = X[1]
        expected = _reference(X, shift)
        np.testing.assert_allclose(shifted_moments(X, shift), expected, rtol=1e-10,
                                   atol=1e-10 * np.abs(expected).max())


def test_numpy_zarr_and_sklearn_agree(tmp_path):
    X = np.random.default_rng(4).normal(size=(20_000, 24)) @ np.diag(np.linspace(3, 0.2, 24))
    store = zarr.create_array(tmp_path / "x.zarr", shape=X.shape, dtype="float64",
                              chunks=(3000, 24))
    store[:] = X
    ref = SkPCA(6, svd_solver="covariance_eigh").fit(X)
    in_memory = PCA(6).fit(X)
    lazy = PCA(6).fit(da.from_zarr(str(tmp_path / "x.zarr")))
    for pca in (in_memory, lazy):
        np.testing.assert_allclose(pca.explained_variance_, ref.explained_variance_, rtol=1e-10)
        np.testing.assert_allclose(match_signs(pca.components_.T, ref.components_.T),
                                   ref.components_.T, atol=1e-9)
    np.testing.assert_allclose(lazy.explained_variance_, in_memory.explained_variance_,
                               rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fit_does_not_copy_the_input(dtype):
    X = np.random.default_rng(5).normal(size=(200_000, 16)).astype(dtype)
    PCA(3).fit(X[:5000])  # lazy imports and caches out of the measurement
    tracemalloc.start()
    try:
        PCA(3).fit(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Strips and d × d products only: a copy of the input (12.8 or 25.6 MB) would show.
    assert peak < 2**21, f"fit allocated {peak} bytes for {X.nbytes} of input"


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_in_memory_input_is_refused(bad):
    X = np.random.default_rng(6).normal(size=(3000, 4))
    X[1234, 2] = bad
    with pytest.raises(ValueError, match="NaN or infinity"):
        PCA(2).fit(X)
