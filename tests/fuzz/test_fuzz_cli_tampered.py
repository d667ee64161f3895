"""The read-only CLI over a SQLite store tampered behind its back (a column set to a BLOB, a
number, broken JSON or NULL; a row deleted): every command ends with its output or one
``Error:`` line (exit 0 or 1), never a traceback or the catch-all "unexpected …", and a
command that reads leaves every byte of every table as it was."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from support.cli import ENV, Scene, run
from support.fuzzing import budget
from support.policies import POLICY

TABLES = {
    "receipts": ["receipt_id", "action_id", "effect_key", "result", "document", "hash", "seq"],
    "effects": ["state", "action_id", "attempt", "result_json", "error", "lease_expires_at",
                "created_at", "resolved_by"],
    "approvals": ["status", "action_json", "expires_at", "required", "excluded_json", "approver"],
    "events": ["type", "data_json", "ts", "action_id"],
    "receipt_chain": ["seq", "hash"],
    "effect_templates": ["template", "recorded_at"],
}  # fmt: skip
VALUES = ["X'ff00'", "'garbage'", "-1", "1.5e308", "NULL", "'{\"a\":'", "'\u202e'", "'[]'"]
COMMANDS = [
    ("receipts",), ("receipts", "--verify-chain"), ("receipts", "--json"), ("effects",),
    ("effects", "--json"), ("approvals",), ("inspect", "{action}"), ("policy", "templates"),
]  # fmt: skip


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, str]:
    """A store written by real calls: committed, ambiguous and pending-approval refunds."""
    root = tmp_path_factory.mktemp("tampered")
    (root / ".ctrlrun").mkdir()
    scene = Scene(root)
    action = scene.committed("pay_1")
    scene.ambiguous("pay_2")
    scene.pending("pay_3")
    scene.close()
    return scene.path, action


def dump(path: Path) -> dict:
    with sqlite3.connect(path) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {n: sorted(map(repr, db.execute(f'SELECT * FROM "{n}"'))) for n in names}
    db.close()
    return rows


def primary_key(path: Path, table: str) -> str:
    with sqlite3.connect(path) as db:
        info = db.execute(f'PRAGMA table_info("{table}")').fetchall()
    db.close()
    keys = [row[1] for row in sorted(info, key=lambda r: r[5]) if row[5]]
    return f'"{keys[0]}"' if keys else "rowid"


@budget(40)
@given(
    st.sampled_from(sorted(TABLES)).flatmap(
        lambda t: st.tuples(st.just(t), st.sampled_from(TABLES[t]))
    ),
    st.sampled_from([*VALUES, "DELETE"]),
    st.integers(0, 5),
    st.sampled_from(COMMANDS),
)
def test_a_tampered_store_is_read_without_a_traceback(
    pristine, tmp_path_factory, monkeypatch, target, value, row, command
):
    source, action = pristine
    table, column = target
    where = tmp_path_factory.mktemp("copy")
    (where / ".ctrlrun").mkdir()
    (where / "ctrlrun.yaml").write_text(POLICY)
    path = where / ".ctrlrun" / "state.db"
    shutil.copy(source, path)
    key = primary_key(path, table)
    pick = f'{key} = (SELECT {key} FROM "{table}" ORDER BY {key} LIMIT 1 OFFSET {row})'
    edit = (
        f'DELETE FROM "{table}" WHERE {pick}'
        if value == "DELETE"
        else f'UPDATE "{table}" SET "{column}" = {value} WHERE {pick}'
    )
    try:
        with sqlite3.connect(path) as db:
            db.execute(edit)
        db.close()
    except sqlite3.IntegrityError:
        assume(False)  # the schema itself refuses it: nothing to read
    before = dump(path)
    monkeypatch.chdir(where)
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    args = [part.format(action=action) for part in command]
    result = run(*args, "--store-url", f"sqlite://{path}")
    assert result.exit_code in (0, 1), (args, edit, result.output)
    assert "unexpected" not in result.stderr, (args, edit, result.stderr)
    if result.exit_code == 1:
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert dump(path) == before, (args, edit)
