"""Architecture rules that are cheap to break and expensive to notice."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ctrlrun"


def run_probe(code: str) -> str:
    """What ``code`` prints when run in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def modules_loaded_by(imports: str, packages: set[str], modules: set[str]) -> str:
    """The modules among ``packages`` (top-level names) and ``modules`` that ``import
    <imports>`` loads, comma-separated."""
    return run_probe(
        f"import sys, {imports}; bad = sorted(m for m in sys.modules if m.split('.')[0] in"
        f" {packages!r} or m in {modules!r}); print(','.join(bad))"
    )


def test_import_ctrlrun_imports_no_optional_dependency():
    optional = {"psycopg", "psycopg_binary", "starlette", "uvicorn", "click", "hypothesis"}
    optional |= {"anyio", "asyncio"}  # the async driver loads on the first async call
    optional |= {"cryptography", "standardwebhooks", "opentelemetry", "pydantic_ai"}
    optional |= {"langgraph", "langchain", "langchain_core", "agents", "openai", "mcp"}
    ours = {"ctrlrun.cli", "ctrlrun.postgres", "ctrlrun.integrations.otel"}
    assert modules_loaded_by("ctrlrun", optional, ours) == ""


def test_the_documents_client_side_imports_no_server_dependency():
    # a session runs in an agent or an editor: urllib and the standard library only
    imports = "ctrlrun.documents, ctrlrun.documents.session, ctrlrun.documents.client"
    server = {"starlette", "uvicorn", "anyio", "h11", "psycopg", "click"}
    assert modules_loaded_by(imports, server, {"ctrlrun.documents.server"}) == ""


def test_the_server_without_its_extra_raises_missing_dependency():
    probe = (
        "import sys; sys.modules['starlette'] = None\n"
        "from ctrlrun.errors import MissingDependency\n"
        "try:\n    import ctrlrun.documents.server\n"
        "except MissingDependency as exc:\n    print(exc.module, exc.extra)"
    )
    assert run_probe(probe) == "starlette server"


def test_the_otel_adapter_without_its_extra_raises_missing_dependency():
    probe = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from ctrlrun.errors import MissingDependency\n"
        "try:\n    import ctrlrun.integrations.otel\n"
        "except MissingDependency as exc:\n    print(exc.module, exc.extra)"
    )
    assert run_probe(probe) == "opentelemetry-api otel"


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


def _module_imports(path):
    """The ``ctrlrun…`` and top-level modules ``path`` imports at module level (a lazy import
    inside a function is a deliberate, documented exception)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING blocks and guarded imports
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    found.add(inner.module)
    return found


KERNEL_MAY_IMPORT = ("ctrlrun._time", "ctrlrun.canonical", "ctrlrun.display", "ctrlrun.errors")


def _every_import(path):
    """Every module ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


@pytest.mark.parametrize("path", sorted((SRC / "kernel").glob("*.py")), ids=lambda p: p.name)
def test_the_kernel_imports_nothing_above_it(path):
    """Not even lazily: the kernel has no call-time exception (YAML is ``ctrlrun.config``'s)."""
    above = [
        m
        for m in _every_import(path)
        if m.startswith("ctrlrun")
        and not m.startswith("ctrlrun.kernel")
        and m not in KERNEL_MAY_IMPORT
    ]
    assert above == []


@pytest.mark.parametrize("path", sorted((SRC / "runtime").glob("*.py")), ids=lambda p: p.name)
def test_the_runtime_imports_no_store_internals(path):
    """Only the protocol and the package's own API (``open_store``): no concrete store, no
    ``store.ops``, no row codec. The one lazy exception is ``locate``'s default SQLite file."""
    internal = [
        m
        for m in _module_imports(path)
        if m.startswith(("ctrlrun.store.", "ctrlrun.postgres")) and m != "ctrlrun.store.protocol"
    ]
    assert internal == []


def test_only_the_postgres_store_imports_the_driver_at_module_level():
    importers = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if any(m.split(".")[0] == "psycopg" for m in _module_imports(path))
    )
    assert all(p.startswith(("store/postgres/", "postgres.py")) for p in importers), importers


@pytest.mark.parametrize("path", sorted((SRC / "durable").glob("*.py")), ids=lambda p: p.name)
def test_durable_work_neither_imports_a_driver_nor_branches_on_the_dialect(path):
    """What differs between the stores is the stores' to say (``execute_on``, named queries
    per dialect); a durable part is the same code on both."""
    tree = ast.parse(path.read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {m for m in imported if m.split(".")[0] in {"psycopg", "sqlite3"}}
    compared = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(
            isinstance(c, ast.Constant) and c.value in {"sqlite", "postgres"}
            for c in node.comparators
        )
    ]
    assert compared == []
