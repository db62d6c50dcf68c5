"""The documentation's promises that hold without building it (``make docs`` builds it)."""

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dkpca

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))
sys.path.insert(0, str(DOCS / "_ext"))

import check_links
import check_offline
import dkpca_docs


def _public_modules():
    yield dkpca
    for info in pkgutil.walk_packages(dkpca.__path__, "dkpca."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            yield importlib.import_module(info.name)


def _documented_objects():
    """The objects the API reference lists, resolved from its autosummary entries."""
    found, module = [], None
    for line in (DOCS / "api" / "index.rst").read_text().splitlines():
        if line.startswith(".. currentmodule::"):
            module = importlib.import_module(line.split("::")[1].strip())
        elif re.fullmatch(r"   [A-Za-z_][A-Za-z0-9_]*", line) and module is not None:
            found.append((f"{module.__name__}.{line.strip()}", getattr(module, line.strip())))
    return found


def test_every_public_class_and_function_is_in_the_api_reference():
    documented = {id(obj) for _, obj in _documented_objects()}
    missing = sorted(
        f"{module.__name__}.{name}"
        for module in _public_modules()
        for name in getattr(module, "__all__", [])
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and id(obj) not in documented
    )
    assert not missing, f"add to docs/api/index.rst: {missing}"


def test_the_api_reference_lists_each_object_once():
    entries = _documented_objects()
    counts = {}
    for name, obj in entries:
        counts.setdefault(id(obj), []).append(name)
    assert not [names for names in counts.values() if len(names) > 1]


def test_every_cli_command_is_in_the_reference():
    page = dkpca_docs.command_line_page()
    from dkpca.cli._arguments import build_parser

    (commands,) = (action for action in build_parser()._actions
                   if action.__class__.__name__ == "_SubParsersAction")
    assert set(commands.choices) >= {"select", "fit", "transform", "denoise", "fields", "info",
                                     "demo"}
    for name in commands.choices:
        assert f"\ndkpca {name}\n" in page
        assert f"usage: dkpca {name}" in page


@pytest.mark.parametrize("script", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.stem)
def test_gallery_has_figures_for_every_example(script):
    folder = DOCS / "_static" / "gallery" / script.stem
    run = json.loads((folder / "run.json").read_text())
    assert run["figures"], f"{script.name}: no figure"
    assert sorted(p.name for p in folder.glob("*.png")) == sorted(run["figures"])
    assert re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", run["commit"])
    assert run["command"].startswith(f".venv/bin/python examples/{script.name}")
    output = (folder / "output.txt").read_text()
    assert output.strip()
    assert not check_offline.TEMPORARY.search(output), "the run's scratch folder: say DIR"
    page = dkpca_docs.gallery_page(script)
    for figure in run["figures"]:
        assert f"/_static/gallery/{script.stem}/{figure}" in page


@pytest.mark.parametrize(
    ("paper", "results"),
    [
        ("LOO paper", ["Fig. 6", "Fig. 7", "Fig. 8", "§4.2"]),
        ("MDD paper", ["Table I", "Fig. 7"]),
        ("tutorial", ["Fig. 8", "Fig. 9"]),
    ],
)
def test_reproductions_page_covers_the_papers_results(paper, results):
    text = (DOCS / "reproductions.rst").read_text()
    for result in results:
        assert result in text, f"{paper}: {result}"
    for script in ("variance_inflation.py", "model_selection_toy.py", "denoising_toy_digits.py",
                   "approximations_digits.py"):
        assert f"examples/{script}" in text


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 120
    text = "\n".join(lines)
    assert "make run" in text and "make test" in text and "make docs" in text
    targets = re.findall(r"\]\(([^)#\s]+)\)", text)
    assert any(t.endswith(".png") for t in targets), "the front page shows a picture"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, f"README links to nothing: {missing}"


def test_link_checker_finds_missing_pages_and_anchors(tmp_path):
    (tmp_path / "a.html").write_text(
        '<h1 id="top">A</h1><a href="b.html#here">ok</a><a href="b.html#gone">anchor</a>'
        '<a href="missing.html">page</a><a href="https://example.org/x">external</a>'
        '<img src="img/p.png"><a href="#top">self</a>'
    )
    (tmp_path / "b.html").write_text('<p id="here">B</p>')
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "p.png").write_bytes(b"png")
    assert check_links.broken_links(tmp_path) == [
        "a.html: b.html#gone (no such anchor)",
        "a.html: missing.html",
    ]


def test_offline_checker_finds_what_a_page_loads_from_the_network(tmp_path):
    (tmp_path / "a.html").write_text(
        '<script src="https://cdn.example.org/mathjax/tex-mml-chtml.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.org/css">'
        '<link rel="preload" as="font" href="http://fonts.example.org/f.woff2">'
        '<img srcset="local.png 1x, https://img.example.org/b.png 2x">'
        '<div style="background: url(\'https://img.example.org/c.png\')"></div>'
        '<style>@import url("https://css.example.org/d.css");</style>'
        '<script>fetch("https://json.example.org/switcher.json")</script>'
        # none of these loads anything from the network:
        '<a href="https://example.org/x">a hyperlink</a>'
        '<link rel="canonical" href="https://example.org/a.html">'
        '<script src="_static/mathjax/tex-mml-chtml.js"></script>'
        '<img src="data:image/png;base64,iVBOR"><img src="img/p.png">'
        '<svg xmlns="http://www.w3.org/2000/svg"></svg>'
        '<script>const x = 1; // http is not loaded</script>'
    )
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "theme.css").write_text(
        "@font-face { src: url(https://fonts.example.org/e.woff2) }\n"
        "a { background: url(\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'\") }")
    (tmp_path / "_static" / "template.html").write_text('<script src="https://x.org/t.js">')
    assert check_offline.network_loads(tmp_path) == [
        "a.html: <script src>: https://cdn.example.org/mathjax/tex-mml-chtml.js",
        "a.html: <link rel='stylesheet'>: //fonts.example.org/css",
        "a.html: <link rel='preload'>: http://fonts.example.org/f.woff2",
        "a.html: <img srcset>: https://img.example.org/b.png",
        "a.html: <div style>: https://img.example.org/c.png",
        "a.html: <style>: https://css.example.org/d.css",
        "a.html: <script> text: https://json.example.org/switcher.json",
        "_static/theme.css: stylesheet: https://fonts.example.org/e.woff2",
    ]
    assert check_offline.main([str(tmp_path)]) == 1


def test_offline_checker_finds_temporary_paths(tmp_path):
    (tmp_path / "a.html").write_text(
        "<pre>figure: /tmp/tmp0xhsw8nr/out/fig.png\n"
        "file: file:///tmp/data.zarr\nexamples-output/tmp/x.png\nfigure: DIR/fig.png</pre>")
    (tmp_path / "_sources").mkdir()
    (tmp_path / "_sources" / "a.rst.txt").write_text("git clone . /tmp/repeat\n")
    assert check_offline.temporary_paths(tmp_path) == [
        "a.html:1: <pre>figure: /tmp/tmp0xhsw8nr/out/fig.png",
        "_sources/a.rst.txt:1: git clone . /tmp/repeat",
    ]
    (tmp_path / "a.html").write_text("<pre>figure: DIR/fig.png</pre>")
    (tmp_path / "_sources" / "a.rst.txt").write_text("clone=$(mktemp -d)\n")
    assert check_offline.main([str(tmp_path)]) == 0


def test_markdown_documents_the_readme_links_to_are_in_the_site():
    readme = (ROOT / "README.md").read_text()
    documents = {t for t in re.findall(r"\]\(([^)#\s]+\.md)\)", readme) if "://" not in t}
    assert {"BENCHMARKS.md", "deploy/README.md"} <= documents
    included = {match for page in DOCS.glob("*.md")
                for match in re.findall(r"\{include\} \.\./(\S+)", page.read_text())}
    assert documents <= included, f"render in the site (docs/*.md): {documents - included}"
    toctree = (DOCS / "index.rst").read_text()
    for page in DOCS.glob("*.md"):
        assert f"   {page.stem}\n" in toctree


# The gallery shows committed runs, so an example broken by an API change would go unnoticed
# until the next `make gallery`: run the quick ones here, and every one in the slow suite.
QUICK_EXAMPLES = {"incremental_eofs": [], "sst_eofs": ["--quick"], "xarray_gridded": []}
SLOW_EXAMPLES = {"approximations_digits": ["--repeats", "1"], "denoising_toy_digits": ["--quick"],
                 "model_selection_toy": ["--quick"], "variance_inflation": ["--quick"]}


def test_every_example_is_run_by_a_test():
    assert set(QUICK_EXAMPLES) | set(SLOW_EXAMPLES) == {
        p.stem for p in (ROOT / "examples").glob("*.py")}


def _run_example(name, arguments, tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / f"{name}.py"), "--out", str(tmp_path), *arguments],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert list(tmp_path.rglob("*.png")), f"{name} wrote no figure"


@pytest.mark.parametrize(("name", "arguments"), QUICK_EXAMPLES.items())
def test_quick_example_runs(name, arguments, tmp_path):
    _run_example(name, arguments, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "arguments"), SLOW_EXAMPLES.items())
def test_example_runs(name, arguments, tmp_path):
    _run_example(name, arguments, tmp_path)
