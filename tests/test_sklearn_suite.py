"""scikit-learn's own KernelPCA tests, run against :class:`dkpca.KernelPCA`.

The installed ``sklearn/decomposition/tests/test_kernel_pca.py`` is imported with
``sklearn.decomposition.KernelPCA`` replaced by a factory that maps scikit-learn's parameter
names to ours (nothing else), and its tests are collected here. Nothing of it is copied into
this repository. Tests that fail by a deliberate difference are strict ``xfail`` with the
reason (listed in the README too), so one that starts passing is reported. The terminal
summary prints the module's tally (see ``conftest.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sklearn
import sklearn.decomposition
from _sklearn_suites import suite_namespace

import dkpca
from dkpca.options import Randomized

SUITE = Path(sklearn.__file__).parent / "decomposition" / "tests" / "test_kernel_pca.py"

#: What scikit-learn's ``tol=0`` (machine precision) asks of ARPACK, for our Krylov solver.
ARPACK_TOL = 1e-10

#: scikit-learn's eigen_solver values and ours.
SOLVERS = {"auto": "auto", "dense": "exact", "arpack": "randomized", "randomized": "randomized"}

#: Tests (all parameters, or one ``name[param]``) that fail by design, with the reason;
#: ``conftest.py`` marks them strict xfail.
DELIBERATE = {
    "test_kernel_pca_precomputed_non_symmetric": (
        "a precomputed kernel must be symmetric: dkpca reads only the tiles on and above the "
        "diagonal (half the kernel work), so it refuses a non-symmetric matrix with a clear "
        "error instead of centring it"
    ),
    "test_precomputed_kernel_not_psd[randomized]": (
        "dkpca's randomized solver finds the largest eigenvalues, not the largest in modulus, "
        "so it fits the two positive components of this indefinite kernel correctly where "
        "scikit-learn's must refuse"
    ),
}

#: dkpca warns when remove_zero_eig=True leaves fewer columns than asked, and when the training
#: data do not vary at all (test_remove_zero_eig's rows are equal in float64); scikit-learn
#: does not: the suite's warnings-as-errors would turn that into a failure.
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*requested components have a positive eigenvalue:UserWarning",
    "ignore:.*has no positive eigenvalue:UserWarning",
    "ignore:.*the training data do not vary:UserWarning",
)


def mapped_kernel_pca(
    n_components: Any = None,
    *,
    kernel: Any = "linear",
    eigen_solver: str = "auto",
    tol: float = 0,
    max_iter: int | None = None,
    iterated_power: Any = "auto",
    n_jobs: Any = None,
    **params: Any,
) -> dkpca.KernelPCA:
    """``sklearn.decomposition.KernelPCA``'s signature, building a dkpca.KernelPCA.

    ``tol`` and ``max_iter`` go to the randomized solver's options (scikit-learn's arpack and
    randomized solvers); ``tol=0`` is scikit-learn's "solver default". ``iterated_power`` and
    ``n_jobs`` have no counterpart (dask sets the parallelism; the Krylov solver stops on
    ``tol``).
    """
    solver: Any = SOLVERS[eigen_solver]
    if solver == "randomized":
        default = Randomized()
        if not tol:  # arpack's machine precision, or our solver's default
            tol = ARPACK_TOL if eigen_solver == "arpack" else default.tol
        solver = Randomized(tol=tol, max_iter=max_iter or default.max_iter)
    return dkpca.KernelPCA(n_components, kernel=kernel, solver=solver, **params)


globals().update(suite_namespace(SUITE, "KernelPCA", mapped_kernel_pca, DELIBERATE))
