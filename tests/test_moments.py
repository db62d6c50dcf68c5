"""The one-pass statistics of linear PCA: both paths (raw and shifted), threads, no copies."""

import tracemalloc

import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import match_signs
from sklearn.decomposition import PCA as SkPCA

from dkpca import PCA
from dkpca import moments as moments_module
from dkpca.moments import centred_statistics


def _reference(X):
    """Count, mean and centred scatter in extended precision."""
    Xl = X.astype(np.longdouble)
    Y = Xl - Xl.mean(axis=0)
    return len(X), Xl.mean(axis=0).astype(np.float64), (Y.T @ Y).astype(np.float64)


def _assert_statistics(statistics, X, rtol):
    count, mean, scatter = _reference(X)
    assert statistics.count == count
    np.testing.assert_allclose(statistics.mean, mean, rtol=1e-14,
                               atol=1e-14 * np.abs(mean).max())
    np.testing.assert_allclose(statistics.scatter, scatter, rtol=rtol,
                               atol=rtol * np.abs(scatter).max())


@pytest.mark.parametrize(
    ("offset", "dtype", "raw"),
    [(0.0, np.float64, True), (1e4, np.float64, False), (0.0, np.float32, False)],
)
def test_statistics_match_extended_precision_on_both_paths(offset, dtype, raw, monkeypatch):
    """Float64 rows near the origin are multiplied in place (raw), the others shifted."""
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(3000, 7)) * np.arange(1, 8) + offset).astype(dtype)
    calls = []
    near_origin = moments_module._near_origin
    monkeypatch.setattr(moments_module, "_near_origin",
                        lambda rows: calls.append(near_origin(rows)) or calls[-1])
    statistics = centred_statistics(X, threads=1)
    assert calls == ([raw] if dtype == np.float64 else [])
    _assert_statistics(statistics, X.astype(np.float64), 1e-12)


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
    single = centred_statistics(X, threads=1)
    statistics = centred_statistics(X, threads=threads)
    assert statistics.count == single.count
    np.testing.assert_allclose(statistics.mean, single.mean, rtol=1e-14)
    np.testing.assert_allclose(statistics.scatter, single.scatter, rtol=1e-12,
                               atol=1e-12 * np.abs(single.scatter).max())


def test_strips_cover_every_row(monkeypatch):
    monkeypatch.setattr(moments_module, "RAW_STRIP_ROWS", 7)
    monkeypatch.setattr(moments_module, "MIN_STRIP_ROWS", 5)
    monkeypatch.setattr(moments_module, "STRIP_BYTES", 1)
    monkeypatch.setattr(moments_module, "PENDING_TERMS", 3)
    rng = np.random.default_rng(3)
    for X in (rng.normal(size=(101, 4)), rng.normal(size=(101, 4)) + 1e6):
        for threads in (1, 2):
            _assert_statistics(centred_statistics(X, threads=threads), X, 1e-10)


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


def _outlier_first():
    """Spreads from 1 down to 0.01, and one row 1e5 away from the rest, first."""
    X = np.random.default_rng(0).normal(size=(10_000, 5)) * [1, 0.3, 0.1, 0.03, 0.01]
    X[0] += 1e5
    return X


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_centred_statistics_match_extended_precision_whatever_the_row_order(threads):
    X = _outlier_first()
    X[:, 2] = 7.25  # a constant column stays exactly zero
    Xl = X.astype(np.longdouble)
    Y = Xl - Xl.mean(axis=0)
    expected = (Y.T @ Y).astype(np.float64)
    # the scatter's rounding is eps · Σ x xᵀ around the strips' means: the outlier's 1e10
    atol = 64 * np.finfo(float).eps * 1e10
    for rows in (X, np.roll(X, -1, axis=0), np.roll(X, 5000, axis=0)):
        statistics = centred_statistics(rows, threads=threads)
        assert statistics.count == len(X)
        np.testing.assert_allclose(statistics.mean, Xl.mean(axis=0).astype(np.float64),
                                   rtol=1e-15, atol=1e-12)
        np.testing.assert_allclose(statistics.scatter, expected, rtol=1e-12, atol=atol)
        assert not statistics.scatter[2].any() and not statistics.scatter[:, 2].any()


def test_covariance_accuracy_does_not_depend_on_row_order():
    """Moments around X[0] lost 3e-4 (numpy) and 4e-3 (dask) of the smallest variance when
    X[0] was an outlier, 4e-7 when it was last. The covariance solver's own bound is
    eps · λ₁ / λ_d relative (λ₁ ≈ 1e6 from the outlier, λ_d ≈ 1e-4): about 2e-6."""
    X = _outlier_first()
    ref = SkPCA(5, svd_solver="full").fit(X).explained_variance_
    rtol = 10 * np.finfo(float).eps * ref[0] / ref[-1]
    for data in (X, da.from_array(X, chunks=(1000, 5)), np.roll(X, -1, axis=0),
                 da.from_array(np.roll(X, -1, axis=0), chunks=(1000, 5))):
        pca = PCA(5, solver="covariance").fit(data)
        np.testing.assert_allclose(pca.explained_variance_, ref, rtol=rtol)

