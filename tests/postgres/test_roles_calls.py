"""The whole call path under the agent's role (issue 26, decision 0024): a protected call
allowed, approved by the approver's role, ambiguous then resolved, denied, sync and async; the
lost-COMMIT re-read through the fault proxy; opening under a role that does not own the store
(never migrates; behind, empty or missing a grant is refused naming the owner's command); and
the script ``ctrlrun grants`` prints or applies."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

import ctrlrun
from ctrlrun import ActionDenied, AmbiguousEffect, ApprovalRequired, Control, DuplicateEffect
from ctrlrun.config import load_policy_text
from ctrlrun.errors import SchemaMismatch, StoreError
from ctrlrun.kernel.approval import ApprovalStatus
from ctrlrun.kernel.effect import EffectState
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.postgres.roles import Roles
from ctrlrun.store.queries import migration_files
from support.cli import run
from support.pg import unique_name
from support.pgproxy import PgProxy
from support.policies import POLICY
from support.store_calls import finish, start

from .roles_support import (
    BOT,
    HASH,
    KEY,
    ThreeRoles,
    approval_row,
    granted_request,
    owner_store,
    with_schema,
)

pytestmark = pytest.mark.postgres


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
        with pytest.raises(ApprovalRequired) as asked:  # a person's denial, with its reason
            refund("pay_no", 300_000)
        approver.deny_approval(asked.value.request_id, "bob", "not this customer")
        with pytest.raises(ActionDenied) as denied:
            refund("pay_no", 300_000)
        assert denied.value.approver_reason == "not this customer"
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
    newest = migration_files("postgres")[-1][0]
    with roles.superuser() as conn:  # the store looks one migration behind this binary
        conn.execute("DELETE FROM schema_version WHERE migration_id = %s", [newest])
    for url in (roles.agent_url, roles.approver_url):
        with pytest.raises(SchemaMismatch) as caught:
            PostgresStateStore(url, schema=roles.schema)
        assert "ctrlrun grants" in str(caught.value) and "--apply" in str(caught.value)
        assert "behind" in str(caught.value)
    with roles.superuser() as conn:
        applied = conn.execute("SELECT migration_id FROM schema_version ORDER BY 1").fetchall()
    known = [(m,) for m, _ in migration_files("postgres") if m != newest]
    assert applied == known  # nothing migrated: the one taken away is still missing


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
