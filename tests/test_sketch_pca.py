"""Approximate linear PCA (PCA(solver="sketch"), tutorial Alg. 4) against exact PCA."""

import dask.array as da
import numpy as np
import pytest

from dkpca import PCA


@pytest.fixture(scope="module")
def low_rank() -> np.ndarray:
    """Five strong directions in 600 dimensions, plus isotropic noise (2000 samples)."""
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(600, 5)))[0]
    signal = (rng.normal(size=(2000, 5)) * [10, 8, 6, 4, 3]) @ basis.T
    return signal + 0.3 * rng.normal(size=(2000, 600)) + 5.0


@pytest.fixture(scope="module")
def exact(low_rank):
    return PCA(5).fit(low_rank)


def _similarity(a, b):
    return np.abs(np.sum(a.components_ * b.components_, axis=1))


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
def test_error_falls_as_q_grows(sketch, low_rank, exact):
    def error(q):
        return np.mean([
            np.abs(PCA(5, solver="sketch", sketch=sketch, sketch_dim=q, random_state=s)
                   .fit(low_rank).explained_variance_ / exact.explained_variance_ - 1).mean()
            for s in range(8)
        ])

    assert error(25) > 2 * error(400)  # the error goes as 1/sqrt(q): 4x
    approx = PCA(5, solver="sketch", sketch=sketch, sketch_dim=400, random_state=0).fit(low_rank)
    assert np.all(_similarity(approx, exact) > 0.95)
    np.testing.assert_allclose(approx.mean_, exact.mean_, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(approx.components_, axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("sketch", ["gaussian", "hashing"])
def test_refinement_is_exact_on_the_found_subspace(sketch, low_rank, exact):
    refined = PCA(5, solver="sketch", sketch=sketch, sketch_dim=100, refine=True,
                  random_state=0).fit(low_rank)
    assert np.all(_similarity(refined, exact) > 0.999)
    np.testing.assert_allclose(refined.explained_variance_, exact.explained_variance_,
                               rtol=2e-3)
    assert np.all(refined.explained_variance_ <= exact.explained_variance_ * (1 + 1e-10))
    np.testing.assert_allclose(refined.components_ @ refined.components_.T, np.eye(5),
                               atol=1e-10)
    np.testing.assert_allclose(refined.explained_variance_ratio_.sum(),
                               exact.explained_variance_ratio_.sum(), rtol=2e-3)


def test_same_result_whatever_the_chunking(low_rank):
    a = PCA(3, solver="sketch", sketch_dim=50, random_state=4).fit(low_rank)
    b = PCA(3, solver="sketch", sketch_dim=50, random_state=4).fit(
        da.from_array(low_rank, chunks=(300, -1))
    )
    np.testing.assert_allclose(b.explained_variance_, a.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(b.components_, a.components_, atol=1e-10)
    assert isinstance(b.transform(da.from_array(low_rank[:10])), da.Array)


def test_bad_settings(low_rank):
    with pytest.raises(ValueError, match="n_components=30 exceeds sketch_dim=20"):
        PCA(30, solver="sketch", sketch_dim=20).fit(low_rank)
    with pytest.raises(ValueError, match="NaN or infinity"):
        bad = low_rank.copy()
        bad[3, 3] = np.nan
        PCA(3, solver="sketch", sketch_dim=20).fit(da.from_array(bad, chunks=500))
