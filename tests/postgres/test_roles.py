"""Least privilege on Postgres (issue 26, decision 0021): three real LOGIN roles on the test
cluster — an owner that migrates (CREATE on the schema, no superuser), an agent's role and an
approver's role granted by ``ctrlrun grants --apply`` — and every forbidden act tried as the
agent, through its own connection: each meets ``permission denied`` (SQLSTATE 42501) or the
functions' own refusal, and writes nothing. The whole protected call (allow, approve then
grant by the approver's role, ambiguous, denied; sync and async) and the lost-COMMIT re-read
through the fault proxy work under the agent's role."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

import ctrlrun
from ctrlrun import ActionDenied, AmbiguousEffect, ApprovalRequired, Control, DuplicateEffect
from ctrlrun.config import load_policy_text
from ctrlrun.errors import SchemaMismatch, StoreError
from ctrlrun.kernel.approval import ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.effect import EffectState
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.postgres.roles import Roles
from support.cli import run
from support.pg import PgServer, unique_name
from support.pg_fixtures import PgSchema
from support.pgproxy import PgProxy
from support.policies import POLICY
from support.store_calls import finish, start

pytestmark = pytest.mark.postgres

KEY = "refund:pay_1"
HASH = "sha256:" + "ab" * 32
OTHER_HASH = "sha256:" + "cd" * 32
BOT = ctrlrun.Principal("support-bot", "alice")
TABLES = ("effects", "approvals", "approval_grants", "receipts", "receipt_chain", "events")


def with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}ctrlrun_schema={schema}"


@dataclass
class ThreeRoles:
    """The owner (which migrated the store), the agent's and the approver's roles."""

    server: PgServer
    schema: str
    owner: str
    agent: str
    approver: str
    owner_url: str
    agent_url: str
    approver_url: str

    def as_agent(self) -> psycopg.Connection[Any]:
        """The agent's own autocommit connection, search_path on the schema."""
        conn = psycopg.connect(self.agent_url, autocommit=True)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        return conn

    def superuser(self) -> psycopg.Connection[Any]:
        conn = self.server.connect()
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        return conn


@pytest.fixture
def roles(pg_server: PgServer, pg_schema: PgSchema) -> Iterator[ThreeRoles]:
    """The store migrated by a non-superuser owner, then ``ctrlrun grants --apply``."""
    owner, agent, approver = (unique_name(p) for p in ("own_", "agent_", "appr_"))
    schema = pg_schema.schema
    owner_url = pg_server.create_role(owner)
    with pg_server.connect() as conn:  # the documented setup: the owner owns the schema
        conn.execute(
            sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(
                sql.Identifier(schema), sql.Identifier(owner)
            )
        )
    agent_url = pg_server.create_role(agent)
    approver_url = pg_server.create_role(approver)
    try:
        done = run(
            "grants",
            "--store-url",
            with_schema(owner_url, schema),
            "--agent",
            agent,
            "--approver",
            approver,
            "--apply",
        )
        assert done.exit_code == 0, done.output
        assert f"as owner {owner}" in done.output
        yield ThreeRoles(
            pg_server, schema, owner, agent, approver, owner_url, agent_url, approver_url
        )
    finally:
        for name in (agent, approver, owner):
            pg_server.drop_role(name)


def owner_store(roles: ThreeRoles) -> PostgresStateStore:
    return PostgresStateStore(roles.owner_url, schema=roles.schema)


def granted_request(roles: ThreeRoles, approval_id: str = "apr_1") -> None:
    """A request made by the agent's role and granted by the approver's role."""
    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)
    approver = PostgresStateStore.open_existing(roles.approver_url, schema=roles.schema)
    try:
        agent.put_approval_request(
            ApprovalRequestDraft(
                approval_id, {"action_id": "act_0"}, HASH, "sha256:p", timedelta(1)
            )
        )
        approver.grant_approval(approval_id, "bob")
    finally:
        agent.close()
        approver.close()


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


def approval_row(roles: ThreeRoles, approval_id: str = "apr_1") -> tuple[Any, ...]:
    with roles.superuser() as conn:
        row = conn.execute(
            "SELECT status, consumed_by FROM approvals WHERE approval_id = %s", [approval_id]
        ).fetchone()
    assert row is not None
    return tuple(row)


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
        " 'committed', 'act_1', 1, NULL, '[]', 'rcp_x', 'act_1', NULL, 'failed', '{}', 'a', 'b')",
        # a request is made pending, never granted
        "SELECT ctrlrun_request_approval('apr_9', 'h', '{}', 'p', 'granted', now(),"
        " now() + interval '1 day', 1, '[]')",
        # a new effect is attempt 1 with a lease
        "SELECT ctrlrun_insert_effect('k2', 'committed', 'act_9', 1, now(), now(),"
        " now() + interval '1 minute', 't')",
    ],
    ids=["move_committed", "finish_committed", "request_granted", "insert_committed"],
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
            " 'committed', '{\"prev_hash\":\"P\",\"seq\":S}', 'S', 'P')"
        ).fetchone()
    genesis = "sha256:" + "0" * 64
    document = '{"prev_hash":"' + genesis + '","seq":1}'
    assert row is not None and (row[0], row[1]) == (1, document)
    assert row[2] == "sha256:" + hashlib.sha256(document.encode()).hexdigest()
    with roles.superuser() as conn:
        head = conn.execute("SELECT seq, hash FROM receipt_chain").fetchone()
    assert head == (1, row[2])


# --- the whole call path under the agent's role -----------------------------------------


def refund_on(store: PostgresStateStore, ran: list[Any], *, is_async: bool = False) -> Any:
    control = Control(load_policy_text(POLICY), store)
    if is_async:

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund_async(payment_id: str, amount: int) -> str:
            if ran and ran[-1] == "fail":
                ran.pop()
                raise TimeoutError("read timed out after the remote committed")
            ran.append(payment_id)
            return "refunded"

        def call(payment_id: str, amount: int) -> Any:
            async def go() -> Any:
                with ctrlrun.context(BOT.agent, BOT.user):
                    return await refund_async(payment_id, amount)

            return asyncio.run(go())

        return call

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        if ran and ran[-1] == "fail":
            ran.pop()
            raise TimeoutError("read timed out after the remote committed")
        ran.append(payment_id)
        return "refunded"

    def call_sync(payment_id: str, amount: int) -> Any:
        with ctrlrun.context(BOT.agent, BOT.user):
            return refund(payment_id, amount)

    return call_sync


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_whole_protected_call_runs_under_the_agent_role(roles, is_async):
    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)
    approver = PostgresStateStore.open_existing(roles.approver_url, schema=roles.schema)
    ran: list[Any] = []
    refund = refund_on(agent, ran, is_async=is_async)
    try:
        assert refund("pay_1", 100) == "refunded"  # allowed
        with pytest.raises(DuplicateEffect):  # the same effect, refused with a receipt
            refund("pay_1", 100)
        with pytest.raises(ApprovalRequired) as needed:  # approve, then granted by the approver
            refund("pay_big", 200_000)
        approver.grant_approval(needed.value.request_id, "bob")
        assert refund("pay_big", 200_000) == "refunded"
        with pytest.raises(ActionDenied):  # denied: a refusal receipt
            refund("pay_huge", 5_000_000)
        ran.append("fail")  # ambiguous: the remote's answer is lost
        with pytest.raises(TimeoutError):
            refund("pay_3", 5)
        with pytest.raises(AmbiguousEffect):  # blocked, with its receipt
            refund("pay_3", 5)
        approver.resolve_effect("refund:pay_3", EffectState.FAILED, "bob")
        assert refund("pay_3", 5) == "refunded"  # the next attempt, after a person's word
    finally:
        agent.close()
        approver.close()
    assert ran == ["pay_1", "pay_big", "pay_3"]
    owner = owner_store(roles)
    try:
        results = [r["result"] for r in owner.receipts()]
        assert results.count("committed") == 3  # pay_1, pay_big, pay_3's second attempt
        assert {"denied", "ambiguous", "blocked"} <= set(results)
        assert owner.get_approval(needed.value.request_id).status is ApprovalStatus.CONSUMED
        assert owner.verify_chain().ok
    finally:
        owner.close()


# --- the lost COMMIT, under the agent's role ---------------------------------------------


@pytest.fixture
def proxied_agent(roles: ThreeRoles, pg_proxy: PgProxy) -> Iterator[PostgresStateStore]:
    store = PostgresStateStore(pg_proxy.url_for(user=roles.agent), schema=roles.schema)
    yield store
    store.close()


def test_a_lost_reservation_commit_is_settled_under_the_agent_role(
    roles, proxied_agent, pg_proxy, branches
):
    pg_proxy.cut_after_commit()
    started = start(proxied_agent)
    assert pg_proxy.cuts_after_commit == 1
    assert branches() == [("A1_OURS", KEY)] and started.reservation.attempt == 1
    pg_proxy.cut_after_commit()
    receipt = finish(proxied_agent)
    assert branches()[-1] == ("A2_LANDED", KEY)
    assert receipt.seq == 1


def test_a_swallowed_commit_with_an_approval_is_reissued_under_the_agent_role(
    roles, proxied_agent, pg_proxy, branches
):
    granted_request(roles)
    pg_proxy.cut_before_commit()
    started = start(proxied_agent, approval_id="apr_1", action_hash=HASH)
    assert pg_proxy.cuts_before_commit == 1
    assert branches() == [("A1_REINSERT", KEY)]
    assert started.approval is not None and started.approval.approval_id == "apr_1"
    assert approval_row(roles) == ("consumed", "act_1")


def test_a_lost_commit_of_a_receipt_linked_on_the_shared_path_is_recognised(
    roles, proxied_agent, pg_proxy, branches
):
    """A receipt written without an effect (``record``) is its own witness."""
    from ctrlrun.kernel.event import EventDraft, EventType

    draft = {"receipt_id": "rcp_r", "action_id": "act_r", "result": "denied"}
    event = EventDraft(EventType.ACTION_DENIED, "act_r", data={})
    pg_proxy.cut_after_commit()
    receipt = proxied_agent.record((event,), draft)
    assert receipt is not None and receipt.seq == 1
    assert [b for b, _ in branches()] == ["A1_OURS"]


# --- opening under a role that does not own the store -----------------------------------


def test_a_role_that_does_not_own_the_store_never_migrates_it(roles):
    with roles.superuser() as conn:  # the store looks one migration behind this binary
        conn.execute("DELETE FROM schema_version WHERE migration_id = '0003_roles'")
    for url in (roles.agent_url, roles.approver_url):
        with pytest.raises(SchemaMismatch) as caught:
            PostgresStateStore(url, schema=roles.schema)
        assert "ctrlrun grants" in str(caught.value) and "--apply" in str(caught.value)
        assert "behind" in str(caught.value)
    with roles.superuser() as conn:
        applied = conn.execute("SELECT migration_id FROM schema_version ORDER BY 1").fetchall()
    assert applied == [("0001_schema",), ("0002_stats",)]


def test_an_empty_schema_is_not_created_by_the_agent_role(pg_server, pg_schema):
    agent = unique_name("agent_")
    url = pg_server.create_role(agent, usage_on=[pg_schema.schema])
    try:
        with pytest.raises(StoreError) as caught:
            PostgresStateStore(url, schema=pg_schema.schema)
        assert "ctrlrun grants" in str(caught.value)
        with pg_server.connect() as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s", [pg_schema.schema]
            ).fetchone()
        assert tables == (0,)
    finally:
        pg_server.drop_role(agent)


# --- the script -------------------------------------------------------------------------


def test_the_script_is_printed_without_connecting_and_names_are_identifiers():
    done = run(
        "grants",
        "--store-url",
        "postgresql://nowhere.invalid/db?ctrlrun_schema=ctrl",
        "--agent",
        'agent"; DROP SCHEMA ctrl; --',
        "--approver",
        "ops-team",
    )
    assert done.exit_code == 0, done.output
    assert '"agent""; DROP SCHEMA ctrl; --"' in done.output  # one quoted identifier
    assert done.output.startswith("BEGIN;") and done.output.rstrip().endswith("COMMIT;")
    assert "INSERT" not in done.output.replace("INSERT,", "")


def test_the_roles_must_be_distinct():
    with pytest.raises(ctrlrun.errors.InvalidArgument):
        Roles("ctrl", "same", "same")
    done = run("grants", "--store-url", "sqlite:///tmp/x.db", "--agent", "a", "--approver", "b")
    assert done.exit_code == 1 and "SQLite" in done.stderr


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


def test_an_agent_role_missing_a_call_function_is_refused_at_open(roles):
    """After an upgrade whose grants were not re-applied: refused at open, by name."""
    with roles.superuser() as conn:
        conn.execute(
            sql.SQL("REVOKE EXECUTE ON FUNCTION ctrlrun_consume_approval FROM {}").format(
                sql.Identifier(roles.agent)
            )
        )
    with pytest.raises(StoreError) as caught:
        PostgresStateStore(roles.agent_url, schema=roles.schema)
    assert "ctrlrun_consume_approval" in str(caught.value)
    assert "ctrlrun grants" in str(caught.value)


def test_the_agent_functions_are_the_ones_the_script_grants():
    from ctrlrun.store.postgres.roles import AGENT_FUNCTIONS

    text = Roles("s", "a", "b").statements()[1][1]
    granted = sorted(set(re.findall(r'"s"\.(ctrlrun_\w+)', text)))
    assert granted == sorted(AGENT_FUNCTIONS)


def test_grants_applied_by_a_role_that_does_not_own_the_schema_are_refused(pg_server, pg_schema):
    """A GRANT by a role without the grant option only warns: --apply reads back whether the
    grants took, and refuses (granting nothing) when they did not."""
    schema = pg_schema.schema
    names = [unique_name(p) for p in ("app_", "agent_", "appr_")]
    app_url = pg_server.create_role(names[0], usage_on=[schema], create_on=[schema])
    for name in names[1:]:
        pg_server.create_role(name)
    try:
        done = run(
            "grants",
            "--store-url",
            with_schema(app_url, schema),
            "--agent",
            names[1],
            "--approver",
            names[2],
            "--apply",
        )
        assert done.exit_code == 1 and "did not take" in done.stderr
        with pg_server.connect() as conn:
            held = conn.execute(
                "SELECT has_schema_privilege(%s, %s, 'USAGE')", [names[1], schema]
            ).fetchone()
        assert held == (False,)
    finally:
        for name in reversed(names):
            pg_server.drop_role(name)
