"""Pages written at build time: the command line reference and the gallery of ``examples/``.

The command line reference is the ``--help`` of every ``dkpca`` subcommand, taken from the
parser itself, so it cannot fall behind. Each gallery page shows an example's docstring, the
figures and printed output of its last full run (committed in ``docs/_static/gallery/<script>/``
by ``make gallery``, with the command and commit in ``run.json``) and its source.
"""

from __future__ import annotations

import ast
import json
import os
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


def command_line_page() -> str:
    """Return the ``--help`` of ``dkpca`` and of each subcommand, in the parser's order."""
    import argparse

    from dkpca.cli import _parser

    os.environ["COLUMNS"] = "92"  # argparse wraps to the terminal's width
    parser = _parser()
    parser.prog = "dkpca"
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = [
        ".. This page is written by docs/_ext/dkpca_docs.py from dkpca's argument parser.\n",
        _title("Command line reference", "="),
        ("Every subcommand of ``dkpca``, with its ``--help``. The :doc:`guide/command-line` "
        "page shows them at work.\n"),
        ".. code-block:: text\n",
        _indent(parser.format_help()),
    ]
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    for name, sub in commands.choices.items():
        sub.prog = f"dkpca {name}"
        parts += [_title(f"dkpca {name}", "-"), f"{helps.get(name, '')}\n".capitalize(),
                  ".. code-block:: text\n", _indent(sub.format_help())]
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
        title, _ = _docstring(script)
        run = json.loads((GALLERY_FILES / script.stem / "run.json").read_text())
        parts.append(f".. figure:: /_static/gallery/{script.stem}/{run['figures'][0]}\n"
                     f"   :target: {script.stem}.html\n   :width: 48%\n"
                     f"   :alt: {title}\n\n   :doc:`{script.stem}`: {title}\n")
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


def setup(app: Any) -> dict[str, Any]:
    """Register the page writer."""
    app.connect("builder-inited", write_pages)
    return {"parallel_read_safe": True}
