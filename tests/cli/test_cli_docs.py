"""The README, docs/cli.md and docs/rollout.md cannot drift: every command they show is run,
through the installed ``ctrlrun`` script and the venv's ``python``, and must print what they
show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctrlrun.cli import COMMANDS
from ctrlrun.cli.init import STARTER_POLICY
from support.docs import blocks, console_steps, run_page

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/cli.md", "docs/rollout.md"]


@pytest.mark.parametrize("name", PAGES)
def test_every_example_prints_what_the_page_shows(name, tmp_path):
    session = run_page((ROOT / name).read_text(), tmp_path, name)
    assert session.ids, "the page shows no generated id at all: is it still the walkthrough?"


def test_the_readme_shows_the_policy_init_writes_and_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    found = {(b.language, b.filename): b.text for b in blocks(readme)}
    assert found[("yaml", "ctrlrun.yaml")] == STARTER_POLICY
    bash = "".join(b.text for b in blocks(readme) if b.language == "bash")
    assert "make demo" in bash and "make test" in bash
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: .*\n\t\$\(BIN\)/ctrlrun demo$", makefile, re.MULTILINE)
    assert re.search(r"^test: check$", makefile, re.MULTILINE)


def test_the_walkthrough_answers_an_approval_from_the_shell_and_prints_receipts():
    commands = [
        command
        for block in blocks((ROOT / "README.md").read_text())
        if block.language == "console"
        for command, _ in console_steps(block.text)
    ]
    for needed in ("ctrlrun init", "python refund.py", "ctrlrun approve apr_", "ctrlrun receipts"):
        assert any(c.startswith(needed) for c in commands), needed
    assert any(c.startswith("ctrlrun resolve refund:pay_1001") for c in commands)


def test_every_command_is_shown_running_somewhere():
    shown = {
        command.split()[1]
        for name in PAGES
        for block in blocks((ROOT / name).read_text())
        if block.language == "console"
        for command, _ in console_steps(block.text)
        if command.startswith("ctrlrun ")
    }
    assert {command.name for command in COMMANDS} <= shown


LINKED = sorted({*PAGES, *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))})


@pytest.mark.parametrize("name", LINKED)
def test_local_links_resolve(name):
    page = ROOT / name
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
        assert (page.parent / target).exists(), f"{name} links to a missing {target}"
