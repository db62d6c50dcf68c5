"""Sphinx configuration of dkpca's documentation (``make docs``: warnings are errors)."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

import dkpca

project = "dkpca"
author = "the dkpca developers"
copyright = "2026, the dkpca developers"
release = version = dkpca.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "dkpca_docs",  # docs/_ext: the CLI reference and the gallery pages, written at build time
]

exclude_patterns = ["_build", "_inventories", "run_examples.py", "make_inventories.py"]
templates_path = ["_templates"]
html_static_path = ["_static"]
html_theme = "pydata_sphinx_theme"
html_title = f"dkpca {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
# Pages without subpages: pydata's "Section Navigation" would be an empty box beside them.
html_sidebars = {page: [] for page in ("reproductions", "gallery/index", "cli", "benchmarks",
                                       "deployment")}
html_css_files = ["dkpca.css"]
html_last_updated_fmt = None

# The site works offline (CI has no network, and `make docs` promises a site to open from
# disk): MathJax 3 is served from _static/mathjax, copied there by dkpca_docs from the
# django-static-mathjax wheel of the docs extra, rather than loaded from a CDN.
mathjax_path = "mathjax/tex-mml-chtml.js"

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "inherited-members": False, "show-inheritance": False}
autodoc_typehints = "none"  # numpydoc's Parameters sections say it, once
numpydoc_show_class_members = False  # autosummary lists them; avoids duplicate stubs
numpydoc_class_members_toctree = False
# Types in Parameters sections link to their projects (only these names; other words stay text).
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"
numpydoc_xref_aliases = {
    "ndarray": "numpy.ndarray",
    "Generator": "numpy.random.Generator",
    "RandomState": "numpy.random.RandomState",
    "DataArray": "xarray.DataArray",
    "Dataset": "xarray.Dataset",
    "dask array": "dask.array.Array",
    "Client": "distributed.Client",
    "KernelPCA": "dkpca.KernelPCA",
    "PCA": "dkpca.PCA",
    "Kernel": "dkpca.kernels.Kernel",
    "KernelBasis": "dkpca.solvers.KernelBasis",
    "ComponentRule": "dkpca.solvers.ComponentRule",
    "Sketch": "dkpca.solvers.Sketch",
    "ModelSelection": "dkpca.ModelSelection",
    "Renormalizer": "dkpca.Renormalizer",
    "FieldModel": "dkpca.xarray.FieldModel",
}

# CI has no network: the inventories of the projects we link to are generated from the
# installed packages by their documented URL scheme (docs/make_inventories.py) and committed.
INVENTORIES = DOCS / "_inventories"
intersphinx_mapping = {
    name: (url, str(INVENTORIES / f"{name}.inv"))
    for name, url in {
        "python": "https://docs.python.org/3/",
        "numpy": "https://numpy.org/doc/stable/",
        "scipy": "https://docs.scipy.org/doc/scipy/",
        "dask": "https://docs.dask.org/en/stable/",
        "distributed": "https://distributed.dask.org/en/stable/",
        "xarray": "https://docs.xarray.dev/en/stable/",
        "sklearn": "https://scikit-learn.org/stable/",
    }.items()
}


def _skip_sklearn_plumbing(app, what, name, obj, skip, options):
    """Leave out scikit-learn's metadata-routing methods: they document sklearn, not dkpca."""
    if name == "get_metadata_routing" or (name.startswith("set_") and name.endswith("_request")):
        return True
    return None


def setup(app):
    """Register the member filter."""
    app.connect("autodoc-skip-member", _skip_sklearn_plumbing)
