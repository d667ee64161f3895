"""The SQLite store's hot-path shortcuts keep its rules: a connection never crosses a fork,
writes share one cursor per thread without mixing results, and the by-action lookups that
lost their indexes (migration 0004) still answer exactly."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

import ctrlrun
from ctrlrun._time import encode_instant, encode_receipt_instant
from ctrlrun.kernel.event import EventDraft, EventType


def test_a_forked_child_opens_its_own_connection(tmp_path):
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    parent = store._connection()
    store.record((EventDraft(EventType.ACTION_PROPOSED, "act_parent"),))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a write must go through a connection of its own
        try:
            store.record((EventDraft(EventType.ACTION_PROPOSED, "act_child"),))
            os.write(write, b"new" if store._connection() is not parent else b"same")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 8) == b"new"
    assert store._connection() is parent  # the parent keeps its own
    assert [e.action_id for e in store.events()] == ["act_parent", "act_child"]


def test_threads_do_not_share_a_connection(tmp_path):
    import threading

    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(store._connection()))
    thread.start()
    thread.join()
    assert seen[0] is not store._connection()


def test_by_action_lookups_scan_without_the_dropped_indexes(tmp_path):
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    for n in range(3):
        draft = {"receipt_id": f"rcp_{n}", "action_id": f"act_{n}", "result": "denied"}
        store.record((EventDraft(EventType.ACTION_DENIED, f"act_{n}"),), draft)
    assert [e.action_id for e in store.events("act_1")] == ["act_1"]
    assert [r.receipt_id for r in store.receipts("act_2")] == ["rcp_2"]
    conn = sqlite3.connect(tmp_path / "state.db")
    indexes = {
        row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    }
    assert not {"events_by_action", "receipts_by_action"} & indexes


def _exact(instant, timespec):
    """The text forms as written without the fast paths: converted to UTC, naive, ``Z``."""
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat(timespec=timespec) + "Z"


@given(st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7, minutes=-30))])))
def test_an_instant_is_stamped_as_the_exact_form(instant):
    assert encode_instant(instant) == _exact(instant, "microseconds")


@given(st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=45))])))
def test_a_receipt_instant_is_written_in_milliseconds(instant):
    assert encode_receipt_instant(instant) == _exact(instant, "milliseconds")


def test_many_events_go_in_order_as_multi_row_statements(tmp_path):
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    statements = []
    store._connection().set_trace_callback(statements.append)
    drafts = tuple(
        EventDraft(EventType.ACTION_PROPOSED, f"act_{n}", f"k{n}" if n % 2 else None, data={"n": n})
        for n in range(250)
    )
    store.record(drafts)
    store._connection().set_trace_callback(None)
    inserts = [s for s in statements if s.startswith("INSERT INTO events")]
    assert len(inserts) == 3  # 100 + 100 + 50 rows
    events = store.events()
    assert [(e.action_id, e.effect_key, e.data) for e in events] == [
        (d.action_id, d.effect_key, d.data) for d in drafts
    ]
    assert [e.event_id for e in events] == sorted(e.event_id for e in events)


def test_only_a_plain_values_row_is_folded_into_one_statement():
    from ctrlrun.store.ops.evidence import EVENT_COLUMNS
    from ctrlrun.store.queries import load_queries
    from ctrlrun.store.sqlite_rows import row_names as _row_names
    from ctrlrun.store.sqlite_rows import rows_statement as _rows_statement

    queries = load_queries("sqlite")
    assert _row_names(queries["event_insert"]) == EVENT_COLUMNS  # insert_event_rows' order
    assert _rows_statement(queries["event_insert"], 2).endswith(
        "VALUES (?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?)"
    )
    assert _row_names("INSERT INTO t (a, b) VALUES (:a, 'x')") is None
    assert _row_names("INSERT INTO t (a) VALUES (:a) ON CONFLICT DO NOTHING") is None
    assert _row_names(queries["effect_move"]) is None


def test_run_many_still_folds_named_rows_into_one_statement(tmp_path):
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    row = {
        "ts": "2026-01-01T00:00:00.000000Z",
        "type": "ACTION_PROPOSED",
        "effect_key": None,
        "approval_id": None,
    }
    rows = [{**row, "action_id": f"act_{n}", "data_json": "{}"} for n in range(3)]
    store.transact(lambda txn: txn.run_many("event_insert", rows))
    store.transact(lambda txn: txn.run_many("event_insert", rows[:1]))
    assert [e.action_id for e in store.events()] == ["act_0", "act_1", "act_2", "act_0"]


@given(st.datetimes(timezones=st.just(UTC)), st.sampled_from([0, 1, 999, 1000, 999_999]))
def test_an_instant_s_fraction_is_written_the_same_at_its_edges(instant, micro):
    instant = instant.replace(microsecond=micro)
    assert encode_instant(instant) == _exact(instant, "microseconds")
    assert encode_receipt_instant(instant) == _exact(instant, "milliseconds")


def test_iso_text_is_isoformat_and_reuses_only_the_same_instant():
    from datetime import datetime

    from ctrlrun._time import iso_text

    first = datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    same_value = datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert iso_text(first) == first.isoformat()
    assert iso_text(first) is iso_text(first)  # reused
    assert iso_text(same_value) == same_value.isoformat()  # equal instant, other object
    assert iso_text(first) == first.isoformat()
