"""The code written against the array API standard, run on ``array_api_strict``.

``array_api_strict`` implements the standard and nothing more: a numpy-only call (a boolean
mask beside a slice, ``order="F"``, ``np.linalg.norm``, a method the standard lacks) raises
there. Each test runs a generic routine on strict arrays and on numpy arrays and checks that
the two agree, so the same code is proven on both (CuPy runs it on a GPU).
"""

import numpy as np
import pytest

from dkpca._device import array_module
from dkpca.linalg import block_krylov_eigh, flip_signs

xps = pytest.importorskip("array_api_strict")


def _operator(n: int, rank: int | None = None, seed: int = 0) -> np.ndarray:
    """A symmetric matrix with eigenvalues decaying as ``i^-1.5`` (the first ``rank`` only)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    values = 1.0 / np.arange(1, n + 1) ** 1.5
    if rank is not None:
        values[rank:] = 0.0
    return (Q * values) @ Q.T


def test_strict_arrays_bring_their_own_namespace():
    assert array_module(xps.ones(3)) is xps
    assert array_module(np.ones(3), 2.0) is np


@pytest.mark.parametrize("max_basis", [None, 36], ids=["whole basis", "thick restarts"])
def test_block_krylov_runs_on_the_standard_alone(max_basis):
    # The solver's every step (orthogonalisation, Rayleigh-Ritz, restarts, signs) on strict
    # arrays gives numpy's result to rounding, and the eigenpairs of the dense solve.
    A = _operator(300)
    start = np.random.default_rng(1).normal(size=(300, 12))
    A_strict = xps.asarray(A)
    strict = block_krylov_eigh(lambda V: A_strict @ V, xps.asarray(start), 5, tol=1e-10,
                               max_iter=40, max_basis=max_basis)
    numpy = block_krylov_eigh(lambda V: A @ V, start, 5, tol=1e-10, max_iter=40,
                              max_basis=max_basis)
    assert array_module(strict.eigenvalues) is xps and array_module(strict.eigenvectors) is xps
    assert strict.converged and strict.n_passes == numpy.n_passes
    np.testing.assert_allclose(np.asarray(strict.eigenvalues), numpy.eigenvalues, rtol=0,
                               atol=1e-14)
    np.testing.assert_allclose(np.asarray(strict.eigenvectors), numpy.eigenvectors, rtol=0,
                               atol=1e-10)
    w, V = np.linalg.eigh(A)
    np.testing.assert_allclose(numpy.eigenvalues, w[::-1][:5], rtol=1e-9)
    reference = V[:, ::-1][:, :5]
    assert np.allclose(np.abs(np.sum(reference * numpy.eigenvectors, axis=0)), 1.0, atol=1e-8)


def test_block_krylov_stops_on_an_invariant_subspace_of_strict_arrays():
    # A rank-6 operator: the second block is dependent, its columns are dropped (the masked
    # selection the standard allows only through take/nonzero), and the fit ends exact.
    A = xps.asarray(_operator(80, rank=6))
    result = block_krylov_eigh(lambda V: A @ V, xps.asarray(
        np.random.default_rng(2).normal(size=(80, 8))), 3, tol=1e-12, max_iter=10)
    assert result.converged and result.n_passes <= 2
    expected = 1.0 / np.arange(1, 4) ** 1.5
    np.testing.assert_allclose(np.asarray(result.eigenvalues), expected, rtol=1e-12)


def test_flip_signs_on_strict_arrays_equals_numpy():
    vectors = np.random.default_rng(3).normal(size=(20, 6))
    vectors[:, 2] = 0.0  # no largest entry: the column is left as it is
    flipped = flip_signs(xps.asarray(vectors.copy()))
    np.testing.assert_array_equal(np.asarray(flipped), flip_signs(vectors.copy()))


def _gpu_kernels():
    from dkpca.kernels import RBF, Linear, Polynomial, Sigmoid

    return [RBF(gamma=0.3), RBF(gamma=1e-6), Linear(), Polynomial(3, 0.2, 1.0),
            Sigmoid(0.1, 0.5), RBF(0.5) + Polynomial(2, 0.1, 1.0)]


def test_every_kernel_that_runs_on_a_gpu_is_checked_on_the_standard():
    from dkpca.kernels._base import _REGISTRY

    on_gpu = {cls for cls in _REGISTRY.values()
              if isinstance(cls.runs_on_gpu, bool) and cls.runs_on_gpu}
    assert on_gpu == {type(k) for k in _gpu_kernels() if type(k).__name__ != "SumKernel"}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kernel", _gpu_kernels(), ids=repr)
def test_gpu_kernels_evaluate_on_the_standard_alone(kernel, dtype):
    # The kernels a GPU evaluates (one GEMM, then an elementwise function) on strict arrays:
    # strict results in the input's dtype, equal to numpy's to a few units of rounding (the
    # row norms are summed in another order), the offset form included.
    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(50, 4)).astype(dtype), rng.normal(size=(30, 4)).astype(dtype)
    X_strict, Y_strict = xps.asarray(X), xps.asarray(Y)
    atol = 1e-13 if dtype == np.float64 else 2e-6
    K = kernel.pairwise(X_strict, Y_strict)
    assert array_module(K) is xps and K.dtype == xps.asarray(X).dtype
    np.testing.assert_allclose(np.asarray(K), kernel.pairwise(X, Y), rtol=0, atol=atol)
    shifted, offset = kernel.pairwise_offset(X_strict, Y_strict)
    shifted_numpy, offset_numpy = kernel.pairwise_offset(X, Y)
    assert offset == offset_numpy
    np.testing.assert_allclose(np.asarray(shifted), shifted_numpy, rtol=0, atol=atol)
    diagonal = kernel.diag(X_strict)
    assert array_module(diagonal) is xps
    np.testing.assert_allclose(np.asarray(diagonal), kernel.diag(X), rtol=1e-6, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("diagonal", [True, False], ids=["diagonal", "off the diagonal"])
@pytest.mark.parametrize("statistics", [True, False], ids=["cached", "streamed"])
@pytest.mark.parametrize("kernel", _gpu_kernels(), ids=repr)
def test_a_stored_tile_and_its_products_on_the_standard_alone(kernel, dtype, diagonal,
                                                              statistics):
    # A tile as the tile engine stores it (its values less their shift, moved blocks for
    # translation-invariant kernels in float32, the exact diagonal, the row and column sums
    # and trace when cached; the form of exp and a subsampled shift when streamed) and both of
    # its products, on strict arrays: numpy's result to a few units of rounding (the kernels
    # sum their row norms in another order). The data sit far from the origin, so that the
    # float32 tiles need the moved blocks.
    from dkpca._tile_values import StoredTile

    rng = np.random.default_rng(5)
    X = rng.normal(size=(110, 4)) + 30.0
    Xi, Xj = X[:60], X[:60] if diagonal else X[60:]
    Vi, Vj = rng.normal(size=(60, 3)), rng.normal(size=(len(Xj), 3))
    tile_dtype = np.dtype(dtype)
    want = StoredTile.evaluate(kernel, Xi, Xj, tile_dtype, diagonal, statistics=statistics)
    got = StoredTile.evaluate(kernel, xps.asarray(Xi), xps.asarray(Xj), tile_dtype, diagonal,
                              statistics=statistics)
    assert array_module(got.values) is xps
    assert got.values.dtype == xps.asarray(want.values).dtype
    scale = float(np.abs(want.values).max()) + abs(float(want.shift))
    atol = (1e-12 if dtype == np.float64 else 4e-6) * scale
    np.testing.assert_allclose(np.asarray(got.values), want.values, rtol=0, atol=atol)
    assert float(got.shift) == pytest.approx(float(want.shift), rel=0, abs=atol)
    assert (got.near_one is None) == (want.near_one is None)
    if want.near_one is not None:
        assert bool(got.near_one) == bool(want.near_one)
    if statistics:
        for sums, expected in ((got.row_sums, want.row_sums), (got.col_sums, want.col_sums)):
            np.testing.assert_allclose(np.asarray(sums), expected, rtol=0, atol=atol * 60)
        assert got.trace == pytest.approx(want.trace, rel=0, abs=atol * 60)
    products = got.products(xps.asarray(Vi), None if diagonal else xps.asarray(Vj))
    expected = want.products(Vi, None if diagonal else Vj)
    assert len(products) == len(expected) == (1 if diagonal else 2)
    for product, reference in zip(products, expected, strict=True):
        assert array_module(product) is xps and product.dtype == xps.float64
        np.testing.assert_allclose(np.asarray(product), reference, rtol=0,
                                   atol=atol * 60 * np.abs(Vi).max())


def test_double_double_sums_on_the_standard_alone_equal_numpy_bit_for_bit():
    # The holders' sums of partial products (Knuth's TwoSum into a high and a low part).
    from dkpca._tile_holders import two_sum_into

    rng = np.random.default_rng(6)
    terms = [rng.normal(size=(7, 3)) * 10.0 ** rng.integers(-12, 12) for _ in range(6)]
    high, low = np.zeros((9, 3)), np.zeros((9, 3))
    high_strict, low_strict = xps.zeros((9, 3)), xps.zeros((9, 3))
    for term in terms:
        two_sum_into(high[:7], low[:7], term)
        two_sum_into(high_strict[:7, ...], low_strict[:7, ...], xps.asarray(term))
    np.testing.assert_array_equal(np.asarray(high_strict), high)
    np.testing.assert_array_equal(np.asarray(low_strict), low)
    assert np.abs(low).max() > 0  # the low parts carried something


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kernel", _gpu_kernels(), ids=repr)
def test_a_transform_product_and_nystrom_moments_on_the_standard_alone(kernel, dtype):
    # The two tasks a GPU runs beside the tiles: the product K(X, Y) V of a transform, and a
    # Nystrom chunk's sums of k(x, L) less its shift and of their outer products, each in
    # strips (several here), on strict arrays: numpy's result to rounding.
    from dkpca.blocked import _strip_product
    from dkpca.solvers.nystrom import _kernel_moments

    rng = np.random.default_rng(7)
    X, Y = rng.normal(size=(90, 4)).astype(dtype), rng.normal(size=(20, 4)).astype(dtype)
    V = rng.normal(size=(20, 3)).astype(dtype)
    strict = [xps.asarray(A) for A in (X, Y, V)]
    product = _strip_product(kernel, *strict, block_bytes=20 * 8 * 16)  # several strips
    assert array_module(product) is xps
    want = _strip_product(kernel, X, Y, V, block_bytes=20 * 8 * 16)
    atol = (1e-12 if dtype == np.float64 else 1e-4) * np.abs(want).max()
    np.testing.assert_allclose(np.asarray(product), want, rtol=0, atol=atol)
    shift = kernel.pairwise(X[:5], Y).mean(axis=0)
    moments = _kernel_moments(strict[0], strict[1], kernel, 16, xps.asarray(shift))
    assert array_module(moments) is xps and moments.shape == (22, 20)
    want = _kernel_moments(X, Y, kernel, 16, shift)
    atol = (1e-11 if dtype == np.float64 else 1e-4) * np.abs(want).max()
    np.testing.assert_allclose(np.asarray(moments), want, rtol=0, atol=atol)


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "streamed"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_holders_sums_and_pass_on_the_standard_alone(cached, dtype):
    # A holder of three row blocks (six tiles) on strict arrays: its summary (row sums as
    # double-doubles, trace) and a pass (every tile's products summed into its rows, rounded
    # once when exclusive; streamed tiles remember their form of exp) give numpy's numbers to
    # the tiles' rounding. Its sums come to the host and its partials of a strict V stay
    # strict, as a GPU holder's do.
    from dkpca._tile_holders import build_state, state_product, state_summary
    from dkpca.kernels import RBF

    rng = np.random.default_rng(8)
    X, V = rng.normal(size=(70, 3)) + 5.0, rng.normal(size=(70, 4))
    bounds, pairs = [(0, 25), (25, 50), (50, 70)], [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2),
                                                     (2, 2)]
    blocks = [X[a:b] for a, b in bounds]

    def state(rows):
        return build_state(RBF(gamma=0.2), np.dtype(dtype), bounds, pairs, [0, 1, 2], *rows,
                           cached=cached, threads=2)

    strict, numpy = state([xps.asarray(b) for b in blocks]), state(blocks)
    assert strict.namespace is xps and numpy.namespace is np
    atol = 1e-12 if dtype == np.float64 else 1e-5
    if cached:
        (lo, high, low, trace, _), want = state_summary(strict), state_summary(numpy)
        assert isinstance(high, np.ndarray) and lo == want[0] == 0  # to the host, as a GPU's
        np.testing.assert_allclose(np.asarray(high) + np.asarray(low), want[1] + want[2],
                                   rtol=0, atol=atol * 70)
        assert float(trace) == pytest.approx(want[3], rel=0, abs=atol * 70)
    for exclusive in (False, True):
        lo, high, low = state_product(strict, xps.asarray(V), 2, exclusive=exclusive)
        want = state_product(numpy, V, 2, exclusive=exclusive)
        assert array_module(high) is xps and (low is None) == (want[2] is None) == exclusive
        total = np.asarray(high) + (0.0 if low is None else np.asarray(low))
        reference = want[1] + (0.0 if want[2] is None else want[2])
        np.testing.assert_allclose(total, reference, rtol=0, atol=atol * 70 * np.abs(V).max())
        # host arrays given (a worker's shared-memory file): the holder's sum comes into them
        out = np.zeros((70, 4)), None if exclusive else np.zeros((70, 4))
        _, into_high, into_low = state_product(strict, V, 2, exclusive=exclusive, out=out)
        assert into_high is out[0] and into_low is out[1]
        np.testing.assert_array_equal(  # rounded, whatever the order the threads added in
            into_high + (0.0 if exclusive else into_low), total)
    np.testing.assert_allclose(reference, RBF(gamma=0.2).pairwise(X) @ V, rtol=0,
                               atol=atol * 70 * np.abs(V).max())
    assert strict.forms == numpy.forms and (cached or dtype == np.float64 or numpy.forms)


def test_mdd_and_kpa_spectra_on_the_standard_alone():
    # The centred RBF spectra of a squared-distance matrix over a grid of widths (what the MDD
    # noise draws and kernel parallel analysis solve, batched): numpy's to rounding, and the
    # dense solve's.
    from dkpca.selection._spectra import centred_rbf_eigenvalues, squared_distances

    D = squared_distances(np.random.default_rng(9).normal(size=(60, 3)))
    grid = np.geomspace(0.05, 20.0, 11)  # 11 widths: stacks of 9 and 2 (numpy's GIL rule)
    strict = centred_rbf_eigenvalues(xps.asarray(D), grid, 5)
    numpy = centred_rbf_eigenvalues(D, grid, 5)
    assert isinstance(strict, np.ndarray) and strict.shape == (11, 5)
    np.testing.assert_allclose(strict, numpy, rtol=1e-12, atol=1e-13)
    H = np.eye(60) - 1.0 / 60
    dense = np.linalg.eigvalsh(H @ np.exp(-D / (2 * grid[4])) @ H)[::-1][:5]
    np.testing.assert_allclose(numpy[4], dense, rtol=1e-10)


def test_fixed_point_preimages_on_the_standard_alone():
    # The pre-image iteration on strict arrays, with points that converge, one whose weights
    # vanish (restarted from its linear pre-image, then given up) and starts given: numpy's
    # points, convergence flags and iteration count.
    from dkpca._fixed_point import _fixed_point_block

    rng = np.random.default_rng(10)
    B = rng.normal(size=(120, 3))
    weights = np.abs(rng.normal(size=(12, 120))) * (rng.random((12, 120)) < 0.1)
    weights[3] = 0.0
    for start in (None, B[:12] + 0.05):
        strict = _fixed_point_block(xps.asarray(weights), xps.asarray(B),
                                    None if start is None else xps.asarray(start), 2.0, 1e-8,
                                    200)
        numpy = _fixed_point_block(weights, B, start, 2.0, 1e-8, 200)
        np.testing.assert_allclose(np.asarray(strict.points), numpy.points, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(np.asarray(strict.converged), numpy.converged)
        assert strict.n_iter == numpy.n_iter == 200  # the vanished point never converges
        assert not numpy.converged[3] and numpy.converged.sum() == 11


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cached", [True, False], ids=["cached", "streamed"])
def test_a_randomized_fits_passes_on_the_standard_alone(cached, dtype):
    # The randomized solver's whole Krylov loop in this process with strict data rows: the
    # tiles placed on the holder (ten, or six of float32), their sums, every pass's centred
    # product (the first one, streamed, with its column of row means), the partials summed,
    # and the solver between passes. The eigenpairs stay strict arrays and equal numpy's to
    # the tiles' rounding; the row means come to the host, as from a GPU.
    import dask
    import dask.array as da

    from dkpca.kernels import RBF
    from dkpca.solvers.randomized import _CenteredKernelOperator

    rng = np.random.default_rng(11)
    X, start = rng.normal(size=(700, 5)), rng.normal(size=(700, 12))
    tol = 1e-9 if dtype == "float64" else 1e-6
    results, operators = [], []
    for source, begin in ((X, start), (xps.asarray(X), xps.asarray(start))):
        with dask.config.set(scheduler="threads"):
            operator = _CenteredKernelOperator(
                RBF(gamma=0.2), da.from_array(X, chunks=200), block_bytes=200 * 200 * 8,
                max_memory=2**30 if cached else 0, dtype=np.dtype(dtype), source=source)
            results.append(block_krylov_eigh(operator, begin, 5, tol=tol, max_iter=30))
        operators.append(operator)
    numpy, strict = results
    assert operators[1].tiles.n_tiles == operators[0].tiles.n_tiles > 1
    assert (operators[1].tiles.nbytes > 0) == cached
    assert array_module(strict.eigenvalues) is xps and array_module(strict.eigenvectors) is xps
    assert isinstance(operators[1].row_means, np.ndarray)
    assert strict.converged and numpy.converged
    rtol = 1e-12 if dtype == "float64" else 1e-6
    np.testing.assert_allclose(np.asarray(strict.eigenvalues), numpy.eigenvalues, rtol=rtol)
    K = RBF(gamma=0.2).pairwise(X)
    H = np.eye(700) - 1.0 / 700
    np.testing.assert_allclose(numpy.eigenvalues, np.linalg.eigvalsh(H @ K @ H)[::-1][:5],
                               rtol=1e-9 if dtype == "float64" else 1e-5)
    assert operators[1].total_variance() == pytest.approx(np.trace(H @ K @ H), rel=1e-6)
