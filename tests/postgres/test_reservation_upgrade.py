"""A store granted under migration 0008 and upgraded to 0009 (decision 0032): the reservation
functions are created anew with a new return type, and the roles granted the old
``ctrlrun_reserve_templated`` by name keep running the new one — no grants re-applied, nothing
more granted to anyone."""

from __future__ import annotations

from typing import Any

import pytest

from ctrlrun.errors import AlreadyCommitted
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.queries import migration_files
from support.store_calls import finish, start

from .roles_support import ThreeRoles

pytestmark = pytest.mark.postgres

NEW = "0009_reservation_answers"
SIGNATURE = "(text, text, text, bigint, text, timestamptz, text, integer, jsonb, text, text)"


@pytest.fixture
def at_0008(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Requested before ``roles``: the store it migrates and grants stops at 0008."""
    import ctrlrun.store.postgres.atopen as atopen

    every = atopen.migrations_for
    before = [m for m, _ in migration_files("postgres")].index(NEW)
    monkeypatch.setattr(atopen, "migrations_for", lambda schema, n=1: every(schema, n)[:before])
    return monkeypatch


def _privileges(roles: ThreeRoles) -> list[tuple[Any, ...]]:
    with roles.superuser() as conn:
        return conn.execute(
            "SELECT p.proname, has_function_privilege(%s, p.oid, 'EXECUTE'),"
            " has_function_privilege(%s, p.oid, 'EXECUTE'),"
            " has_function_privilege('public', p.oid, 'EXECUTE')"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname LIKE 'ctrlrun_reserve%%' ORDER BY 1",
            [roles.agent, roles.approver, roles.schema],
        ).fetchall()


def test_an_upgraded_store_keeps_the_agents_grant_and_answers_a_duplicate(at_0008, roles):
    with roles.superuser() as conn:
        applied = {m for (m,) in conn.execute("SELECT migration_id FROM schema_version")}
    assert NEW not in applied
    old = _privileges(roles)
    assert old == [
        ("ctrlrun_reserve_effect", False, False, False),
        ("ctrlrun_reserve_templated", True, False, False),
    ]
    at_0008.undo()
    PostgresStateStore(roles.owner_url, schema=roles.schema).close()  # the owner upgrades
    assert _privileges(roles) == old
    with roles.superuser() as conn:
        assert conn.execute(
            f"SELECT pg_get_function_result('ctrlrun_reserve_templated{SIGNATURE}'::regprocedure)"
        ).fetchone() == ("record",)
        assert conn.execute(  # the renamed old function is gone
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname LIKE 'ctrlrun_reserve_templated%%'",
            [roles.schema],
        ).fetchone() == (1,)
    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)  # opens: nothing missing
    try:
        start(agent)
        finish(agent, result={"ok": 1})
        with pytest.raises(AlreadyCommitted) as caught:
            start(agent, "act_2")
        assert caught.value.receipt_id == "rcp_act_1_1"
        assert start(agent, "act_3", key="refund:pay_2").reservation.attempt == 1
    finally:
        agent.close()
