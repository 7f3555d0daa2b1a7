"""The README's links into the documentation resolve.

``mkdocs build --strict`` (in ``make test``) checks every link and anchor of the
pages under ``docs/``; the README lies outside the site, so its links are
checked here: each relative link names a file that exists, and each anchor a
heading of that page (as the site's table of contents spells it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
LINKS = sorted(set(re.findall(r"\]\(([^)\s]+)\)", README)))


def _anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (outside code fences)."""
    anchors: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} (.*)", line)):
            anchors.add(slugify(heading.group(1).replace("`", ""), "-"))
    return anchors


@pytest.mark.parametrize("link", [link for link in LINKS if "://" not in link])
def test_readme_link_resolves(link: str) -> None:
    """A relative link of the README names a file, and its anchor a heading there."""
    path, _, anchor = link.partition("#")
    target = ROOT / path if path else ROOT / "README.md"
    assert target.is_file(), f"README links to {path}, which does not exist"
    if anchor:
        assert anchor in _anchors(target), f"{target.name} has no heading #{anchor}"
