"""The Postgres store's SQL holds no session state and names its schema everywhere; its Python
never hands the driver SQL built with an f-string. (pgbouncer in transaction mode depends on
the first; a search_path pointing elsewhere, on the second.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ctrlrun.store.queries import load_queries, migration_files

SRC = Path(__file__).resolve().parents[2] / "src" / "ctrlrun"
PG_PY = sorted((SRC / "store" / "postgres").glob("*.py"))
STATEMENTS = [
    *load_queries("postgres").items(),
    *((mid, text) for mid, text in migration_files("postgres")),
]
SESSION_STATEMENT = re.compile(r"(SET\s+(?!LOCAL\b)|RESET|PREPARE|LISTEN|DISCARD)\b", re.I)
# a transaction-scoped advisory lock ends with its transaction, as pgbouncer needs
SESSION_ANYWHERE = re.compile(
    r"pg_advisory_(?!xact_)|\bTEMP(ORARY)?\b|set_config\([^)]*false", re.I
)
# a row lock (FOR UPDATE), an upsert's DO UPDATE and REVOKE … FROM PUBLIC (a role) are not
# table references, and a CTE's own name needs no schema
TABLE_REF = re.compile(
    r"(?<!\bFOR )(?<!\bDO )\b(FROM|INTO|UPDATE|JOIN|TABLE)\s+"
    r"(?!\(|\{schema\}\.|pg_catalog\.|PUBLIC\b)(\w+)"
)
CTE_NAME = re.compile(r"\b(\w+)\s+AS\s+\(", re.IGNORECASE)


def _code(text: str) -> str:
    return "\n".join(line.split("--")[0] for line in text.splitlines())


def _unqualified(code: str) -> list[tuple[str, str]]:
    ctes = set(CTE_NAME.findall(code))
    return [ref for ref in TABLE_REF.findall(code) if ref[1] not in ctes]


@pytest.mark.parametrize(("name", "text"), STATEMENTS, ids=[n for n, _ in STATEMENTS])
def test_no_session_state_and_every_table_names_its_schema(name, text):
    code = _code(text)
    for statement in code.split(";"):
        assert not SESSION_STATEMENT.match(statement.strip()), (name, statement)
    assert not SESSION_ANYWHERE.search(code), name
    assert _unqualified(code) == [], name


@pytest.mark.parametrize(
    "code",
    [
        "SELECT * FROM outbox FOR UPDATE SKIP LOCKED",
        "UPDATE plans SET x = 1",
        "WITH due AS (SELECT 1) SELECT * FROM due JOIN outbox ON true",
    ],
)
def test_the_check_still_finds_an_unqualified_table(code):
    assert len(_unqualified(code)) == 1


@pytest.mark.parametrize("path", PG_PY, ids=lambda p: p.name)
def test_no_fstring_sql_reaches_the_driver(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"execute", "mogrify", "executemany"}
            and node.args
        ):
            assert not isinstance(node.args[0], ast.JoinedStr), f"{path.name}:{node.lineno}"
