"""The package's import graph: imports run one way, down the data path, and never in a cycle.

The graph is read from the source with :mod:`ast`, not by importing: every ``import dkpca...``,
``from dkpca... import`` and relative import counts, at module level or inside a function (a
function-level import only postpones a cycle to the first call). Imports under
``if TYPE_CHECKING:`` never run and do not count. ``from P import name`` is an edge to the
submodule ``P.name`` when there is one; for a name that a package re-exports lazily (the
``_LAZY`` table of ``dkpca/__init__.py``) it is an edge to the module that defines the name, and
otherwise an edge to ``P`` itself. That a submodule's import runs its parent packages'
``__init__`` first is not an edge (every package would otherwise be in a cycle with its
submodules).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dkpca"


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package is its ``__init__.py``)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree`` at any depth, less those under ``if TYPE_CHECKING``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def _lazy_names(module: str) -> dict[str, str]:
    """The ``_LAZY = {name: module}`` table of a package's ``__init__``, if it has one."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
            return {k.value: v.value for k, v in zip(node.value.keys, node.value.values,
                                                     strict=True)}
    return {}


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module that ``node`` (in ``module``) imports from."""
    if node.level == 0:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package mapped to the modules of the package it imports."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        edges = graph.setdefault(module, set())
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in MODULES)
                continue
            source = _absolute(module, node)
            if source not in MODULES:
                continue
            lazy = _lazy_names(source)
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:
                    edges.add(f"{source}.{alias.name}")
                else:
                    edges.add(lazy.get(alias.name, source))
        edges.discard(module)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph``: a shortest one through each module that is on any, as paths.

    Tarjan's algorithm finds the components; a breadth-first search inside each gives a shortest
    cycle through each of its modules, so every module on a cycle shows in at least one listed
    cycle (each cycle listed once, starting from its first module by name).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)

    cycles: set[tuple[str, ...]] = set()
    for component in components:
        for start in component:
            cycle = _shortest_cycle(graph, component, start)
            first = cycle.index(min(cycle))  # the same cycle found from each of its modules
            cycles.add((*cycle[first:], *cycle[:first], min(cycle)))
    return sorted(list(cycle) for cycle in cycles)


def _shortest_cycle(graph: dict[str, set[str]], component: set[str], start: str) -> list[str]:
    """A shortest cycle through ``start`` inside its strongly connected ``component``."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & component):
            if child == start:
                return paths[node]
            if child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"{start} is in no cycle of {sorted(component)}")  # pragma: no cover


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_relative_and_lazy_imports():
    graph = import_graph()
    assert "dkpca.io" in graph["dkpca.decomposition"]  # from .io import ... (relative)
    assert "dkpca._demo" in graph["dkpca.cli._commands"]  # inside a function
    assert _lazy_names("dkpca")["save"] == "dkpca.persistence"  # from dkpca import save: lazy
    assert "dkpca.decomposition" in graph["dkpca.xarray"]  # TYPE_CHECKING aside, in a function


def test_the_package_has_no_import_cycle():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith("dkpca.io")])
def test_io_does_not_import_the_estimators_or_persistence(module):
    above = ("dkpca.decomposition", "dkpca.linear", "dkpca.persistence", "dkpca.solvers",
             "dkpca.cli", "dkpca._estimator")
    imported = import_graph()[module]
    assert not {m for m in imported if m.startswith(above)}, imported


def test_nothing_in_the_library_imports_the_command_line():
    graph = import_graph()
    importers = {m for m, edges in graph.items() if not _in_cli(m)
                 and any(_in_cli(edge) for edge in edges)}
    assert importers == {"dkpca.__main__"}


def _in_cli(module: str) -> bool:
    return module == "dkpca.cli" or module.startswith("dkpca.cli.")


def test_import_dkpca_stays_light_and_save_load_are_loaded_on_use():
    """Dask workers import dkpca for the kernels: no scikit-learn until an estimator is used."""
    code = (
        "import sys, dkpca\n"
        "assert 'sklearn' not in sys.modules and 'dkpca.persistence' not in sys.modules\n"
        "from dkpca import save, load\n"
        "import dkpca.persistence as p\n"
        "assert save is dkpca.save is p.save and load is p.load and 'sklearn' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


def test_dkpca_io_no_longer_offers_save_and_load():
    import dkpca.io

    assert not {"save", "load", "FORMAT_VERSION"} & set(dkpca.io.__all__)
    assert not hasattr(dkpca.io, "save")


def test_the_command_lines_usage_error_is_the_shared_one():
    from dkpca._errors import UsageError
    from dkpca.cli import UsageError as from_cli

    assert from_cli is UsageError


def test_a_module_over_500_lines_says_why_in_its_docstring():
    unexplained = []
    for module, path in MODULES.items():
        source = path.read_text(encoding="utf-8")
        lines = source.count("\n")
        if lines > 500 and "500 lines" not in (ast.get_docstring(ast.parse(source)) or ""):
            unexplained.append(f"{module} ({lines} lines)")
    assert not unexplained, "split these by job, or say why not: " + ", ".join(unexplained)
