"""Least privilege on Postgres (issue 26, decision 0024): with real LOGIN roles (the owner,
the agent's, the approver's; ``roles_support``), every forbidden act is tried as the agent
through its own connection — a write on a table of evidence, a grant, a reset, a function
replaced or altered, a function called outside what it checks — and each meets ``permission
denied`` (SQLSTATE 42501) or the functions' own refusal (``CR002``), and writes nothing. The
approver's role answers, resolves and accepts, and runs no call."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import psycopg
import pytest
from psycopg import errors, sql

from ctrlrun.errors import StoreError
from ctrlrun.kernel.approval import ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.partition import receipt_partition
from ctrlrun.kernel.receipt import BreakKind
from ctrlrun.postgres import PostgresStateStore
from support.store_calls import finish, start

from .roles_support import (
    HASH,
    KEY,
    OTHER_HASH,
    TABLES,
    approval_row,
    granted_request,
)

pytestmark = pytest.mark.postgres


# --- what the roles hold ----------------------------------------------------------------


def test_every_object_is_the_owners_and_the_agent_holds_no_write_in_the_schema(roles):
    with roles.superuser() as conn:
        owners = conn.execute(
            "SELECT DISTINCT pg_get_userbyid(c.relowner) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s"
            " UNION SELECT DISTINCT pg_get_userbyid(p.proowner) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s",
            [roles.schema, roles.schema],
        ).fetchall()
        assert owners == [(roles.owner,)]
        writes = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r' AND has_table_privilege("
            "  %s, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')",
            [roles.schema, roles.agent],
        ).fetchall()
        assert writes == []
        create = conn.execute(
            "SELECT has_schema_privilege(%s, %s, 'CREATE'), has_schema_privilege(%s, %s, 'CREATE')",
            [roles.agent, roles.schema, roles.approver, roles.schema],
        ).fetchone()
        assert create == (False, False)
        # every function runs as its owner with a pinned search_path, and PUBLIC runs none
        functions = conn.execute(
            "SELECT p.proname, p.prosecdef, p.proconfig,"
            " has_function_privilege('public', p.oid, 'EXECUTE')"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s",
            [roles.schema],
        ).fetchall()
    assert len(functions) >= 16
    pinned = [f"search_path={roles.schema}, pg_temp"]
    assert [f for f in functions if not (f[1] and f[2] == pinned and not f[3])] == []


FORBIDDEN = [
    "INSERT INTO receipts (seq, receipt_id, action_id, result, document, created_at)"
    " VALUES (99, 'rcp_x', 'act_x', 'committed', '{}', now())",
    "UPDATE receipts SET document = '{}'",
    "DELETE FROM receipts",
    "TRUNCATE receipts",
    "UPDATE receipt_chain SET seq = 0",
    "INSERT INTO approvals (approval_id, action_hash, action_json, policy_hash, status,"
    " created_at, expires_at) VALUES ('apr_x', 'h', '{}', 'p', 'granted', now(), now())",
    "UPDATE approvals SET status = 'granted'",
    "DELETE FROM approvals",
    "INSERT INTO approval_grants VALUES ('apr_1', 'mallory', now(), NULL)",
    "UPDATE effects SET state = 'failed'",
    "DELETE FROM effects",
    "TRUNCATE effects",
    "INSERT INTO events (ts, type, data_json) VALUES (now(), 'X', '{}')",
    "DELETE FROM events",
    "CREATE TABLE shadow (x int)",
    "CREATE OR REPLACE FUNCTION ctrlrun_consume_approval(p_approval_id text,"
    " p_action_hash text, p_consumed_at timestamptz, p_consumed_by text) RETURNS boolean"
    " LANGUAGE sql AS 'SELECT true'",
    "ALTER FUNCTION ctrlrun_append_events SECURITY INVOKER",
    "DROP FUNCTION ctrlrun_move_effect",
    "SELECT ctrlrun_grant_approval('apr_1', 'mallory', now(), NULL)",
    "SELECT ctrlrun_answer_approval('apr_1', 'granted', 'mallory', now())",
    "SELECT ctrlrun_accept_template('stripe.refund', 'x', now(), 'mallory')",
]


@pytest.mark.parametrize("statement", FORBIDDEN, ids=range(len(FORBIDDEN)))
def test_the_agent_cannot_write_evidence_grant_or_alter_a_function(roles, statement):
    granted_request(roles)
    with roles.superuser() as conn:
        before = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}
    with roles.as_agent() as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute(statement)
    with roles.superuser() as conn:
        after = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}
    assert after == before


def test_the_agent_cannot_consume_an_approval_for_another_hash(roles):
    granted_request(roles)
    with roles.as_agent() as conn:
        done = conn.execute(
            "SELECT ctrlrun_consume_approval('apr_1', %s, now(), 'act_evil')", [OTHER_HASH]
        ).fetchone()
    assert done == (False,)
    assert approval_row(roles) == ("granted", None)


def test_a_consumed_approval_is_consumed_once_and_never_reset(roles):
    """The store half of "one signed grant runs twice": under the agent's role the consumed
    request cannot be consumed again, put back to granted, or its effect row removed."""
    granted_request(roles)
    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)
    try:
        start(agent, approval_id="apr_1", action_hash=HASH)
        finish(agent)
    finally:
        agent.close()
    assert approval_row(roles) == ("consumed", "act_1")
    with roles.as_agent() as conn:
        again = conn.execute(
            "SELECT ctrlrun_consume_approval('apr_1', %s, now(), 'act_2')", [HASH]
        ).fetchone()
        assert again == (False,)
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT ctrlrun_expire_approval('apr_1', 'granted', 'consumed', now())")
        assert refused.value.sqlstate == "CR002"
        for statement in (
            "UPDATE approvals SET status = 'granted' WHERE approval_id = 'apr_1'",
            "DELETE FROM effects",
            "SELECT ctrlrun_answer_approval('apr_1', 'granted', 'bob', now())",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)
    assert approval_row(roles) == ("consumed", "act_1")
    with roles.superuser() as conn:
        state = conn.execute("SELECT state FROM effects WHERE effect_key = %s", [KEY]).fetchone()
    assert state == ("committed",)


@pytest.mark.parametrize(
    "call",
    [
        # a committed effect never moves again (a resolution starts from ambiguous)
        "SELECT ctrlrun_move_effect(%(key)s, 'failed', now(), NULL, NULL, NULL, 'me', 't',"
        " 'committed', 'act_1', 1)",
        # an outcome cannot be written over a finished attempt through the folded function
        "SELECT * FROM ctrlrun_finish_effect(%(key)s, 'failed', NULL, NULL, NULL, NULL, 't',"
        " 'committed', 'act_1', 1, NULL, '[]', 'rcp_x', 'act_1', NULL, 'failed', '{}', 'a', 'b',"
        " 0)",
        # a receipt goes only into a chain the store keeps (it has 64: 0..63)
        "SELECT * FROM ctrlrun_record_receipt(NULL, '[]', 'rcp_y', 'act_y', NULL, 'denied',"
        " '{}', 'a', 'b', 64)",
        "SELECT * FROM ctrlrun_record_receipt(NULL, '[]', 'rcp_y', 'act_y', NULL, 'denied',"
        " '{}', 'a', 'b', -1)",
        "SELECT * FROM ctrlrun_record_receipt(NULL, '[]', 'rcp_y', 'act_y', NULL, 'denied',"
        " '{}', 'a', 'b', NULL)",
        # a request is made pending, never granted
        "SELECT ctrlrun_request_approval('apr_9', 'h', '{}', 'p', 'granted', now(),"
        " now() + interval '1 day', 1, '[]')",
        # a new effect is attempt 1 with a lease
        "SELECT ctrlrun_insert_effect('k2', 'committed', 'act_9', 1, now(), now(),"
        " now() + interval '1 minute', 't')",
    ],
    ids=[
        "move_committed",
        "finish_committed",
        "partition_past_the_last",
        "partition_negative",
        "partition_null",
        "request_granted",
        "insert_committed",
    ],
)
def test_the_functions_check_what_they_are_given(roles, call):
    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)
    try:
        start(agent)
        finish(agent)
    finally:
        agent.close()
    with roles.superuser() as conn:
        before = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}
    with roles.as_agent() as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute(call, {"key": KEY})
    assert refused.value.sqlstate == "CR002"
    with roles.superuser() as conn:
        after = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}
    assert after == before


def test_the_agent_appends_receipts_only_linked_to_the_head(roles):
    """The one way the agent's role moves the head: a receipt linked and hashed on the
    server; the seq and the predecessor are the head's, whatever the caller wished."""
    with roles.as_agent() as conn:
        row = conn.execute(
            "SELECT * FROM ctrlrun_record_receipt(NULL, '[]', 'rcp_a', 'act_a', NULL,"
            " 'committed', '{\"prev_hash\":\"P\",\"seq\":S}', 'S', 'P', 0)"
        ).fetchone()
    genesis = "sha256:" + "0" * 64
    document = '{"prev_hash":"' + genesis + '","seq":1}'
    assert row is not None and (row[0], row[1]) == (1, document)
    assert row[2] == "sha256:" + hashlib.sha256(document.encode()).hexdigest()
    with roles.superuser() as conn:
        head = conn.execute("SELECT seq, hash FROM receipt_chain WHERE partition_id = 0").fetchone()
    assert head == (1, row[2])


def test_the_approver_answers_resolves_and_accepts_but_runs_no_call(roles):
    from ctrlrun.store.stats import refresh_stats
    from ctrlrun.store.templates import accept_effect_template

    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)
    approver = PostgresStateStore.open_existing(roles.approver_url, schema=roles.schema)
    try:
        agent.put_approval_request(
            ApprovalRequestDraft("apr_2", {"action_id": "act_0"}, HASH, "sha256:p", timedelta(1))
        )
        assert approver.deny_approval("apr_2", "bob", "no").status is ApprovalStatus.DENIED
        start(agent, key="refund:pay_9", action_name="stripe.refund", effect_template="t1")
        previous = accept_effect_template(approver, "stripe.refund", "t2", by="bob")
        assert previous == "t1"
        finish(agent, key="refund:pay_9")
        assert refresh_stats(approver) == 1  # the stats rollup: derived, the approver folds it
        with pytest.raises(StoreError, match="permission denied"):  # no call as the approver
            start(approver, "act_a", key="refund:pay_8")
    finally:
        agent.close()
        approver.close()
    with psycopg.connect(roles.approver_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(roles.schema)))
        for statement in (
            "SELECT ctrlrun_consume_approval('apr_2', 'h', now(), 'act_x')",
            "DELETE FROM receipts",
            "UPDATE approvals SET status = 'granted'",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)


def test_a_receipt_linked_into_a_chain_its_document_does_not_state_is_named(roles):
    """The agent picks the partition it passes; the document it sends must state the same one
    (none: partition 0). Linked into partition 1 without saying so, it is ``link_broken``
    there, by every verifier."""
    with roles.as_agent() as conn:
        conn.execute(
            "SELECT * FROM ctrlrun_record_receipt(NULL, '[]', 'rcp_m', 'act_m', NULL,"
            ' \'denied\', \'{"action_id":"act_m","prev_hash":"P","receipt_id":"rcp_m",'
            '"result":"denied","seq":S}\', \'S\', \'P\', 1)'
        )
    owner = PostgresStateStore(roles.owner_url, schema=roles.schema)
    try:
        breaks = [(b.kind, b.partition, b.seq) for b in owner.verify_chain().breaks]
        assert breaks == [(BreakKind.LINK_BROKEN, 1, 1)]
    finally:
        owner.close()


def test_a_receipt_in_a_chain_its_key_does_not_hash_to_is_named(roles):
    """The agent may state and pass the same wrong chain: the document agrees with its row,
    but a receipt written since partitioning belongs in the chain its effect key hashes to,
    so every verifier names it ``link_broken`` there; one placed by the key is not named."""
    key = "refund:pay_w"
    wrong = receipt_partition(key, "act_w", 64) % 63 + 1  # another chain, never partition 0
    assert wrong != receipt_partition(key, "act_w", 64)
    text = (
        '{"action_id":"act_w","effect_key":"refund:pay_w","partition":WRONG,"prev_hash":"P",'
        '"receipt_id":"rcp_w","result":"denied","seq":S}'
    ).replace("WRONG", str(wrong))
    with roles.as_agent() as conn:
        conn.execute(
            "SELECT * FROM ctrlrun_record_receipt(NULL, '[]', 'rcp_w', 'act_w', %s,"
            " 'denied', %s, 'S', 'P', %s)",
            [key, text, wrong],
        )
    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)
    owner = PostgresStateStore(roles.owner_url, schema=roles.schema)
    try:
        start(agent, "act_r", key="refund:pay_r")
        finish(agent, "act_r", key="refund:pay_r")  # placed by its key: not named
        breaks = [(b.kind, b.partition, b.seq) for b in owner.verify_chain().breaks]
        assert breaks == [(BreakKind.LINK_BROKEN, wrong, 1)]
    finally:
        agent.close()
        owner.close()
