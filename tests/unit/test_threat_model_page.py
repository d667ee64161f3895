"""docs/threat-model.md cites a test for every "cannot": each cited file exists and each cited
test is defined in it, so a row cannot outlive the test that proves it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "threat-model.md"
CITED = re.compile(r"`(tests/[\w/]+\.py)((?:::\w+)?)`|`::(\w+)`")


def citations() -> list[tuple[str, str | None]]:
    """``(file, test name or None)`` for every citation; ``::name`` alone refers to the file
    cited last on the same row."""
    found: list[tuple[str, str | None]] = []
    for row in PAGE.read_text().splitlines():
        last = None
        for match in CITED.finditer(row):
            path, name, bare = match.groups()
            if path:
                last = path
                found.append((path, name[2:] if name else None))
            else:
                assert last is not None, f"{bare} cited with no file before it: {row}"
                found.append((last, bare))
    return found


def test_every_cited_test_exists():
    cited = citations()
    assert len(cited) > 40
    for path, name in cited:
        source = ROOT / path
        assert source.is_file(), f"docs/threat-model.md cites a missing {path}"
        if name is not None:
            text = source.read_text()
            assert re.search(rf"def {name}\b", text), f"{path} defines no {name}"


def test_approvals_page_points_here():
    assert "threat-model.md" in (ROOT / "docs" / "approvals.md").read_text()
