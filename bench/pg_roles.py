"""The cost of least privilege (decision 0024): one client's protected call under the agent's
role, against the same call under the store's owner, on one schema, alternated in one run.

Three LOGIN roles are made for the run (and dropped after it): an owner that owns the schema
and migrates it, an agent's role and an approver's role granted by ``ctrlrun grants``. Target:
the agent's call within 10% of the owner's (median of per-round ratios).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pg_common
import psycopg
from pg_common import interleaved, show
from psycopg import sql
from psycopg.conninfo import make_conninfo

import ctrlrun
from ctrlrun.store.postgres.roles import Roles, apply_grants

TARGET = 1.10


@contextmanager
def _three_roles(url: str, schema: str) -> Iterator[tuple[str, str]]:
    """The owner's and the agent's URLs; the roles are dropped on exit."""
    suffix = os.urandom(4).hex()
    names = {k: f"bench_{k}_{suffix}" for k in ("owner", "agent", "approver")}
    password = os.urandom(12).hex()
    with psycopg.connect(url, autocommit=True) as conn:
        for name in names.values():
            stmt = sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}")
            conn.execute(stmt.format(sql.Identifier(name), sql.Literal(password)))
        stmt = sql.SQL("ALTER SCHEMA {} OWNER TO {}")
        conn.execute(stmt.format(sql.Identifier(schema), sql.Identifier(names["owner"])))
    owner, agent = (
        make_conninfo(url, user=names[k], password=password) for k in ("owner", "agent")
    )
    try:
        ctrlrun.postgres.PostgresStateStore(owner, schema=schema).close()  # the owner migrates
        apply_grants(owner, Roles(schema, names["agent"], names["approver"]))
        yield owner, agent
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            for name in names.values():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def agent_vs_owner(url: str, ops: int, rounds: int) -> bool:
    """Protected calls with an effect key: owner, then agent, alternated round by round."""
    schema = pg_common.new_schema(url, "b_roles")
    with _three_roles(url, schema) as (owner_url, agent_url), tempfile.TemporaryDirectory() as d:
        as_owner = pg_common.control(owner_url, schema, Path(d))
        as_agent = pg_common.control(agent_url, schema, Path(d))

        # ``bench:{n}`` takes text (decision 0026)
        @ctrlrun.protect("bench.effect", control=as_owner)
        def owner_call(n: str) -> str:
            return n

        @ctrlrun.protect("bench.effect", control=as_agent)
        def agent_call(n: str) -> str:
            return n

        with ctrlrun.context(agent="bench"):
            pair = interleaved(
                lambda n: owner_call(str(2 * n)),
                lambda n: agent_call(str(2 * n + 1)),
                ops=ops,
                rounds=rounds,
            )
        for ctl in (as_owner, as_agent):
            ctl.store.close()  # type: ignore[attr-defined]
    return show(
        "Postgres, protected call with an effect key, one client: agent's role vs owner",
        pair,
        target=TARGET,
        floor_name="the same call under the owner role (floor = owner, ctrlrun = agent)",
    )


_LOOP = """
DO $$
DECLARE started timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1..{n} LOOP
        PERFORM {fn}(NULL, '[]'::jsonb);
    END LOOP;
    RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - started);
END $$
"""


def definer_overhead(url: str, calls: int, rounds: int) -> float:
    """Server-side µs per call that ``SECURITY DEFINER`` with a pinned ``search_path`` adds
    to a function call: ``ctrlrun_append_events`` against an identical copy without either,
    alternated in one backend (no network, no client: what scheduling noise cannot hide)."""
    schema = pg_common.new_schema(url, "b_definer")
    try:
        ctrlrun.postgres.PostgresStateStore(url, schema=schema).close()
        with psycopg.connect(url, autocommit=True) as conn:
            ident = sql.Identifier(schema)
            body = conn.execute(
                "SELECT prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = %s AND proname = 'ctrlrun_append_events'",
                [schema],
            ).fetchone()[0]
            conn.execute(
                sql.SQL(
                    "CREATE FUNCTION {}.plain_append_events(p_now timestamptz, p_events jsonb)"
                    " RETURNS void LANGUAGE plpgsql AS {}"
                ).format(ident, sql.Literal(body))
            )
            notices: list[float] = []
            conn.add_notice_handler(lambda d: notices.append(float(d.message_primary or 0)))
            per_call: dict[str, list[float]] = {"definer": [], "plain": []}
            for _ in range(rounds):
                for kind, name in (
                    ("plain", "plain_append_events"),
                    ("definer", "ctrlrun_append_events"),
                ):
                    fn = sql.Identifier(schema, name).as_string(conn)
                    conn.execute(_LOOP.format(n=calls, fn=fn))
                    per_call[kind].append(notices.pop() / calls * 1e6)
    finally:
        pg_common.drop_schema(url, schema)
    plain = statistics.median(per_call["plain"])
    definer = statistics.median(per_call["definer"])
    print("Postgres, one function call on the server: SECURITY DEFINER + pinned search_path")
    extra = definer - plain
    print(f"  plain   {plain:7.2f} µs/call   definer {definer:7.2f} µs/call   (+{extra:.2f} µs)")
    return extra


_HOT_LOOP = """
DO $$
DECLARE started timestamptz := clock_timestamp(); k text; r record;
BEGIN
    FOR i IN 1..{n} LOOP
        k := '{prefix}-' || i;
        PERFORM {schema}.ctrlrun_reserve_templated(
            k, 'executing', 'act', 300000000, 'tok', NULL, 'mark', 1,
            pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_array(
                'EFFECT_RESERVED', 'act', k, NULL, '{{"lease_expires_at":"mark"}}')),
            NULL, NULL);
        SELECT * INTO r FROM {schema}.ctrlrun_finish_effect(
            k, 'committed', NULL, '1', NULL, NULL, 'tok2', 'executing', 'act', 1, NULL,
            '[]'::jsonb, 'rcp-' || k, 'act', k, 'committed', '{{"p":"P","s":S}}', 'S', 'P');
    END LOOP;
    RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - started);
END $$
"""


def hot_path_on_the_server(url: str, calls: int, rounds: int) -> float:
    """The two functions of a protected call's hot path, run on the server in one backend per
    role (no network, no client), the agent's role against the owner, alternated: the only
    place the roles differ. Returns the agent's median µs per call over the owner's."""
    schema = pg_common.new_schema(url, "b_hot")
    with _three_roles(url, schema) as (owner_url, agent_url):
        per_call: dict[str, list[float]] = {"owner": [], "agent": []}
        conns = {
            k: psycopg.connect(u, autocommit=True)
            for k, u in (("owner", owner_url), ("agent", agent_url))
        }
        notices: list[float] = []
        for conn in conns.values():
            conn.add_notice_handler(lambda d: notices.append(float(d.message_primary or 0)))
        ident = sql.Identifier(schema).as_string(None)
        for n in range(rounds):
            for kind, conn in conns.items():
                loop = _HOT_LOOP.format(n=calls, prefix=f"{kind}{n}", schema=ident)
                conn.execute(loop)
                per_call[kind].append(notices.pop() / calls * 1e6)
        for conn in conns.values():
            conn.close()
    owner, agent = (statistics.median(per_call[k]) for k in ("owner", "agent"))
    print("Postgres, a protected call's two functions run on the server, one backend per role")
    print(f"  owner   {owner:7.1f} µs/call   agent {agent:7.1f} µs/call   ({agent / owner:.3f}×)")
    return agent / owner
