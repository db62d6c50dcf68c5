"""Regenerate the gallery: run every script in ``examples/`` and keep its figures and output.

Each example runs at its full default settings (the numbers on the reproductions page come from
these runs) and writes into ``docs/_static/gallery/<script>/``: its PNG figures, ``output.txt``
(what it printed) and ``run.json`` (the command, the commit, the date and the run time). The
documentation build only reads those committed files, so it takes seconds and needs no data.

Usage, from the repository root (``make gallery``; about 25 minutes on 2 cores)::

    .venv/bin/python docs/run_examples.py                  # every example
    .venv/bin/python docs/run_examples.py variance_inflation xarray_gridded
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
GALLERY = ROOT / "docs" / "_static" / "gallery"


def _commit() -> str:
    """Return the checked-out commit, with ``+dirty`` when tracked files differ from it."""
    return subprocess.run(
        ["git", "describe", "--always", "--dirty=+dirty", "--exclude=*"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()


def run_example(script: Path) -> dict[str, object]:
    """Run one example into a scratch folder, then replace its gallery folder with the result."""
    destination = GALLERY / script.stem
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "out"
        command = [sys.executable, str(script.relative_to(ROOT)), "--out", str(out)]
        start = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            raise SystemExit(f"{script.name} failed with status {result.returncode}")
        figures = sorted(out.rglob("*.png"))
        if not figures:
            raise SystemExit(f"{script.name} wrote no figure")
        shutil.rmtree(destination, ignore_errors=True)
        destination.mkdir(parents=True)
        for figure in figures:
            shutil.copy2(figure, destination / figure.name)
    # The output names the scratch folder, which the next run deletes: say DIR, as the command.
    (destination / "output.txt").write_text(result.stdout.replace(str(out.resolve()), "DIR")
                                           .replace(str(out), "DIR"))
    record = {
        "command": f".venv/bin/python examples/{script.name} --out DIR",
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
        "seconds": round(seconds, 1),
        "figures": [figure.name for figure in figures],
    }
    (destination / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    """Run the named examples (all by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="script stems; all when left out")
    args = parser.parse_args(argv)
    scripts = sorted(EXAMPLES.glob("*.py"))
    if args.names:
        scripts = [s for s in scripts if s.stem in args.names]
    for script in scripts:
        record = run_example(script)
        print(f"{script.stem}: {len(record['figures'])} figures in {record['seconds']} s",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
