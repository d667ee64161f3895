"""The three roles of a Postgres store on the test cluster (decision 0024), for the roles
tests: a non-superuser owner that owns the schema and migrated it, an agent's role and an
approver's role granted by ``ctrlrun grants --apply`` (the fixture ``roles``, registered by
this folder's conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import ctrlrun
from ctrlrun.kernel.approval import ApprovalRequestDraft
from ctrlrun.postgres import PostgresStateStore
from support.cli import run
from support.pg import PgServer, unique_name
from support.pg_fixtures import PgSchema

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


def approval_row(roles: ThreeRoles, approval_id: str = "apr_1") -> tuple[Any, ...]:
    with roles.superuser() as conn:
        row = conn.execute(
            "SELECT status, consumed_by FROM approvals WHERE approval_id = %s", [approval_id]
        ).fetchone()
    assert row is not None
    return tuple(row)
