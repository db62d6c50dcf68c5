"""dkpca: kernel PCA for data larger than memory, on Dask.

Examples
--------
>>> import numpy as np, dkpca
>>> X = np.random.default_rng(0).normal(size=(50, 3))
>>> dkpca.KernelPCA(n_components=2, kernel="rbf").fit(X).n_components_
2
"""

from importlib.metadata import PackageNotFoundError, version

from . import kernels, xarray  # xarray: registers the DataArray.dkpca accessor
from .decomposition import PCA, KernelPCA
from .io import as_dask, load, save

try:
    __version__ = version("dkpca")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = ["PCA", "KernelPCA", "__version__", "as_dask", "kernels", "load", "save", "xarray"]
