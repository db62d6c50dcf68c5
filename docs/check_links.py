"""Check every link inside the built HTML that stays in the repository (no network).

Relative ``href`` and ``src`` targets must exist, and a ``#fragment`` must name an ``id`` in
its page. External links (``http:``, ``https:``, ``mailto:``) are not followed: CI has no
network. Exit status 1 lists the broken links.

Usage::

    .venv/bin/python docs/check_links.py docs/_build/html
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    """The links and the ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"])
        for key in ("href", "src"):
            if values.get(key):
                self.links.append(values[key])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """``page: link`` for every internal link whose target or fragment is missing."""
    # _static holds the theme's assets (its HTML files are templates, not pages).
    pages = {path: _parse(path) for path in site.rglob("*.html")
             if "_static" not in path.relative_to(site).parts}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external (or data:, mailto:, javascript:): not followed
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    return broken


def main(argv: list[str] | None = None) -> int:
    """Print the broken links of the site in ``argv[0]``; status 1 if there are any."""
    site = Path((argv or sys.argv[1:])[0]).resolve()
    broken = broken_links(site)
    for line in broken:
        print(line)
    print(f"{len(broken)} broken internal links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
