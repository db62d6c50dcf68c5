"""Pages written at build time, and the MathJax the site serves itself.

The command line reference is the ``--help`` of every ``dkpca`` subcommand, taken from the
parser itself, so it cannot fall behind. Each gallery page shows an example's docstring, the
figures and printed output of its last full run (committed in ``docs/_static/gallery/<script>/``
by ``make gallery``, with the command and commit in ``run.json``) and its source.

The site loads nothing from the network (``docs/check_offline.py`` checks it): MathJax 3 comes
from the ``django-static-mathjax`` wheel of the ``docs`` extra (MathJax's files only, despite
the name) and is copied into ``_static/mathjax/``, where ``conf.py``'s ``mathjax_path`` points.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
GALLERY_FILES = DOCS / "_static" / "gallery"


def _title(text: str, underline: str) -> str:
    return f"{text}\n{underline * len(text)}\n"


def _write_if_changed(path: Path, text: str) -> None:
    """Rewrite only on change, so Sphinx's incremental build keeps its cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


# A --help block; docs/_static/dkpca.css wraps its lines on a screen narrower than 80 columns.
HELP_BLOCK = ".. code-block:: text\n   :class: dkpca-help\n"


def command_line_page() -> str:
    """Return the ``--help`` of ``dkpca`` and of each subcommand, in the parser's order."""
    import argparse

    from dkpca.cli._arguments import build_parser

    os.environ["COLUMNS"] = "80"  # argparse wraps to the terminal's width: a common one
    parser = build_parser()
    parser.prog = "dkpca"
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = [
        ".. This page is written by docs/_ext/dkpca_docs.py from dkpca's argument parser.\n",
        _title("Command line reference", "="),
        ("Every subcommand of ``dkpca``, with its ``--help``. The :doc:`guide/command-line` "
        "page shows them at work.\n"),
        HELP_BLOCK,
        _indent(parser.format_help()),
    ]
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    for name, sub in commands.choices.items():
        sub.prog = f"dkpca {name}"
        parts += [_title(f"dkpca {name}", "-"), f"{helps.get(name, '')}\n".capitalize(),
                  HELP_BLOCK, _indent(sub.format_help())]
    return "\n".join(parts)


def _indent(text: str) -> str:
    return "\n".join(f"   {line}" if line else "" for line in text.splitlines()) + "\n"


def _docstring(script: Path) -> tuple[str, str]:
    doc = ast.get_docstring(ast.parse(script.read_text())) or script.stem
    first, _, rest = doc.partition("\n")
    return first.strip().rstrip("."), rest.strip()


def gallery_page(script: Path) -> str:
    """One example: what it shows, its figures, its printed output, its source."""
    title, body = _docstring(script)
    files = GALLERY_FILES / script.stem
    run = json.loads((files / "run.json").read_text())
    parts = [
        f".. This page is written by docs/_ext/dkpca_docs.py from examples/{script.name}.\n",
        _title(title, "="),
        body + "\n",
        _title("Figures", "-"),
        (f"From ``{run['command']}`` at commit ``{run['commit']}`` on {run['date']} "
        f"({run['seconds']:.0f} s on 2 cores); ``make gallery`` regenerates them.\n"),
    ]
    for figure in run["figures"]:
        parts.append(f".. figure:: /_static/gallery/{script.stem}/{figure}\n"
                     f"   :alt: {script.stem}: {figure}\n\n   ``{figure}``\n")
    parts += [_title("Output", "-"),
              (f".. literalinclude:: /_static/gallery/{script.stem}/output.txt\n"
              "   :language: text\n"),
              _title("Source", "-"),
              f".. literalinclude:: ../../examples/{script.name}\n   :language: python\n"]
    return "\n".join(parts)


def gallery_index(scripts: list[Path]) -> str:
    """Thumbnails of every example's first figure, each linked to its page."""
    parts = [".. This page is written by docs/_ext/dkpca_docs.py from examples/.\n",
             _title("Gallery", "="),
             ("The scripts in ``examples/``, with the figures and printed output of their last "
             "full run. Each page says which commit made them; the :doc:`../reproductions` page "
             "sets their numbers beside the papers'.\n")]
    for script in scripts:
        run = json.loads((GALLERY_FILES / script.stem / "run.json").read_text())
        parts.append(f".. figure:: /_static/gallery/{script.stem}/{run['figures'][0]}\n"
                     f"   :target: {script.stem}.html\n   :width: 48%\n"
                     f"   :alt: {script.stem}: {run['figures'][0]}\n\n"
                     f"   :doc:`{script.stem}` (``examples/{script.name}``)\n")
    parts.append(".. toctree::\n   :hidden:\n\n"
                 + "".join(f"   {script.stem}\n" for script in scripts))
    return "\n".join(parts)


def _check_gallery_runs(scripts: list[Path]) -> None:
    """Name every example whose committed run is missing, with the command that makes it."""
    missing = [s.stem for s in scripts if not (GALLERY_FILES / s.stem / "run.json").is_file()]
    if missing:
        raise FileNotFoundError(
            f"no gallery run committed for {', '.join(missing)}: run "
            f"`.venv/bin/python docs/run_examples.py {' '.join(missing)}` and commit "
            "docs/_static/gallery/")


def write_pages(app: Any) -> None:
    """``builder-inited``: write the generated pages into the source tree."""
    _write_if_changed(DOCS / "cli.rst", command_line_page())
    scripts = sorted((ROOT / "examples").glob("*.py"))
    _check_gallery_runs(scripts)
    for script in scripts:
        _write_if_changed(DOCS / "gallery" / f"{script.stem}.rst", gallery_page(script))
    _write_if_changed(DOCS / "gallery" / "index.rst", gallery_index(scripts))


# What the browser needs of MathJax's ``es5/`` build for the ``tex-mml-chtml`` component: the
# component, the TeX extensions it autoloads, the CommonHTML fonts, and the menu's optional
# accessibility parts (8 MB); the other combined components and the SVG output stay out.
MATHJAX_COMPONENT = "tex-mml-chtml.js"
MATHJAX_PARTS = ("a11y", "input", "output/chtml", "output/chtml.js", "sre", "ui")


def mathjax_files() -> Path:
    """Return the folder of MathJax 3's browser build (``es5/``) that the docs extra installs."""
    spec = importlib.util.find_spec("mathjax")
    origin = Path(spec.origin).parent if spec and spec.origin else None
    es5 = origin / "static" / "mathjax" / "es5" if origin else None
    if es5 is None or not (es5 / MATHJAX_COMPONENT).is_file():
        raise FileNotFoundError(
            "MathJax's files are missing (the docs serve them, not a CDN): "
            "`.venv/bin/python -m pip install -e '.[docs]'` installs django-static-mathjax")
    return es5


def copy_mathjax(app: Any, exception: BaseException | None) -> None:
    """``build-finished``: copy MathJax into the HTML site's ``_static/mathjax/``."""
    if exception is not None or app.builder.format != "html":
        return
    es5 = mathjax_files()
    target = Path(app.outdir) / "_static" / "mathjax"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(es5 / MATHJAX_COMPONENT, target / MATHJAX_COMPONENT)
    shutil.copy2(es5.parent / "LICENSE", target / "LICENSE")
    for part in MATHJAX_PARTS:
        if (es5 / part).is_dir():
            shutil.copytree(es5 / part, target / part, dirs_exist_ok=True)
        else:
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(es5 / part, target / part)


def setup(app: Any) -> dict[str, Any]:
    """Register the page writer and the MathJax copy."""
    mathjax_files()  # fail at the start of a build, not after it
    app.connect("builder-inited", write_pages)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True}
