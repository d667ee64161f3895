"""Agent data cannot steer what a person sees, and a pasted hint runs exactly what it says.

Hostile values (a screen clear, a window-title change, a right-to-left override, a line break
that would start a forged row, C1 controls, zero-width and tag characters) reach the store the
way an agent puts them there: as arguments and as an executor's error text; and, for the fields
ctrlrun refuses such characters in (principals, effect keys), by editing the store file, as an
older version or an attacker with file access could have left them. Every command is run on a
real pseudo-terminal and its bytes are read by a terminal emulator (pyte): what it shows is
what a person reads.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ctrlrun
from ctrlrun.display import command_line, escape_text, is_unsafe
from ctrlrun.durable import Plans
from support.cli import refused, run
from support.terminal import BEFORE, CTRLRUN, seen

HOSTILE = (
    "ok\x1b[2J\x1b[H\x1b]0;pwned\x07\u202eevil\u2066x\u2069\nFORGED  granted  by mallory"
    "\u2028sep\x85c1\x9b31mcsi\u200bzw\u00adshy\U000e0041tag\x7fdel\r"
)
SHOWN = (
    "ok\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\u202eevil\\u2066x\\u2069\\nFORGED  granted  by mallory"
    "\\u2028sep\\x85c1\\x9b31mcsi\\u200bzw\\xadshy\\U000e0041tag\\x7fdel\\r"
)
IN_JSON = escape_text(json.dumps(HOSTILE, ensure_ascii=False), json=True)  # as an argument
POLICY = """\
schema: ctrlrun.policy/v1
actions:
  notify.send:
    decision: approve
    effect: "notify:{message_id}"
  notify.post:
    decision: allow
    effect: "post:{message_id}"
"""


def test_every_unsafe_character_is_shown_as_a_visible_escape():
    assert escape_text(HOSTILE) == SHOWN
    for char in "\x00\x1b\x7f\x85\x9b\u061c\u200e\u200f\u202a\u202e\u2066\u2069\ufeff\u2028":
        assert is_unsafe(char) and escape_text(char).startswith("\\"), repr(char)
    for char in "aé€中 \\\"'😀":
        assert escape_text(char) == char
    assert escape_text(SHOWN) == SHOWN  # escaping twice changes nothing


@given(st.recursive(st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_escaped_json_is_the_same_json_and_shows_nothing_unsafe(value):
    text = escape_text(json.dumps(value, ensure_ascii=False), json=True)
    assert json.loads(text) == value
    assert not any(is_unsafe(c) for c in text)


@pytest.fixture
def hostile(empty):
    """A project whose store holds hostile text in every field a listing shows."""
    (empty / "ctrlrun.yaml").write_text(POLICY)
    control = ctrlrun.Control.from_file(create=True)
    store = control.store

    @ctrlrun.protect("notify.send", control=control)
    def send(message_id: str, body: str) -> str:
        return "sent"

    @ctrlrun.protect("notify.post", control=control)
    def post(message_id: str, body: str) -> str:
        raise TimeoutError(HOSTILE)

    with ctrlrun.context("support-bot", "alice"):
        with pytest.raises(ctrlrun.ApprovalRequired) as needed:
            send(message_id="m1", body=HOSTILE)
        with pytest.raises(TimeoutError):
            post(message_id="m2", body=HOSTILE)
    plan = Plans(store).propose([{"action": "notify.send", "arguments": {"b": HOSTILE}}], agent="p")
    path = Path(store.path)
    store.close()
    with sqlite3.connect(path) as conn:  # fields ctrlrun now refuses such text in
        conn.execute("UPDATE effects SET effect_key = ? WHERE effect_key = 'post:m2'", (HOSTILE,))
    conn.close()
    reader = ctrlrun.SQLiteStateStore(path)
    action_id = reader.receipts()[0].document["action_id"]  # the post that went AMBIGUOUS
    reader.close()
    return {"approval": needed.value.request_id, "plan": plan.plan_id, "action": action_id}


def looks_safe(view, rows: int | None = None) -> list[str]:
    """What every view must satisfy on screen; returns the screen's lines."""
    lines = view.lines
    assert view.code == 0, lines
    assert lines[0] == BEFORE, "the screen was cleared or overwritten"
    assert view.screen.title == "", "the window title was changed"
    assert not [line for line in lines if line.lstrip().startswith("FORGED")], lines
    assert view.unsafe_written() == []
    assert "\\u202e" in "\n".join(lines)
    if rows is not None:
        assert len(lines) == 1 + rows, lines
    return lines


def test_listings_show_hostile_values_escaped_on_one_row_each(hostile, empty):
    approvals = looks_safe(seen("approvals", cwd=empty), rows=2)
    assert IN_JSON in approvals[2]  # the arguments, in full, on the request's own row
    assert "\\u202e" in approvals[2].split("notify.send")[1]  # after the name, escaped
    effects = looks_safe(seen("effects", cwd=empty), rows=2)
    assert "\\x1b[2J" in effects[1] + effects[2]
    receipts = looks_safe(seen("receipts", cwd=empty), rows=2)
    assert "TimeoutError: ok\\x1b[2J" in "\n".join(receipts)
    looks_safe(seen("receipts", "--json", cwd=empty), rows=1)
    looks_safe(seen("approvals", "--json", cwd=empty), rows=1)


def test_inspect_plan_and_approve_show_hostile_values_escaped(hostile, empty):
    inspected = looks_safe(seen("inspect", hostile["action"], cwd=empty))
    assert any(IN_JSON in line for line in inspected)
    assert any(SHOWN in line for line in inspected)  # the error text
    plan = looks_safe(seen("plans", "show", hostile["plan"], cwd=empty), rows=8)
    assert IN_JSON in plan[-1]  # the step's argument, whole, on the step's row
    granted = looks_safe(seen("approve", hostile["approval"], cwd=empty), rows=2)
    assert IN_JSON in granted[1]  # the arguments, whole
    assert granted[2].startswith("expires ")


def test_json_stays_exact(hostile, empty):
    line = run("approvals", "--json", "--store-url", f"sqlite://{empty}/.ctrlrun/state.db")
    document = json.loads(line.stdout)
    assert document["action"]["arguments"]["body"] == HOSTILE
    assert "\\u202e" in line.stdout and "\u202e" not in line.stdout


def test_a_request_rewritten_with_hostile_text_shows_none_of_it(hostile, empty):
    # a principal ctrlrun refuses, written into the stored request as an attacker with the
    # file would: it no longer hashes to what the request binds, so it is shown as tampering
    path = empty / ".ctrlrun" / "state.db"
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT action_json FROM approvals").fetchone()
        action = json.loads(row[0]) | {"principal": {"agent": HOSTILE, "user": None}}
        conn.execute("UPDATE approvals SET action_json = ?", (json.dumps(action),))
    conn.close()
    view = seen("approvals", cwd=empty)
    assert view.code == 0 and view.unsafe_written() == []
    shown = "\n".join(view.lines)
    assert "TAMPERED" in shown and "FORGED" not in shown and "\\u202e" not in shown
    refusal = seen("approve", hostile["approval"], cwd=empty)
    assert refusal.code == 1 and refusal.unsafe_written() == []
    assert refusal.lines[1].startswith("Error: approval ") and "tampered" in refusal.lines[1]


def test_an_error_line_is_one_escaped_line(hostile, empty):
    view = seen("inspect", HOSTILE, cwd=empty)
    assert view.code == 1
    assert view.lines == [BEFORE, f"Error: no action {SHOWN} in this store"]
    assert view.screen.title == "" and view.unsafe_written() == []
    assert refused(run("inspect", HOSTILE), "FORGED").count("\n") == 0


# --- hints a person pastes -----------------------------------------------------------------

ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
NASTY_ID = 'm 1\'; touch PWNED; echo "$(touch PWNED2)" `touch PWNED3` & x'


def pasted(hint: str, cwd: Path) -> list[str]:
    """The argv ``hint`` (a ``ctrlrun …`` line) gives ctrlrun when pasted into ``sh``."""
    assert hint.startswith("ctrlrun ")
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(ARGV)} {hint[len('ctrlrun ') :]}"
    done = subprocess.run(
        ["sh", "-c", script], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def between_backticks(message: str) -> str:
    return message.split("`")[1]


def test_the_resolve_hint_of_an_ambiguous_key_pastes_as_one_argument(empty):
    (empty / "ctrlrun.yaml").write_text(POLICY)
    control = ctrlrun.Control.from_file(create=True)

    @ctrlrun.protect("notify.post", control=control)
    def post(message_id: str, body: str) -> str:
        raise TimeoutError("reply lost")

    with ctrlrun.context("support-bot"):
        with pytest.raises(TimeoutError):
            post(message_id=NASTY_ID, body="b")
        with pytest.raises(ctrlrun.AmbiguousEffect) as blocked:
            post(message_id=NASTY_ID, body="b")
    control.store.close()
    hint = str(blocked.value).split("resolve it with `")[1].split("` (it happened)")[0]
    assert pasted(hint, empty) == ["resolve", f"post:{NASTY_ID}", "--committed"]
    done = subprocess.run(
        ["sh", "-c", hint],
        cwd=empty,
        env={"PATH": str(Path(CTRLRUN).parent) + ":/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr  # pasted for real: it resolved that key
    assert f"post:{NASTY_ID} resolved committed" in done.stdout
    assert not list(empty.glob("PWNED*"))


def test_the_approve_hints_paste_as_written(hostile, empty):
    assert command_line("ctrlrun", "approve", "apr_1") == "ctrlrun approve apr_1"
    control = ctrlrun.Control.from_file(create=True)

    @ctrlrun.protect("notify.send", control=control)
    def send(message_id: str, body: str) -> str:
        return "sent"

    with ctrlrun.context("support-bot"), pytest.raises(ctrlrun.ApprovalRequired) as needed:
        send(message_id="m9", body="b")
    control.store.close()
    hint = between_backticks(str(needed.value))
    assert pasted(hint, empty) == ["approve", needed.value.request_id]
    inspected = run("inspect", needed.value.request_id).stdout
    hint = inspected.split("awaiting a human (`")[1].split("`")[0]
    assert pasted(hint, empty) == ["approve", needed.value.request_id]


def test_the_demo_prints_commands_that_paste_in_a_hostile_directory(tmp_path, monkeypatch):
    where = tmp_path / "it's a $(touch PWNED) dir"
    where.mkdir()
    monkeypatch.chdir(where)
    shown = run("demo").stdout.splitlines()
    hints = [line.strip() for line in shown if line.strip().startswith("ctrlrun ")]
    assert len(hints) == 4  # the scenario 1 hint and the three at the end
    url = f"sqlite://{where}/.ctrlrun/demo/state.db"
    resolve = ["resolve", "refund:pay_1001", "--failed", "--store-url", url]
    assert pasted(hints[-1], where) == resolve
    for hint in hints[1:3]:
        assert pasted(hint, where)[-2:] == ["--store-url", url]
    assert not list(tmp_path.rglob("PWNED"))
