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
