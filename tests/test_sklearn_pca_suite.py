"""scikit-learn's own PCA tests, run against :class:`dkpca.PCA`.

The installed ``sklearn/decomposition/tests/test_pca.py`` is imported with
``sklearn.decomposition.PCA`` replaced by a factory that maps scikit-learn's parameter names
to ours (nothing else), and its tests are collected here. Nothing of it is copied into this
repository. Tests that fail by a deliberate difference are strict ``xfail`` with the reason
(see ``DELIBERATE``), so one that starts passing is reported. The terminal summary prints the
tally of the scikit-learn suites (see ``conftest.py``).

The mapping: ``svd_solver="full"`` and ``"auto"`` become ``solver="auto"`` (an exact solver,
``covariance`` or ``gram``, for data that fits the memory budget), ``"covariance_eigh"``
becomes ``"covariance"``, ``"arpack"`` and ``"randomized"`` become ``"randomized"`` (dkpca's
block Krylov solver, which stops on a tolerance instead of counting power iterations).
``copy``, ``iterated_power``, ``n_oversamples`` and ``power_iteration_normalizer`` have no
counterpart: dkpca never writes into ``X``, and its Krylov solver adapts its passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sklearn
import sklearn.decomposition
from _sklearn_suites import suite_namespace

import dkpca

SUITE = Path(sklearn.__file__).parent / "decomposition" / "tests" / "test_pca.py"

#: What scikit-learn's ``tol=0`` (machine precision) asks of ARPACK, for our Krylov solver.
ARPACK_TOL = 1e-10

#: scikit-learn's svd_solver values and ours.
SOLVERS = {
    "auto": "auto",
    "full": "auto",
    "covariance_eigh": "covariance",
    "arpack": "randomized",
    "randomized": "randomized",
}

#: Tests (all parameters, or one ``name[param]``) that fail by design, with the reason.
#: Before issue 32 (this harness on the float64 and float32 runs): 40 passed, 371 failed.
DIFFERENCES: dict[str, str] = {
    "test_pca_score3": (
        "n_components=0 is refused: dkpca keeps at least one component (scikit-learn's full "
        "solver allows an empty model, whose score is that of an isotropic Gaussian)"
    ),
    "test_pca_validation": (
        "the same errors (ValueError) in dkpca's words: n_components=0 is refused by the "
        "parameter check, which names the accepted values, not 'must be between 1 and "
        "min(n_samples, n_features)'; and the randomized solver that 'arpack' maps to has no "
        "'strictly less than min(n_samples, n_features)' limit (ARPACK's own)"
    ),
    "test_n_components_mle_error": (
        "the same ValueError in dkpca's words: it names dkpca's solver='randomized', not "
        "scikit-learn's svd_solver='arpack'/'randomized'"
    ),
    "test_sparse_pca_solver_error": (
        "dkpca takes sparse input with every solver these names map to: 'full' maps to auto, "
        "which picks the covariance solver for sparse data, and dkpca's randomized solver "
        "centres sparse data implicitly (scikit-learn's randomized one cannot); only gram "
        "and sketch refuse it (TypeError)"
    ),
    "test_n_components_none[data0-arpack-3]": (
        "ARPACK cannot return all min(n_samples, n_features) components, so scikit-learn "
        "keeps one fewer; dkpca's randomized solver (which 'arpack' maps to) returns them all"
    ),
    "test_n_components_none[data1-arpack-3]": (
        "ARPACK cannot return all min(n_samples, n_features) components, so scikit-learn "
        "keeps one fewer; dkpca's randomized solver (which 'arpack' maps to) returns them all"
    ),
    "test_pca_svd_solver_auto": (
        "reads scikit-learn's private _fit_svd_solver and its own auto rule (full, "
        "covariance_eigh, randomized by shape and n_components); dkpca's auto picks covariance "
        "or gram by shape, and randomized only when neither d × d nor n × n fits its memory "
        "budget (solver_ says which)"
    ),
}

#: What ``conftest.py`` marks strict xfail, with the reason.
DELIBERATE: dict[str, str] = DIFFERENCES


def mapped_pca(
    n_components: Any = None,
    *,
    copy: bool = True,
    whiten: bool = False,
    svd_solver: str = "auto",
    tol: float = 0.0,
    iterated_power: Any = "auto",
    n_oversamples: int = 10,
    power_iteration_normalizer: str = "auto",
    random_state: Any = None,
) -> dkpca.PCA:
    """``sklearn.decomposition.PCA``'s signature, building a :class:`dkpca.PCA`."""
    params: dict[str, Any] = {"solver": SOLVERS[svd_solver], "random_state": random_state}
    params["whiten"] = whiten
    if tol:
        params["tol"] = tol
    elif svd_solver in ("arpack", "randomized"):  # tol=0: ARPACK's machine precision
        params["tol"] = ARPACK_TOL
    return dkpca.PCA(n_components, **params)


@pytest.fixture(params=[np.float64, np.float32], ids=["float64", "float32"])
def global_dtype(request: pytest.FixtureRequest) -> type:
    """scikit-learn's dtype fixture, with its float32 runs switched on."""
    return request.param


globals().update(suite_namespace(SUITE, "PCA", mapped_pca, DELIBERATE))
