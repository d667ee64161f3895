"""Installing ctrlrun as the README says: from the checkout or from a wheel ``make dist``
builds, never by name from a package index (that name there is another project); and
``make demo`` installs the package alone."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from support.docs import INSTALL_LINES, blocks

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = re.compile(
    r"\b(?:pip3?|pipx|uv(?:\s+pip)?|poetry|pdm|conda)\s+(?:install|add)\b[^\n`]*?"
    r"(?<![\w/.-])['\"]?ctrlrun(?![\w/.-])",
    re.IGNORECASE,
)


def texts() -> dict[str, str]:
    """Every page and every source file a user may read an install line in."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "src").rglob("*.py")]
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in files}


def test_nothing_tells_users_to_install_ctrlrun_by_name_from_an_index():
    found = {
        (name, match.group(0)) for name, text in texts().items() for match in BY_NAME.finditer(text)
    }
    assert found == set()


@pytest.mark.parametrize(
    "line",
    [
        "pip install ctrlrun",
        "pip install 'ctrlrun[postgres]'",
        'pip install "ctrlrun>=0.1"',
        "pip install -U ctrlrun",
        "uv add ctrlrun",
        "uv pip install ctrlrun[server]",
        "pipx install ctrlrun",
    ],
)
def test_the_check_catches_every_spelling(line):
    assert BY_NAME.search(f"run `{line}` first")


@pytest.mark.parametrize(
    "line",
    [
        "pip install /path/to/ctrlrun",
        "pip install '/path/to/ctrlrun[postgres]'",
        "pip install dist/ctrlrun-0.1.0-py3-none-any.whl",
        "pip install -e .",
        "pip install '.[server]'",
    ],
)
def test_the_check_leaves_installs_from_a_checkout_or_a_wheel_alone(line):
    assert not BY_NAME.search(line)


def test_the_readme_shows_the_install_lines_that_are_tested():
    readme = (ROOT / "README.md").read_text()
    shown = {
        line.split("#")[0].strip()
        for block in blocks(readme)
        if block.language == "bash"
        for line in block.text.splitlines()
    }
    assert set(INSTALL_LINES) <= shown
    assert "## Use it in your project" in readme


def clean_env() -> dict[str, str]:
    """This environment without what an enclosing ``make`` passes down (``make test``)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}


def test_make_demo_installs_the_package_alone(tmp_path):
    planned = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo", f"VENV={tmp_path}/venv"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    installs = [line for line in planned.splitlines() if "pip install" in line]
    assert installs[-1].endswith("pip install --quiet -e ."), installs
    assert "[dev]" not in planned and planned.splitlines()[-1].endswith("ctrlrun demo")


def run(command: str, cwd: Path, venv: Path) -> str:
    """``command`` in a shell whose ``pip``/``python``/``ctrlrun`` are ``venv``'s."""
    env = {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd)}
    done = subprocess.run(
        ["sh", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_a_built_wheel_and_the_checkout_install_as_the_readme_says(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        ["make", "dist", f"DIST={dist}"],
        cwd=ROOT,
        env=clean_env(),
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel, sdist = dist / "ctrlrun-0.1.0-py3-none-any.whl", dist / "ctrlrun-0.1.0.tar.gz"
    assert wheel.is_file() and sdist.is_file()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    project = tmp_path / "project"
    project.mkdir()
    (project / "dist").symlink_to(dist)
    run("pip install --quiet dist/ctrlrun-0.1.0-py3-none-any.whl", project, venv)
    assert "All five held" in run("ctrlrun demo", project, venv)
    checkout = "pip install --quiet " + shlex.quote(f"{ROOT}[postgres]")
    run(checkout, project, venv)
    run("python -c 'import ctrlrun.postgres, psycopg, ctrlrun.store.sql'", project, venv)
