"""docs/integrations.md cannot drift: its examples run, and print what the page shows."""

from __future__ import annotations

from pathlib import Path

from support.docs import run_page

ROOT = Path(__file__).resolve().parents[2]


def test_every_example_prints_what_the_page_shows(tmp_path):
    run_page((ROOT / "docs/integrations.md").read_text(), tmp_path, "docs/integrations.md")
