"""The installed version of dkpca, in a module of its own so that any module can import it.

``dkpca/__init__.py`` imports :mod:`dkpca.xarray` and :mod:`dkpca.io`; a module they import
that read ``dkpca.__version__`` would close an import cycle through the package.

Examples
--------
>>> from dkpca._version import __version__
>>> isinstance(__version__, str)
True
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__: str = version("dkpca")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"
