"""Write the intersphinx inventories of the projects dkpca's documentation links to.

CI builds the documentation without network access, so intersphinx cannot download the
projects' ``objects.inv``. This script writes equivalent inventories from the installed
packages: every public class and function of the modules listed below, at the URL each project's
documentation gives it (``numpy.linalg.eigh`` is ``reference/generated/numpy.linalg.eigh.html``
on numpy's site). Names the scheme misses simply stay unlinked. The files are committed in
``docs/_inventories/``; rerun after upgrading those packages (``make docs-inventories``).

Usage, from the repository root::

    .venv/bin/python docs/make_inventories.py
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

OUT = Path(__file__).resolve().parent / "_inventories"

Entry = tuple[str, str, str]  # (name, role, uri)


def _public(module_name: str) -> Iterator[tuple[str, object]]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name, None)
        if obj is not None:
            yield f"{module_name}.{name}", obj


def _role(obj: object) -> str | None:
    if inspect.isclass(obj):
        return "py:exception" if issubclass(obj, BaseException) else "py:class"
    if callable(obj):
        return "py:function"
    return None


def _objects(modules: list[str], uri: Callable[[str], str]) -> list[Entry]:
    entries = []
    for module in modules:
        entries.append((module, "py:module", uri(module)))
        for name, obj in _public(module):
            role = _role(obj)
            if role is not None:
                entries.append((name, role, uri(name)))
    return entries


def _methods(classes: list[str], uri: Callable[[str], str]) -> list[Entry]:
    entries = []
    for path in classes:
        module, _, name = path.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        for member in dir(cls):
            if not member.startswith("_") and callable(getattr(cls, member, None)):
                entries.append((f"{path}.{member}", "py:method", uri(f"{path}.{member}")))
    return entries


def python() -> list[Entry]:
    """List Python's builtins and the few standard library names our docstrings use."""
    entries = []
    for name in dir(builtins):
        obj = getattr(builtins, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            entries.append((name, "py:exception", f"library/exceptions.html#{name}"))
        elif inspect.isclass(obj):
            entries.append((name, "py:class", f"library/stdtypes.html#{name}"))
        elif callable(obj) and not name.startswith("_"):
            entries.append((name, "py:function", f"library/functions.html#{name}"))
    entries += [
        ("pathlib.Path", "py:class", "library/pathlib.html#pathlib.Path"),
        ("os.PathLike", "py:class", "library/os.html#os.PathLike"),
        ("logging", "py:module", "library/logging.html#module-logging"),
        ("threading.Lock", "py:class", "library/threading.html#threading.Lock"),
        # what numpydoc links its default type names to
        ("bltin-boolean-values", "std:label", "library/stdtypes.html#boolean-values"),
        ("sequence", "std:term", "glossary.html#term-sequence"),
        ("iterable", "std:term", "glossary.html#term-iterable"),
        ("generator", "std:term", "glossary.html#term-generator"),
        ("True", "py:data", "library/constants.html#True"),
        ("False", "py:data", "library/constants.html#False"),
        ("None", "py:data", "library/constants.html#None"),
        ("contextlib.contextmanager", "py:function",
         "library/contextlib.html#contextlib.contextmanager"),
        ("collections.namedtuple", "py:function",
         "library/collections.html#collections.namedtuple"),
    ]
    return entries


def numpy_entries() -> list[Entry]:
    """List numpy and numpy.linalg, ndarray's methods, and the random generators."""
    generated = lambda name: f"reference/generated/{name}.html#{name}"
    entries = _objects(["numpy", "numpy.linalg"], generated)
    entries += _methods(["numpy.ndarray"], generated)
    random = "reference/random/"
    entries += [
        ("array_like", "std:term", "glossary.html#term-array_like"),  # numpydoc's array-like
        ("arrays.scalars", "std:label", "reference/arrays.scalars.html#arrays-scalars"),
        ("numpy.inf", "py:data", "reference/constants.html#numpy.inf"),
        ("numpy.nan", "py:data", "reference/constants.html#numpy.nan"),
        ("numpy.random.Generator", "py:class", f"{random}generator.html#numpy.random.Generator"),
        ("numpy.random.default_rng", "py:function",
         f"{random}generator.html#numpy.random.default_rng"),
        ("numpy.random.RandomState", "py:class", f"{random}legacy.html#numpy.random.RandomState"),
        ("numpy.random.SeedSequence", "py:class",
         (f"{random}bit_generators/generated/numpy.random.SeedSequence.html"
         "#numpy.random.SeedSequence")),
    ]
    return entries


def scipy_entries() -> list[Entry]:
    """List scipy.linalg, sparse, stats and special."""
    def uri(name: str) -> str:
        parts = name.split(".")
        if len(parts) == 2:  # a module: scipy.linalg
            return f"reference/{parts[1]}.html#module-{name}"
        return f"reference/generated/{name}.html#{name}"

    return _objects(["scipy.linalg", "scipy.sparse", "scipy.stats", "scipy.special"], uri)


def dask_entries() -> list[Entry]:
    """List dask.array and the dask Array's methods."""
    generated = lambda name: f"generated/{name}.html#{name}"
    entries = _objects(["dask.array"], generated)
    entries += _methods(["dask.array.Array"], generated)
    return entries


def distributed_entries() -> list[Entry]:
    """List the distributed classes our guide names."""
    return [(f"distributed.{name}", "py:class", f"api.html#distributed.{name}")
            for name in ("Client", "LocalCluster", "Future", "Worker", "Nanny", "Scheduler")]


def xarray_entries() -> list[Entry]:
    """List xarray's top level, and the DataArray's and Dataset's methods."""
    generated = lambda name: f"generated/{name}.html#{name}"
    entries = _objects(["xarray"], generated)
    entries += _methods(["xarray.DataArray", "xarray.Dataset"], generated)
    return entries


def sklearn_entries() -> list[Entry]:
    """List the scikit-learn modules dkpca mirrors or builds on."""
    def uri(name: str) -> str:
        if name.count(".") == 1:  # a module: sklearn.decomposition
            return f"api/{name}.html#module-{name}"
        return f"modules/generated/{name}.html#{name}"

    return _objects(
        ["sklearn.base", "sklearn.cluster", "sklearn.decomposition", "sklearn.kernel_approximation",
         "sklearn.metrics.pairwise", "sklearn.preprocessing", "sklearn.pipeline"], uri)


PROJECTS: dict[str, tuple[str, Callable[[], list[Entry]]]] = {
    "python": ("Python", python),
    "numpy": ("NumPy", numpy_entries),
    "scipy": ("SciPy", scipy_entries),
    "dask": ("Dask", dask_entries),
    "distributed": ("Dask.distributed", distributed_entries),
    "xarray": ("xarray", xarray_entries),
    "sklearn": ("scikit-learn", sklearn_entries),
}


def write_inventory(path: Path, project: str, entries: list[Entry]) -> None:
    """Write a version-2 Sphinx inventory (a header, then zlib-compressed entry lines)."""
    lines = sorted({f"{name} {role} 1 {uri} -" for name, role, uri in entries})
    header = (f"# Sphinx inventory version 2\n# Project: {project}\n# Version: \n"
              "# The remainder of this file is compressed using zlib.\n")
    path.write_bytes(header.encode() + zlib.compress(("\n".join(lines) + "\n").encode()))


def main() -> None:
    """Write one inventory per project into ``docs/_inventories``."""
    OUT.mkdir(exist_ok=True)
    for key, (project, entries) in PROJECTS.items():
        found = entries()
        write_inventory(OUT / f"{key}.inv", project, found)
        print(f"{key}: {len(found)} objects")


if __name__ == "__main__":
    main()
