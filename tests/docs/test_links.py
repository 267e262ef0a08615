"""Every relative link in the README, docs/ and reports/*/README.md lands on a file (and heading) that exists.

Docs move (a reference in docs/, its history in reports/); a link left pointing at the old place is what a newcomer
meets first, so it fails here rather than on GitHub.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "reports").glob("*/README.md"))]


def links(text: str) -> list[str]:
    """Link targets outside code blocks and code spans."""
    text = FENCE.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [a or b for a, b in LINK.findall(text)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text()))}


def broken(path: Path) -> list[str]:
    bad = []
    for target in links(path.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no such heading)")
    return bad


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken(path) == [], f"{path.relative_to(REPO)}: broken links"


def test_the_check_sees_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading (`code`), here\n")
    doc = tmp_path / "doc.md"
    doc.write_text("[ok](there.md#a-heading-code-here) [gone](missing.md) [bad](there.md#nope)\n"
                   "`[in code](missing.md)`\n```\n[in a block](missing.md)\n```\n[web](https://example.com/x)\n")
    assert broken(doc) == ["missing.md (no such file)", "there.md#nope (no such heading)"]
