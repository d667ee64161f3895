"""Architecture rules that are cheap to break and expensive to notice."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ctrlrun"


def test_import_ctrlrun_imports_no_optional_dependency():
    probe = (
        "import sys, ctrlrun; bad = sorted(m for m in sys.modules if m.split('.')[0] in"
        " {'psycopg', 'psycopg_binary', 'starlette', 'uvicorn', 'click', 'hypothesis'}"
        " or m in {'ctrlrun.cli', 'ctrlrun.postgres'}); print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


@pytest.mark.parametrize("path", sorted((SRC / "kernel").glob("*.py")), ids=lambda p: p.name)
def test_the_kernel_does_no_io(path):
    forbidden = {"sqlite3", "psycopg", "yaml", "click", "socket", "subprocess", "threading"}
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.col_offset == 0:
            imported.add(node.module.split(".")[0])  # module level: a lazy import is allowed
    assert not imported & forbidden


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_modules_stay_small(path):
    assert len(path.read_text().splitlines()) <= 600


def test_no_module_imports_a_private_name_from_another():
    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("ctrlrun")
            ):
                offenders += [
                    f"{path.name}: {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and a.name != "__version__"
                ]
    assert offenders == []
