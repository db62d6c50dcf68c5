"""Solver and pre-image options objects (issue 34): selection, validation, grid search, refits.

The solvers' numbers are tested with each solver; here what the objects add: a string and the
default object are the same fit, nested parameters reach the fit through scikit-learn's
machinery, a refit under other options keeps nothing of the earlier one, and the messages name
the estimator that called the solver layer.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

import dkpca
from dkpca import KernelPCA
from dkpca._kernel_solvers import run_solver
from dkpca.kernels import RBF
from dkpca.options import (
    ICF,
    SOLVERS,
    Exact,
    FixedPoint,
    FixedSize,
    Nystrom,
    Randomized,
    Sketch,
    solver_name,
)
from dkpca.solvers import ComponentRule

X = np.random.default_rng(0).normal(size=(150, 3))


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_name_and_the_default_object_are_the_same_fit(name):
    by_name = KernelPCA(3, solver=name, random_state=0).fit(X)
    by_object = KernelPCA(3, solver=SOLVERS[name](), random_state=0).fit(X)
    assert by_name.solver_ == by_object.solver_ == name
    np.testing.assert_array_equal(by_name.eigenvalues_, by_object.eigenvalues_)
    np.testing.assert_array_equal(by_name.transform(X[:5]), by_object.transform(X[:5]))


@pytest.mark.parametrize("options, effect", [
    (Nystrom(n_landmarks=17), lambda m: m.landmarks_.shape[0] == 17),
    (FixedSize(n_landmarks=12, max_iter=1), lambda m: m.landmarks_.shape[0] == 12
     and len(m.entropy_trace_) == 2),  # the start, then one iteration
    (ICF(max_rank=9), lambda m: m.landmarks_.shape[0] == 9),
    (Sketch(refine=True), lambda m: m.n_iter_ == 2),
])
def test_each_option_reaches_its_solver(options, effect):
    assert effect(KernelPCA(3, solver=options, random_state=0).fit(X))


def test_the_randomized_pass_budget_is_its_max_iter():
    with pytest.warns(UserWarning, match="stopped after 1 passes"):
        assert KernelPCA(3, solver=Randomized(max_iter=1), random_state=0).fit(X).n_iter_ == 1


def test_a_grid_search_reaches_nested_solver_options():
    def n_landmarks(estimator, X_test, y=None):
        return estimator.landmarks_.shape[0]  # what the fit was given

    search = GridSearchCV(KernelPCA(2, solver=Nystrom(), random_state=0),
                          {"solver__n_landmarks": [10, 30], "solver__sampling": ["uniform",
                                                                                 "kmeans"]},
                          scoring=n_landmarks, cv=2).fit(X)
    assert search.best_params_["solver__n_landmarks"] == 30
    scores = dict(zip(map(str, search.cv_results_["params"]),
                      search.cv_results_["mean_test_score"], strict=True))
    assert sorted(set(scores.values())) == [10.0, 30.0]
    assert search.best_estimator_.solver.get_params()["n_landmarks"] == 30


def test_nested_parameters_set_get_and_clone():
    model = KernelPCA(2, solver=Randomized(tol=1e-8), preimage=FixedPoint(max_iter=40))
    params = model.get_params()
    assert params["solver__tol"] == 1e-8 and params["preimage__max_iter"] == 40
    model.set_params(solver__max_iter=5, preimage__tol=1e-3)
    copy = clone(model)
    assert copy.solver is not model.solver  # clone copies the options, not shares them
    assert copy.solver.get_params() == {**Randomized().get_params(), "tol": 1e-8,
                                        "max_iter": 5}
    assert copy.preimage.get_params() == {"tol": 1e-3, "max_iter": 40}


def test_kernel_pca_keeps_scikit_learns_names_and_about_fifteen_parameters():
    from sklearn.decomposition import KernelPCA as Reference

    ours = set(KernelPCA().get_params(deep=False))
    shared = {"n_components", "kernel", "gamma", "degree", "coef0", "kernel_params", "alpha",
              "fit_inverse_transform", "remove_zero_eig", "random_state", "copy_X"}
    assert shared <= ours & set(Reference().get_params())
    assert len(ours) <= 17, sorted(ours)
    # help() and the API pages show these, not the (*args, **kwargs) of the refusing __new__
    assert set(inspect.signature(KernelPCA).parameters) == ours


@pytest.mark.parametrize("options, message", [
    (Nystrom(sampling="bogus"), "invalid Nystrom sampling='bogus'"),
    (Randomized(tol=0), "invalid Randomized tol=0"),
    (ICF(max_rank=0), "invalid ICF max_rank=0"),
    (FixedSize(selection="greedy"), "invalid FixedSize selection='greedy'"),
    (Sketch(kind="srht"), "invalid Sketch kind='srht'"),
    (FixedPoint(), "invalid solver=FixedPoint()"),
])
def test_a_bad_option_is_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        KernelPCA(2, solver=options).fit(X)


def test_a_bad_preimage_option_is_refused_by_name():
    with pytest.raises(ValueError, match="invalid FixedPoint max_iter=0"):
        KernelPCA(2, preimage=FixedPoint(max_iter=0)).fit(X)
    with pytest.raises(ValueError, match="invalid preimage=Nystrom()"):
        KernelPCA(2, preimage=Nystrom()).fit(X)


def test_the_fixed_point_options_stop_the_iteration(caplog):
    model = KernelPCA(2, gamma=0.5, preimage=FixedPoint(max_iter=1, tol=1e-12)).fit(X)
    assert solver_name(model.preimage) == "fixed_point"
    with caplog.at_level("WARNING", logger="dkpca.preimage"):
        model.denoise(X[:20])
    assert "did not converge in 1 iterations" in caplog.text


#: Every solver, with and without the learned pre-image.
TARGETS = [({"solver": name, "fit_inverse_transform": learned}) for name in sorted(SOLVERS)
           for learned in (False, True)]


@pytest.mark.parametrize("target", TARGETS,
                         ids=lambda t: f"{t['solver']}-{t['fit_inverse_transform']}")
def test_a_refit_clears_every_attribute_of_earlier_fits(target, tmp_path):
    # Two earlier fits leave every optional fitted attribute between them: ICF's
    # residual_trace_ and the learned pre-image's dual_coef_, then fixed-size's
    # entropy_trace_ and row_statistics_.
    model = KernelPCA(2, random_state=0, solver=ICF(max_rank=20), fit_inverse_transform=True)
    assert {"residual_trace_", "dual_coef_"} <= set(vars(model.fit(X)))
    model.set_params(solver=FixedSize(n_landmarks=20, max_iter=2), fit_inverse_transform=False)
    left = set(vars(model.fit(X)))
    assert {"entropy_trace_", "row_statistics_"} <= left
    assert not {"residual_trace_", "dual_coef_"} & left
    model.set_params(**target).fit(X)
    fresh = KernelPCA(2, random_state=0, **target).fit(X)
    assert set(vars(model)) == set(vars(fresh))
    for name in ("row_statistics_", "entropy_trace_", "residual_trace_", "dual_coef_"):
        assert (getattr(model, name, None) is None) == (getattr(fresh, name, None) is None)
    dkpca.save(model, tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr")
    assert set(vars(loaded)) - set(vars(fresh)) <= {"eigenvectors_"}
    np.testing.assert_allclose(loaded.transform(X[:5]), fresh.transform(X[:5]), atol=1e-12)


def test_the_solver_layer_names_its_caller():
    Xd = dkpca.as_dask(X)
    with pytest.raises(ValueError, match="^FieldModel: n_landmarks=500 exceeds the 150"):
        run_solver(Nystrom(n_landmarks=500), RBF(gamma=0.5), Xd, ComponentRule(count=2),
                   random_state=0, block_bytes=2**20, cache_memory=None, basis_data=Xd,
                   lazy=False, owner="FieldModel")


def test_a_saved_model_keeps_its_options(tmp_path):
    model = KernelPCA(2, solver=Nystrom(n_landmarks=25, sampling="diagonal", method="extension"),
                      preimage=FixedPoint(max_iter=30), random_state=0).fit(X)
    dkpca.save(model, tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr")
    assert isinstance(loaded.solver, Nystrom) and isinstance(loaded.preimage, FixedPoint)
    assert loaded.solver.get_params() == model.solver.get_params()
    assert loaded.preimage.get_params() == model.preimage.get_params()
    refit = clone(loaded).fit(X)  # the options are enough to fit the same model again
    np.testing.assert_allclose(refit.eigenvalues_, model.eigenvalues_, rtol=1e-12)


def test_given_landmarks_are_saved_as_the_fitted_ones(tmp_path):
    model = KernelPCA(2, solver=Nystrom(landmarks=X[:15])).fit(X)
    dkpca.save(model, tmp_path / "m.zarr")
    loaded = dkpca.load(tmp_path / "m.zarr")
    assert loaded.solver.landmarks is None
    np.testing.assert_array_equal(loaded.landmarks_, X[:15])
    loaded.partial_fit(X[:30])  # continues from the fitted landmarks
    assert loaded.n_samples_seen_ == 180


def test_an_exact_object_fits_as_exact():
    model = KernelPCA(2, solver=Exact()).fit(X)
    reference = KernelPCA(2, solver="exact").fit(X)
    np.testing.assert_array_equal(model.eigenvalues_, reference.eigenvalues_)


FIXTURES = Path(__file__).parent / "fixtures"


def test_a_format_3_model_loads_with_its_options_gathered():
    # Written by dkpca at 68f3f5f (format 3): KernelPCA(3, gamma=0.4, solver="nystrom",
    # n_landmarks=20, sampling="diagonal", random_state=0, preimage="fixed_point",
    # preimage_max_iter=50), fitted on 60 rows.
    expected = np.load(FIXTURES / "kpca-nystrom-v3-expected.npz")
    loaded = dkpca.load(FIXTURES / "kpca-nystrom-v3.zarr")
    assert loaded.solver.get_params() == Nystrom(n_landmarks=20, sampling="diagonal").get_params()
    assert loaded.preimage.get_params() == FixedPoint(max_iter=50).get_params()
    # to rounding, not bit for bit: another numpy or BLAS rounds the same sums differently
    _assert_same_to_rounding(loaded.transform(expected["X"]), expected["scores"])
    _assert_same_to_rounding(loaded.denoise(expected["X"]), expected["denoised"])


def _assert_same_to_rounding(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-14 * np.abs(expected).max())


def _reseal(group, meta):
    """Write an edited description with its checksums recorded again, as a format-3 save did."""
    from dkpca._model_integrity import _seal

    _seal(group, {k: v for k, v in meta.items() if k != "checksums"},
          meta["checksums"]["arrays"])


@pytest.mark.parametrize("solver, legacy, expected", [
    ("randomized", {"tol": 1e-9, "max_iter": None, "cache_dtype": "float64"},
     Randomized(tol=1e-9, cache_dtype="float64")),
    ("sketch", {"sketch": "hashing", "sketch_dim": 60, "refine": True},
     Sketch(kind="hashing", dim=60, refine=True)),
    ("icf", {"icf_tol": 1e-2, "max_rank": 25, "tol": 1e-3}, ICF(tol=1e-2, max_rank=25)),
    ("fixed_size", {"n_landmarks": 20, "tol": 1e-3, "max_iter": 5, "sampling": "kmeans"},
     FixedSize(n_landmarks=20, tol=1e-3, max_iter=5)),
    ("nystrom", {"n_landmarks": None, "sampling": "uniform"}, "nystrom"),  # all defaults
])
def test_format_3_parameters_go_to_the_options_of_their_solver(solver, legacy, expected,
                                                                tmp_path):
    import zarr

    path = tmp_path / "old.zarr"
    dkpca.save(KernelPCA(2, solver=solver, random_state=0).fit(X), path)
    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs["dkpca"], format_version=3)
    meta["params"] = {**meta["params"], "solver": {"value": solver},
                      **{name: {"value": value} for name, value in legacy.items()}}
    _reseal(group, meta)
    loaded = dkpca.load(path)
    if isinstance(expected, str):
        assert loaded.solver == expected
    else:
        assert type(loaded.solver) is type(expected)
        assert loaded.solver.get_params() == expected.get_params()


def test_format_3_options_under_auto_are_dropped_with_a_warning(tmp_path, caplog):
    import zarr

    path = tmp_path / "old.zarr"
    dkpca.save(KernelPCA(2).fit(X), path)
    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs["dkpca"], format_version=3)
    meta["params"] = {**meta["params"], "tol": {"value": 1e-9}, "max_iter": {"value": None},
                      "preimage_max_iter": {"value": 300}}
    _reseal(group, meta)
    with caplog.at_level("WARNING", logger="dkpca.persistence"):
        loaded = dkpca.load(path)
    assert loaded.solver == "auto" and loaded.preimage == "auto"
    assert "solver='auto' and non-default randomized options (tol)" in caplog.text
    assert "preimage=" not in caplog.text and "fixed_point options" not in caplog.text


def test_the_options_fit_what_the_flat_parameters_fitted():
    # The fixture's outputs came from the flat parameters (format 3, dkpca at 68f3f5f): the
    # same options as objects fit the same model, to rounding.
    rng = np.random.default_rng(2026)
    data = rng.normal(size=(60, 3))
    model = KernelPCA(3, gamma=0.4, solver=Nystrom(n_landmarks=20, sampling="diagonal"),
                      random_state=0, preimage=FixedPoint(max_iter=50)).fit(data)
    expected = np.load(FIXTURES / "kpca-nystrom-v3-expected.npz")
    np.testing.assert_array_equal(expected["X"], rng.normal(size=(6, 3)))
    _assert_same_to_rounding(model.transform(expected["X"]), expected["scores"])
    _assert_same_to_rounding(model.denoise(expected["X"]), expected["denoised"])


def test_a_flat_parameter_of_the_old_api_says_where_it_went():
    with pytest.raises(TypeError, match=r"n_landmarks is now solver=Nystrom\(n_landmarks=\.\.\.\)"
                                        r" or FixedSize\(n_landmarks=\.\.\.\)"):
        KernelPCA(3, solver="nystrom", n_landmarks=50)
    with pytest.raises(TypeError, match=r"preimage_tol is now preimage=FixedPoint\(tol=\.\.\.\)"):
        KernelPCA(preimage_tol=1e-3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_landmark'"):
        KernelPCA(n_landmark=50)  # not a former parameter: Python's own message
