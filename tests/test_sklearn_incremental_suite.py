"""scikit-learn's own IncrementalPCA tests, run against :class:`dkpca.PCA` (issue 33).

The installed ``sklearn/decomposition/tests/test_incremental_pca.py`` is imported with
``sklearn.decomposition.IncrementalPCA`` replaced by a factory that builds a plain
:class:`dkpca.PCA` (``PCA`` itself stays scikit-learn's, the reference the suite compares
with), and its tests are collected here. Nothing of it is copied into this repository. Tests
that fail by a deliberate difference are strict ``xfail`` with the reason (see
``DELIBERATE``), so one that starts passing is reported. The terminal summary prints the
tally of the scikit-learn suites (see ``conftest.py``).

The mapping: ``n_components`` and ``whiten`` are ours too. ``batch_size`` and ``copy`` have
no counterpart: :meth:`dkpca.PCA.fit` is already one bounded-memory pass over row chunks (the
suite never reads ``batch_size_``), :meth:`dkpca.PCA.partial_fit` takes whatever batches the
caller has, and dkpca never writes into ``X``. No adapter subclass is needed: the suite's
``fit`` and ``partial_fit`` calls reach dkpca's own. Where scikit-learn's IncrementalPCA is an
approximation of PCA (its tests compare to loose tolerances), dkpca's partial_fit keeps the
rows' exact count, mean and scatter, so it equals the fit on all rows seen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import sklearn
import sklearn.decomposition
from _sklearn_suites import suite_namespace

import dkpca

SUITE = Path(sklearn.__file__).parent / "decomposition" / "tests" / "test_incremental_pca.py"

#: Tests (all parameters, or one ``name[param]``) that fail by design, with the reason.
DIFFERENCES: dict[str, str] = {
    "test_incremental_pca_sparse": (
        "dkpca's partial_fit takes sparse batches (the covariance solver centres them "
        "implicitly, and their statistics merge exactly with dense ones), so the last check, "
        "that partial_fit raises TypeError on sparse input, fails; every check before it "
        "(fit on the sparse container, the variance ratio against PCA's, get_covariance "
        "times get_precision = identity to 1e-13) passes"
    ),
    "test_incremental_pca_validation": (
        "the same errors (ValueError) in dkpca's words: 'n_components=4 is larger than "
        "possible (at most 2 for this data)', the bound being min(rows seen, n_features) as "
        "in fit, not 'invalid for n_features=3, need more rows than columns for "
        "IncrementalPCA processing' nor 'must be less or equal to the batch number of "
        "samples 2 for the first partial_fit call'"
    ),
    "test_incremental_pca_set_params": (
        "dkpca keeps the rows' exact statistics (count, mean, d × d scatter), which do not "
        "depend on n_components, so after set_params(n_components=10 or 15) partial_fit "
        "returns the exact fit on all rows seen at the new width (see "
        "test_n_components_may_change_between_batches); scikit-learn's IncrementalPCA "
        "carries only its leading directions from batch to batch, so it must raise "
        "ValueError"
    ),
    "test_incremental_pca_feature_names_out": (
        "the estimator is dkpca.PCA, and get_feature_names_out prefixes the class name "
        "(scikit-learn's ClassNamePrefixFeaturesOutMixin): 'pca0', 'pca1', not "
        "'incrementalpca0', 'incrementalpca1'"
    ),
}

#: What ``conftest.py`` marks strict xfail, with the reason.
DELIBERATE: dict[str, str] = DIFFERENCES


def mapped_incremental_pca(
    n_components: Any = None,
    *,
    whiten: bool = False,
    copy: bool = True,
    batch_size: Any = None,
) -> dkpca.PCA:
    """``sklearn.decomposition.IncrementalPCA``'s signature, building a :class:`dkpca.PCA`."""
    return dkpca.PCA(n_components, whiten=whiten)


def test_n_components_may_change_between_batches() -> None:
    """What dkpca does where ``test_incremental_pca_set_params`` expects an error: the next
    batch gives the exact fit on all rows seen, at the new number of components."""
    rng = np.random.RandomState(1999)
    X, X2 = rng.randn(100, 20), rng.randn(100, 20)
    model = dkpca.PCA(20).fit(X)
    model.set_params(n_components=10).partial_fit(X2)
    whole = dkpca.PCA(10).fit(np.vstack([X, X2]))
    assert model.n_components_ == 10 and model.n_samples_seen_ == 200
    np.testing.assert_allclose(model.explained_variance_, whole.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(np.abs(model.components_ @ whole.components_.T), np.eye(10),
                               atol=1e-8)


globals().update(suite_namespace(SUITE, "IncrementalPCA", mapped_incremental_pca, DELIBERATE))
