"""Model selection: MDD (distance moments, ordered fill, noise spectra, eqs. 14–15), kernel
parallel analysis, Shannon entropy, the rules of thumb and the result object."""

from __future__ import annotations

import itertools
import threading
import time

import dask
import dask.array as da
import matplotlib
import numpy as np
import pytest
import scipy.linalg
from scipy.spatial.distance import cdist, pdist

from dkpca.datasets import make_semicircles, make_square
from dkpca.selection import (
    ModelSelection,
    distance_percentile_sigma2,
    rule_of_thumb_sigma2,
    select_model,
)
from dkpca.selection._distances import distance_moments
from dkpca.selection._spectra import centred_rbf_eigenvalues, squared_distances
from dkpca.selection.entropy import kernel_entropy
from dkpca.selection.kpa import permutation_spectra
from dkpca.selection.mdd import (
    components_above_noise,
    make_metric,
    noise_distances,
    noise_spectra,
    ordered_fill,
    structural_information,
    triangle_deficit,
)

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def square() -> np.ndarray:
    X, _, _ = make_square(2000, random_state=0)
    return X


def _brute_deficit(R: np.ndarray) -> float:
    """Largest ``R_ij - R_ik - R_kj`` over all triples (the definition)."""
    worst = 0.0
    for k in range(R.shape[0]):
        worst = max(worst, float((R - R[:, k, None] - R[None, k, :]).max()))
    return worst


def _reference_moments(train: np.ndarray, others: np.ndarray) -> tuple:
    r = cdist(train, np.vstack([train, others])).ravel()
    r = np.delete(r, [i * (len(train) + len(others)) + i for i in range(len(train))])
    z = (r - r.mean()) / r.std()
    return r.mean(), r.std(), (z**3).mean(), (z**4).mean(), r.max(), r.size


# --- distances and moments -------------------------------------------------------------------

@pytest.mark.parametrize("chunks", [7, 40, 200])
def test_distance_moments_match_brute_force(chunks):
    rng = np.random.default_rng(0)
    train, others = rng.normal(size=(30, 3)) + 50.0, rng.normal(size=(120, 3)) * 2 + 50.0
    expected = _reference_moments(train, others)
    D2 = squared_distances(train)
    separate = distance_moments(train, D2, 30, da.from_array(others, chunks=(chunks, 3)))
    everything = np.vstack([train, others])
    rest = distance_moments(train, D2, 30, da.from_array(everything, chunks=(chunks, 3)),
                            others_include_train=True)
    for moments in dask.compute(separate, rest):
        got = (moments.mean, moments.std, moments.skewness, moments.kurtosis, moments.maximum,
               moments.count)
        np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_squared_distances_are_exact_far_from_the_origin():
    X = np.random.default_rng(1).normal(size=(40, 5)) + 1e6
    np.testing.assert_allclose(squared_distances(X), cdist(X, X, "sqeuclidean"), atol=1e-6)


def test_centred_eigenvalues_match_eigh_of_the_centred_kernel():
    X = np.random.default_rng(2).normal(size=(60, 3))
    grid = np.array([0.1, 1.0, 10.0])
    got = centred_rbf_eigenvalues(squared_distances(X), grid, 10)
    H = np.eye(60) - 1 / 60
    for row, sigma2 in enumerate(grid):
        K = np.exp(-cdist(X, X, "sqeuclidean") / (2 * sigma2))
        expected = np.sort(scipy.linalg.eigvalsh(H @ K @ H))[::-1][:10]
        np.testing.assert_allclose(got[row], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("n", "n_widths"), [(1000, 1), (480, 2)])
def test_spectra_let_other_threads_run_while_lapack_works(n, n_widths):
    """Draws run as threads: the eigensolver must release the GIL, or they take turns.

    While a thread holds the GIL through a solve (as scipy.linalg.eigh does, and numpy's
    eigensolvers for a single matrix of order <= 500), this thread stalls for nearly the whole
    call, or half of it with two solves; the best of three trials keeps a busy machine's
    scheduling from failing the test.
    """
    D = squared_distances(np.random.default_rng(0).normal(size=(n, 2)))
    widths = np.linspace(1.0, 2.0, n_widths)
    stalls = []
    for _ in range(3):
        worker = threading.Thread(target=centred_rbf_eigenvalues, args=(D, widths, 5))
        ticks = [time.perf_counter()]
        worker.start()
        while worker.is_alive():
            time.sleep(0.0005)  # needs the GIL back to go on
            ticks.append(time.perf_counter())
        worker.join()
        stalls.append(np.diff(ticks).max() / (ticks[-1] - ticks[0]))
    assert min(stalls) < 0.25, stalls


# --- the ordered fill and the triangle inequality --------------------------------------------

def test_ordered_fill_follows_the_appendix():
    values = np.arange(1.0, 11.0)  # n = 5: 10 values
    R = ordered_fill(values, 5)
    # Column 1 holds r1..r4 (the four largest) top to bottom, column 2 r5..r7, ...
    np.testing.assert_array_equal(R[1:, 0], [10, 9, 8, 7])
    np.testing.assert_array_equal(R[2:, 1], [6, 5, 4])
    np.testing.assert_array_equal(R[3:, 2], [3, 2])
    np.testing.assert_array_equal(R[4:, 3], [1])
    np.testing.assert_array_equal(R, R.T)
    assert not np.diag(R).any()


@pytest.mark.parametrize("seed", range(5))
def test_the_quadratic_deficit_equals_the_definition(seed):
    """The O(n²) criterion is exact on ordered fills, whatever the values' spread."""
    rng = np.random.default_rng(seed)
    for values in (rng.exponential(size=45), rng.uniform(1, 2, size=45),
                   rng.lognormal(sigma=2, size=45)):
        R = ordered_fill(values, 10)
        assert triangle_deficit(R) == pytest.approx(max(0.0, _brute_deficit(R)), abs=1e-12)


def test_noise_distances_from_real_moments_are_a_metric(square):
    train = square[:120]
    moments = distance_moments(train, squared_distances(train), 120,
                               da.from_array(square, chunks=500),
                               others_include_train=True).compute()
    for seed in range(3):
        R = noise_distances(moments, 120, np.random.default_rng(seed))
        assert _brute_deficit(R) <= 1e-12
        assert R.min() >= 0 and R.max() <= moments.maximum
        np.testing.assert_array_equal(R, R.T)


def test_make_metric_repairs_a_wide_draw_and_keeps_the_order():
    values = np.random.default_rng(3).lognormal(sigma=2.0, size=190)
    R = ordered_fill(values, 20)
    assert _brute_deficit(R) > 0
    fixed, shift = make_metric(R, values.max())
    assert shift > 0 and _brute_deficit(fixed) <= 1e-12
    assert fixed.max() <= values.max() * (1 + 1e-12)
    upper = np.triu_indices(20, 1)
    np.testing.assert_array_equal(np.argsort(fixed[upper], kind="stable"),
                                  np.argsort(R[upper], kind="stable"))


# --- eqs. (14) and (15) ------------------------------------------------------------------------

def test_components_and_information_on_hand_made_spectra():
    data = np.array([
        [9.0, 5.0, 3.0, 1.0, 0.5],   # above until index 3, then a tail that crosses back
        [1.0, 0.5, 0.2, 0.1, 0.0],   # first noise eigenvalue larger: none
        [4.0, 3.0, 2.0, 1.0, 0.5],   # above everywhere
        [4.0, 3.0, 2.0, 1.0, 0.5],   # equality is not "above"
    ])
    noise = np.array([
        [2.0, 2.0, 2.0, 2.0, 0.1],
        [2.0, 0.1, 0.1, 0.1, 0.1],
        [1.0, 1.0, 1.0, 0.5, 0.25],
        [3.0, 3.0, 1.0, 1.0, 1.0],
    ])
    counts = components_above_noise(data, noise)
    np.testing.assert_array_equal(counts, [3, 0, 5, 1])
    np.testing.assert_allclose(structural_information(data, noise, counts),
                               [7.0 + 3.0 + 1.0, 0.0, 3 + 2 + 1 + 0.5 + 0.25, 1.0])
    # With the number of components fixed, the sum may be negative.
    np.testing.assert_allclose(structural_information(data, noise, 2),
                               [10.0, -0.6, 5.0, 1.0])


# --- select_model --------------------------------------------------------------------------

def test_mdd_wiring_matches_a_hand_computation():
    """λ is the training spectrum, τ the percentile of draws seeded by SeedSequence.spawn."""
    X, _, _ = make_semicircles(120, random_state=1)
    grid = [0.5, 2.0, 8.0]
    result = select_model(X, sigma2_grid=grid, n_draws=7, percentile=90, n_train=40,
                          random_state=5)
    index = result.training_index
    train = X[index]
    np.testing.assert_allclose(result.table["data_eigenvalues"],
                               centred_rbf_eigenvalues(squared_distances(train), grid, 39),
                               rtol=1e-10)
    moments = distance_moments(train, squared_distances(train), 40,
                               da.from_array(X, chunks=30), others_include_train=True).compute()
    seeds = np.random.SeedSequence(5).spawn(3)[2].spawn(7)
    draws = np.stack([noise_spectra(s, moments, 40, np.array(grid), 39) for s in seeds])
    np.testing.assert_allclose(result.table["noise_eigenvalues"],
                               np.percentile(draws, 90, axis=0), rtol=1e-8)
    info = result.table["information"].values
    assert result.sigma2 == grid[int(np.argmax(info))]
    assert result.n_components == int(result.table["n_components"].sel(sigma2=result.sigma2))
    assert result.table.attrs["distance_count"] == 40 * 119


def test_mdd_finds_components_on_the_square_where_kpa_finds_fewer(square):
    """The MDD paper's Table I: in two dimensions the permuted data look like the data."""
    mdd = select_model(square, n_draws=30, n_train=300, random_state=0)
    kpa = select_model(square, "kpa", n_draws=30, n_train=300, random_state=0)
    assert mdd.n_components >= 10
    assert kpa.n_components < mdd.n_components / 3
    assert mdd.table["information"].max() > 10 * max(kpa.table["information"].max(), 1e-12)
    # The ordered fill gives the noise a large first eigenvalue at small widths: MDD selects
    # nothing at or below the rule of thumb (DESIGN.md), which is why the grid reaches 10x.
    rule = mdd.table.attrs["rule_of_thumb"]
    assert (mdd.table["n_components"].sel(sigma2=slice(None, rule)) == 0).all()
    assert rule < mdd.sigma2 < 10 * rule


@pytest.mark.distributed
@pytest.mark.parametrize("method", ["mdd", "kpa"])
def test_same_result_on_threads_and_on_a_distributed_client(client, method):
    X, _, _ = make_semicircles(150, random_state=2)
    options = {"n_draws": 6, "n_train": 50, "sigma2_grid": [0.5, 2.0, 8.0], "random_state": 3}
    with dask.config.set(scheduler="threads"):
        threaded = select_model(X, method, **options)
    distributed = select_model(X, method, **options)
    np.testing.assert_array_equal(threaded.table["noise_eigenvalues"],
                                  distributed.table["noise_eigenvalues"])
    assert (threaded.sigma2, threaded.n_components) == (distributed.sigma2,
                                                         distributed.n_components)


@pytest.mark.parametrize("method", ["mdd", "kpa"])
def test_same_result_on_one_and_on_two_threads(method):
    X, _, _ = make_semicircles(150, random_state=2)
    options = {"n_draws": 6, "n_train": 50, "sigma2_grid": [0.5, 2.0, 8.0], "random_state": 3}
    results = []
    for workers in (1, 2):
        with dask.config.set(scheduler="threads", num_workers=workers):
            results.append(select_model(X, method, **options))
    one, two = results
    for name in ("data_eigenvalues", "noise_eigenvalues", "information"):
        np.testing.assert_array_equal(one.table[name], two.table[name])
    assert (one.sigma2, one.n_components) == (two.sigma2, two.n_components)


def test_kpa_draws_permute_each_feature():
    X, _, _ = make_semicircles(60, random_state=0)
    seed = np.random.SeedSequence(1)
    got = permutation_spectra(seed, X, np.array([1.0]), 5)
    permuted = np.random.default_rng(seed).permuted(X, axis=0)
    np.testing.assert_allclose(got, centred_rbf_eigenvalues(squared_distances(permuted),
                                                            np.array([1.0]), 5))
    assert not np.allclose(permuted, X)
    np.testing.assert_array_equal(np.sort(permuted, axis=0), np.sort(X, axis=0))


def test_fixed_number_of_components_chooses_sigma2_only():
    X, _, _ = make_semicircles(200, random_state=0)
    result = select_model(X, n_components=3, n_draws=10, n_train=60, random_state=0)
    assert result.n_components == 3
    table = result.table
    gap = (table["data_eigenvalues"] - table["noise_eigenvalues"]).isel(component=slice(0, 3))
    np.testing.assert_allclose(table["information"], gap.sum("component"))
    assert result.sigma2 == float(table["sigma2"][int(np.argmax(table["information"].values))])
    assert table.sizes["component"] == 3  # only the eigenvalues it needs


def test_kernel_entropy_matches_a_histogram_of_kernel_values():
    X = np.random.default_rng(4).normal(size=(80, 2))
    D2 = squared_distances(X)
    grid = np.array([0.05, 0.5, 5.0])
    for sigma2, got in zip(grid, kernel_entropy(D2, grid, 20), strict=True):
        values = np.exp(-pdist(X, "sqeuclidean") / (2 * sigma2))
        counts, _ = np.histogram(values, bins=20, range=(0.0, 1.0))
        p = counts[counts > 0] / counts.sum()
        assert got == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)


def test_shannon_picks_the_entropy_peak_then_counts_by_mdd():
    X, _, _ = make_semicircles(200, random_state=0)
    result = select_model(X, "shannon", n_draws=10, n_train=80, random_state=0)
    table = result.table
    assert result.sigma2 == float(table["sigma2"][int(np.argmax(table["entropy"].values))])
    computed = ~np.isnan(table["information"].values)
    assert computed.sum() == 1 and table["sigma2"].values[computed][0] == result.sigma2
    mdd_there = select_model(X, sigma2_grid=[result.sigma2], n_draws=10, n_train=80,
                             random_state=0)
    assert mdd_there.n_components == result.n_components


@pytest.mark.parametrize("training", ["fs2", "icf"])
def test_landmark_training_sets(training):
    X, _, _ = make_semicircles(300, random_state=0)
    result = select_model(X, n_draws=5, training=training, n_train=40, validation=100,
                          random_state=0)
    assert 3 <= result.training_index.size <= 40
    assert result.table.attrs["n_validation"] == 100
    if training == "icf":  # the pivots depend on sigma2: the rule of thumb only, as the paper
        assert result.table.sizes["sigma2"] == 1
        assert result.sigma2 in (None, pytest.approx(rule_of_thumb_sigma2(X)))


def test_validation_options(square):
    X = square[:300]
    explicit = select_model(X[:100], validation=X[100:], n_draws=3, n_train=100,
                            sigma2_grid=[0.3], random_state=0)
    assert explicit.table.attrs["n_validation"] == 200
    assert explicit.table.attrs["distance_count"] == 100 * 299
    none = select_model(X, validation=None, n_draws=3, n_train=50, sigma2_grid=[0.3],
                        random_state=0)
    assert none.table.attrs["distance_count"] == 50 * 49
    fraction = select_model(X, validation=0.5, n_draws=3, n_train=100, sigma2_grid=[0.3],
                            random_state=0)
    assert fraction.table.attrs["n_validation"] == 100
    given = select_model(X, training=np.arange(0, 300, 3), n_draws=3, sigma2_grid=[0.3])
    np.testing.assert_array_equal(given.training_index, np.arange(0, 300, 3))


def test_chunking_does_not_change_the_choice(square):
    X = square[:400]
    options = {"n_draws": 5, "n_train": 100, "random_state": 1, "sigma2_grid": [0.2, 0.4, 0.8]}
    a = select_model(da.from_array(X, chunks=37), **options)
    b = select_model(X, **options)
    np.testing.assert_allclose(a.table["noise_eigenvalues"], b.table["noise_eigenvalues"],
                               rtol=1e-9)
    assert (a.sigma2, a.n_components) == (b.sigma2, b.n_components)


@pytest.mark.parametrize("bad, match", [
    ({"method": "pca"}, "method"),
    ({"n_draws": 0}, "n_draws"),
    ({"percentile": 100}, "percentile"),
    ({"n_train": 5000}, "n_train"),
    ({"n_components": 60, "n_train": 50}, "n_components"),
    ({"sigma2_grid": [0.1, -1.0]}, "sigma2_grid"),
    ({"validation": 1000}, "validation"),
    ({"validation": "all"}, "validation"),
    ({"validation": np.zeros((10, 3))}, "features"),
    ({"training": "kmeans"}, "training"),
    ({"training": [0, 1]}, "training"),
])
def test_bad_arguments_are_refused(square, bad, match):
    with pytest.raises(ValueError, match=match):
        select_model(square[:200], **{"n_draws": 2, **bad})


@pytest.mark.parametrize("method", ["mdd", "kpa", "shannon"])
@pytest.mark.parametrize("grid", [None, [1.0]])
def test_data_without_spread_are_refused_by_every_method(method, grid):
    """kPA divided by the zero rule of thumb, or reported "no component" on a given grid."""
    with pytest.raises(ValueError, match="all distances are equal; the data have no spread"):
        select_model(np.ones((40, 3)), method, n_draws=2, sigma2_grid=grid, random_state=0)


def test_training_rows_without_spread_are_refused():
    X = np.r_[np.zeros((5, 2)), np.random.default_rng(0).normal(size=(20, 2))]
    with pytest.raises(ValueError, match="no spread among the 5 training rows"):
        select_model(X, "kpa", training=np.arange(5), n_draws=2, sigma2_grid=[1.0])


@pytest.mark.parametrize("training, match", [
    ([0.9, 1.9, 2.9, 3.5], "integer row indices"),  # was truncated to rows 0, 1, 2, 3
    (np.arange(6).reshape(2, 3), "1-D sequence"),
])
def test_training_rows_that_are_not_integer_indices_are_refused(training, match):
    X, _, _ = make_semicircles(60, random_state=0)
    with pytest.raises(ValueError, match=match):
        select_model(X, training=training, n_draws=2, sigma2_grid=[1.0], validation=None)


def test_a_nested_sigma2_grid_is_refused_not_flattened():
    X, _, _ = make_semicircles(60, random_state=0)
    with pytest.raises(ValueError, match=r"sigma2_grid must be a 1-D .* shape \(2, 2\)"):
        select_model(X, n_draws=2, sigma2_grid=[[1, 2], [3, 4]])


@pytest.mark.parametrize("zero", [0, 0.0])
def test_a_zero_validation_count_or_fraction_means_no_validation(zero):
    """The docstring: an int is a count, a float a fraction; none of either is no validation."""
    X, _, _ = make_semicircles(60, random_state=0)
    options = {"n_draws": 2, "sigma2_grid": [1.0], "random_state": 0}
    result = select_model(X, validation=zero, **options)
    reference = select_model(X, validation=None, **options)
    assert result.table.attrs["n_validation"] == 0
    assert result.table.attrs["distance_count"] == reference.table.attrs["distance_count"]
    np.testing.assert_array_equal(result.training_index, reference.training_index)


def test_a_boolean_training_mask_picks_its_true_rows():
    X, _, _ = make_semicircles(200, random_state=0)
    mask = np.zeros(200, dtype=bool)
    mask[::4] = True
    options = {"n_draws": 3, "sigma2_grid": [1.0, 3.0], "random_state": 0}
    by_mask = select_model(X, training=mask, **options)
    by_index = select_model(X, training=np.flatnonzero(mask), **options)
    np.testing.assert_array_equal(by_mask.training_index, np.flatnonzero(mask))
    np.testing.assert_array_equal(by_mask.table["data_eigenvalues"].values,
                                  by_index.table["data_eigenvalues"].values)
    with pytest.raises(ValueError, match="one entry per row of X"):
        select_model(X, training=mask[:100], **options)


@pytest.mark.parametrize("conflict, match", [
    ({"training": np.arange(50), "n_train": 10}, "n_train=10 and training"),
    ({"n_components": 3, "max_components": 2}, "n_components=3 exceeds max_components=2"),
])
def test_conflicting_arguments_are_refused(conflict, match):
    """Neither is silently ignored any more: the table showed n_train=50, and 3 components."""
    X, _, _ = make_semicircles(200, random_state=0)
    with pytest.raises(ValueError, match=match):
        select_model(X, n_draws=3, sigma2_grid=[1.0], random_state=0, **conflict)


@pytest.mark.parametrize("seed", range(4))
def test_two_valued_distances_are_refused_whatever_the_seed(seed):
    """Repeated one-hot rows: distances 0 and sqrt(2) only, kurtosis = skewness² + 1.

    No Pearson law has these moments; rounding used to decide between a deep fit_pearson
    error and a result.
    """
    X = np.repeat(np.eye(10), 4, axis=0)
    train = X[np.random.default_rng(seed).choice(40, 20, replace=False)]
    r = pdist(train)
    assert np.unique(r).size == 2  # the cause, checked independently
    z = (r - r.mean()) / r.std()
    assert (z**4).mean() == pytest.approx((z**3).mean() ** 2 + 1, rel=1e-12)
    with pytest.raises(ValueError, match="take only two values"):
        select_model(X, n_train=20, n_draws=3, validation=None, sigma2_grid=[0.5, 1, 2],
                     random_state=seed)
    with pytest.raises(ValueError, match="take only two values"):
        select_model(np.repeat(np.eye(2), 10, axis=0), n_train=10, n_draws=3,
                     sigma2_grid=[0.5, 1], random_state=seed)


def test_result_plot_and_kpca(tmp_path):
    X, _, _ = make_semicircles(200, random_state=0)
    for method in ("mdd", "kpa", "shannon"):
        result = select_model(X, method, n_draws=5, n_train=60, random_state=0)
        path = tmp_path / f"{method}.png"
        figure = result.plot(path)
        assert path.stat().st_size > 0 and len(figure.axes) == (3 if method == "shannon" else 2)
        assert not list(tmp_path.glob("*.partial*"))
        matplotlib.pyplot.close(figure)
    model = result.to_kpca(random_state=0)
    assert (model.n_components, model.sigma2) == (result.n_components, result.sigma2)
    # the caller's arguments override the selected ones (this raised "multiple values")
    model = result.to_kpca(n_components=1, solver="randomized")
    assert (model.n_components, model.sigma2, model.solver) == (1, result.sigma2, "randomized")


def test_nothing_selected_is_reported_clearly():
    X, _, _ = make_semicircles(200, random_state=0)
    result = select_model(X, n_draws=5, n_train=60, sigma2_grid=[1e-4], random_state=0)
    assert (result.sigma2, result.n_components) == (None, 0)
    assert "no component" in str(result)
    with pytest.raises(ValueError, match="no component"):
        result.to_kpca()
    result.plot()  # the spectra at the grid point nearest the rule of thumb
    assert isinstance(result, ModelSelection)


# --- rules of thumb ------------------------------------------------------------------------

def test_rule_of_thumb_is_eq_20():
    X = np.random.default_rng(0).normal(size=(500, 4)) * [1.0, 2.0, 3.0, 4.0]
    expected = 0.1 * 4 * X.var(axis=0, ddof=1).mean()
    assert rule_of_thumb_sigma2(X) == pytest.approx(expected, rel=1e-12)
    assert rule_of_thumb_sigma2(da.from_array(X, chunks=77)) == pytest.approx(expected)


def test_distance_percentile_is_half_the_squared_distance_percentile():
    X = np.random.default_rng(0).normal(size=(300, 3))
    expected = np.percentile(pdist(X, "sqeuclidean"), 5) / 2
    assert distance_percentile_sigma2(X) == pytest.approx(expected, rel=1e-12)
    sub = distance_percentile_sigma2(X, 50, max_samples=100, random_state=0)
    assert sub == pytest.approx(np.percentile(pdist(X, "sqeuclidean"), 50) / 2, rel=0.25)
    with pytest.raises(ValueError, match="percentile"):
        distance_percentile_sigma2(X, 0)


def test_zarr_input(tmp_path):
    zarr = pytest.importorskip("zarr")
    X, _, _ = make_semicircles(200, random_state=0)
    zarr.create_array(str(tmp_path / "x.zarr"), data=X, chunks=(64, 2))
    from_zarr = select_model(str(tmp_path / "x.zarr"), n_draws=3, n_train=50, random_state=0,
                             sigma2_grid=[1.0, 4.0])
    in_memory = select_model(X, n_draws=3, n_train=50, random_state=0, sigma2_grid=[1.0, 4.0])
    np.testing.assert_allclose(from_zarr.table["information"], in_memory.table["information"])


def test_the_grid_is_sorted_whatever_its_order():
    X, _, _ = make_semicircles(150, random_state=0)
    results = [select_model(X, sigma2_grid=grid, n_draws=4, n_train=50, random_state=0)
               for grid in itertools.permutations([0.5, 2.0, 8.0], 2)]
    assert all(np.array_equal(r.table["sigma2"], np.sort(r.table["sigma2"])) for r in results)


def test_too_few_samples_are_named_as_such():
    X = np.random.default_rng(0).normal(size=(5, 2))
    with pytest.raises(ValueError, match="X has 5 samples; model selection needs at least 6"):
        select_model(X)
