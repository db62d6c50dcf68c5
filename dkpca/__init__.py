"""dkpca: kernel PCA for data larger than memory, on Dask.

Examples
--------
>>> import numpy as np, dkpca
>>> X = np.random.default_rng(0).normal(size=(50, 3))
>>> dkpca.KernelPCA(n_components=2, kernel="rbf").fit(X).n_components_
2
"""

from typing import Any

from . import kernels, xarray  # xarray: registers the DataArray.dkpca accessor
from ._version import __version__
from .io import as_dask

_LAZY = {"KernelPCA": "dkpca.decomposition", "PCA": "dkpca.linear",
         "save": "dkpca.persistence", "load": "dkpca.persistence",
         "DamagedModelError": "dkpca.persistence",
         "select_model": "dkpca.selection", "ModelSelection": "dkpca.selection",
         "loo_projections": "dkpca.generalization", "Renormalizer": "dkpca.generalization",
         "independence_test": "dkpca.generalization"}


def __getattr__(name: str) -> Any:
    # The estimators import scikit-learn (~50 MB), and so does dkpca.persistence through them;
    # dask workers import dkpca for the kernels only, so these are loaded on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dkpca' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = ["PCA", "DamagedModelError", "KernelPCA", "ModelSelection", "Renormalizer",
           "__version__", "as_dask", "independence_test", "kernels", "load", "loo_projections",
           "save", "select_model", "xarray"]
