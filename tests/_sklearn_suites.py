"""Loading one of scikit-learn's own test files with an estimator replaced by ours.

Shared by ``test_sklearn_suite.py`` (``test_kernel_pca.py`` on ``dkpca.KernelPCA``) and
``test_sklearn_pca_suite.py`` (``test_pca.py`` on ``dkpca.PCA``). Nothing is copied: the
installed file is imported while ``sklearn.decomposition.<name>`` is our factory.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sklearn.decomposition


def load_suite(path: Path, name: str, factory: Callable[..., Any]) -> ModuleType:
    """Import the test file ``path`` with ``sklearn.decomposition.<name>`` set to ``factory``."""
    spec = importlib.util.spec_from_file_location(f"sklearn_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    original = getattr(sklearn.decomposition, name)
    setattr(sklearn.decomposition, name, factory)  # read at the module's import only
    try:
        spec.loader.exec_module(module)
    finally:
        setattr(sklearn.decomposition, name, original)
    return module


def suite_tests(module: ModuleType) -> dict[str, Any]:
    """The module's tests, marked ``sklearn_suite`` (``conftest.py`` tallies and xfails them)."""
    return {name: pytest.mark.sklearn_suite(function)
            for name, function in vars(module).items()
            if name.startswith("test_") and callable(function)}


def suite_namespace(path: Path, name: str, factory: Callable[..., Any],
                    deliberate: dict[str, str]) -> dict[str, Any]:
    """What a harness module holds: scikit-learn's tests from ``path`` (``name`` mapped to
    ``factory``), scikit-learn's seed fixture, and a test that the suite was found.

    A harness ends with ``globals().update(suite_namespace(...))``.
    """
    def load() -> ModuleType:
        return load_suite(path, name, factory)

    @pytest.fixture
    def global_random_seed() -> int:
        """scikit-learn's default global seed (its conftest is not loaded here)."""
        return 42

    def test_suite_was_found() -> None:
        """The installed scikit-learn ships the module, and every deliberate difference names
        a test in it (a renamed test would otherwise drop out unnoticed)."""
        assert path.exists()
        assert {test.split("[")[0] for test in deliberate} <= set(vars(load()))

    return {**suite_tests(load()), "global_random_seed": global_random_seed,
            "test_suite_was_found": test_suite_was_found}
