"""Check that the built HTML site works offline and shows no temporary path of its build.

A page must load nothing from the network: no ``src``, ``srcset``, ``poster`` or ``data`` of
any element, no ``<link>`` that fetches (stylesheet, icon, font preload), no ``url(...)`` or
``@import`` in a ``style`` attribute, a ``<style>`` element or a stylesheet of the site, and no
URL inside an inline ``<script>``, may point at ``http:``, ``https:`` or ``//``. Hyperlinks
(``<a href>``) to other sites are fine: they are followed only when the reader clicks them.

No page, nor its copy in ``_sources/``, may contain a path under ``/tmp/`` (or macOS's
``/var/folders/``, or this machine's temporary folder): such a path is a scratch folder of the
run that made it, such as an example's ``--out`` folder, and means nothing to a reader. A
``file:///tmp/...`` URL is not a path the build leaked but an address in an example, so it is
left alone. Exit status 1 lists every finding.

Usage::

    .venv/bin/python docs/check_offline.py docs/_build/html
"""

from __future__ import annotations

import re
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

# ``rel`` values of a <link> that name a related page rather than fetch a resource.
NON_FETCHING_RELS = {"alternate", "author", "canonical", "copyright", "help", "index", "license",
                     "me", "next", "prev", "search", "first", "last", "up"}
# Attributes that make the browser fetch their URL, whatever the element.
FETCHING_ATTRIBUTES = ("src", "srcset", "poster", "data", "background", "xlink:href")
SCRIPT_URL = re.compile(r"""https?://[^\s"'(),]+""", re.IGNORECASE)
CSS_FETCHES = re.compile(
    r"""url\(\s*["']?\s*((?:https?:)?//[^)"'\s]+)"""
    r"""|@import\s+(?:url\()?\s*["']((?:https?:)?//[^"')]+)""",
    re.IGNORECASE)


def _temporary_pattern() -> re.Pattern[str]:
    folders = {"/tmp/", "/var/folders/", tempfile.gettempdir().rstrip("/") + "/"}
    # An absolute path only: not preceded by a word character or a slash (``file:///tmp/``,
    # ``data/tmp/``).
    return re.compile("|".join(rf"(?<![\w/]){re.escape(folder)}" for folder in sorted(folders)))


TEMPORARY = _temporary_pattern()


def _is_external(url: str) -> bool:
    return bool(re.match(r"\s*(?:https?:)?//", url, re.IGNORECASE))


class _Loads(HTMLParser):
    """The network resources one HTML page loads, as ``what: url`` lines."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self._inside: str | None = None  # "script" or "style" whose text is being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {key: value or "" for key, value in attrs}
        for key in FETCHING_ATTRIBUTES:
            value = values.get(key, "")
            urls = ([part.split()[0] for part in value.split(",") if part.strip()]
                    if key == "srcset" else [value])
            self.loads += [f"<{tag} {key}>: {url}" for url in urls if _is_external(url)]
        if tag == "link" and _is_external(values.get("href", "")):
            rels = set(values.get("rel", "").lower().split())
            if not rels or rels - NON_FETCHING_RELS:
                self.loads.append(f"<link rel={values.get('rel', '')!r}>: {values['href']}")
        if tag in ("image", "use", "feimage") and _is_external(values.get("href", "")):
            self.loads.append(f"<{tag} href>: {values['href']}")
        self.loads += [f"<{tag} style>: {url}" for url in css_fetches(values.get("style", ""))]
        if (tag == "script" and "src" not in values) or tag == "style":
            self._inside = tag

    def handle_endtag(self, tag: str) -> None:
        if tag == self._inside:
            self._inside = None

    def handle_data(self, data: str) -> None:
        if self._inside == "style":
            self.loads += [f"<style>: {url}" for url in css_fetches(data)]
        elif self._inside == "script":
            self.loads += [f"<script> text: {url}" for url in SCRIPT_URL.findall(data)]


def css_fetches(css: str) -> list[str]:
    """Return the network URLs that a stylesheet's ``url(...)`` and ``@import`` fetch."""
    return [first or second for first, second in CSS_FETCHES.findall(css)]


def _pages(site: Path) -> list[Path]:
    # _static holds the theme's assets (its HTML files are templates, not pages).
    return sorted(path for path in site.rglob("*.html")
                  if "_static" not in path.relative_to(site).parts)


def network_loads(site: Path) -> list[str]:
    """``file: what: url`` for every resource a page or stylesheet would fetch from the network."""
    found = []
    for path in _pages(site):
        parser = _Loads()
        parser.feed(path.read_text(errors="replace"))
        found += [f"{path.relative_to(site)}: {load}" for load in parser.loads]
    for path in sorted(site.rglob("*.css")):
        found += [f"{path.relative_to(site)}: stylesheet: {url}"
                  for url in css_fetches(path.read_text(errors="replace"))]
    return found


def temporary_paths(site: Path) -> list[str]:
    """``file:line: text`` for every temporary path in a page or its source in ``_sources``."""
    sources = site / "_sources"
    files = _pages(site) + (sorted(p for p in sources.rglob("*") if p.is_file())
                            if sources.is_dir() else [])
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if TEMPORARY.search(line):
                found.append(f"{path.relative_to(site)}:{number}: {line.strip()[:160]}")
    return found


def main(argv: list[str] | None = None) -> int:
    """Print what the site in ``argv[0]`` loads from the network and its temporary paths."""
    site = Path((argv or sys.argv[1:])[0]).resolve()
    loads, temporary = network_loads(site), temporary_paths(site)
    for line in loads + temporary:
        print(line)
    print(f"{len(loads)} resources loaded from the network, {len(temporary)} temporary paths")
    return 1 if loads or temporary else 0


if __name__ == "__main__":
    sys.exit(main())
