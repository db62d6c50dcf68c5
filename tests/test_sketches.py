"""Dot-product preserving sketches (tutorial §4.3): unbiased, sharper as q grows, chunk-proof."""

import dask.array as da
import numpy as np
import pytest

from dkpca.solvers._sketches import BLOCK_ROWS, Sketch

KINDS = [("gaussian", 1), ("hashing", 1), ("hashing", 4)]


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(5, 300))


@pytest.mark.parametrize(("kind", "n_hashes"), KINDS)
def test_dot_products_are_preserved_in_expectation(kind, n_hashes, vectors):
    gram = vectors @ vectors.T
    sketched = [vectors @ Sketch(kind, 20, np.random.SeedSequence(s), n_hashes).matrix(300)
                for s in range(400)]
    draws = np.stack([F @ F.T for F in sketched])
    standard_error = draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - gram) < 5 * standard_error)
    assert draws.std(axis=0).min() > 0  # a real sketch: single draws do differ


@pytest.mark.parametrize(("kind", "n_hashes"), KINDS)
def test_error_falls_as_the_sketch_grows(kind, n_hashes, vectors):
    gram = vectors @ vectors.T

    def mean_error(q):
        errors = []
        for s in range(10):
            F = vectors @ Sketch(kind, q, np.random.SeedSequence(s), n_hashes).matrix(300)
            errors.append(np.abs(F @ F.T - gram).mean() / np.abs(gram).mean())
        return np.mean(errors)

    errors = [mean_error(q) for q in (20, 80, 320)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < errors[0] / 2.5  # about 1/sqrt(q): a factor 4 from q=20 to 320


@pytest.mark.parametrize(("kind", "n_hashes"), KINDS)
def test_same_sketch_whatever_the_chunking(kind, n_hashes):
    X = np.random.default_rng(1).normal(size=(60, 9000))
    sketch = Sketch(kind, 8, np.random.SeedSequence(3), n_hashes)
    a = sketch.apply(da.from_array(X, chunks=(7, 1000))).compute()
    b = sketch.apply(da.from_array(X, chunks=(60, -1))).compute()
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-12)  # same W; BLAS order may differ
    np.testing.assert_allclose(a, X @ sketch.matrix(9000), rtol=1e-10, atol=1e-9)
    tall = sketch.matrix(2 * BLOCK_ROWS + 5)
    np.testing.assert_array_equal(sketch.matrix(10, start=BLOCK_ROWS - 3),
                                  tall[BLOCK_ROWS - 3 : BLOCK_ROWS + 7])
    other = Sketch(kind, 8, np.random.SeedSequence(4), n_hashes)
    assert not np.array_equal(other.matrix(100), sketch.matrix(100))


def test_hashing_structure():
    W = Sketch("hashing", 12, np.random.SeedSequence(0), n_hashes=3).matrix(500)
    for h in range(3):
        block = W[:, 4 * h : 4 * (h + 1)]
        assert np.all((block != 0).sum(axis=1) == 1)  # each hash sends a row to one bucket
    np.testing.assert_allclose(np.abs(W[W != 0]), 1 / np.sqrt(3))
    signs = np.sign(W[W != 0])
    assert 0.4 < (signs > 0).mean() < 0.6


def test_float32_stays_float32():
    X = da.ones((4, 3), dtype=np.float32, chunks=2)
    assert Sketch("gaussian", 2, np.random.SeedSequence(0)).apply(X).dtype == np.float32


def test_bad_settings():
    with pytest.raises(ValueError, match="one of"):
        Sketch("fourier", 4, np.random.SeedSequence(0))
    with pytest.raises(ValueError, match="multiple of n_hashes=3"):
        Sketch("hashing", 10, np.random.SeedSequence(0), n_hashes=3)
    with pytest.raises(ValueError, match="positive integer"):
        Sketch("gaussian", 0, np.random.SeedSequence(0))
