"""The README and each component doc stay short enough for a newcomer to read as a reference.

Results tables and dated findings belong in reports/<area>/README.md; a doc that outgrows its reference role fails
here, where it is cheap to move the history out, rather than growing a screen at a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_CHARACTERS = 12_000
DOC_MAX_LINES = 450


def test_the_readme_stays_under_its_size() -> None:
    size = len((REPO / "README.md").read_text(encoding="utf-8"))
    assert size <= README_MAX_CHARACTERS, f"README.md has {size:,} characters, more than {README_MAX_CHARACTERS:,}"


@pytest.mark.parametrize("doc", sorted((REPO / "docs").glob("*.md")), ids=lambda p: p.name)
def test_each_doc_stays_a_reference(doc: Path) -> None:
    lines = len(doc.read_text(encoding="utf-8").splitlines())
    assert lines <= DOC_MAX_LINES, f"{doc.name} has {lines} lines, more than {DOC_MAX_LINES}: move history to reports/"
