"""The step registry the plan tests (and their child processes) use.

``inventory.reserve`` is a database step: it inserts into the ``inventory`` table through the
step's own transaction. ``email.send`` is an external step (through ``Control``): it records the
call with an exclusive-create marker. Either can be told to hang (``hang_in``) after it did its
work, so a parent can SIGKILL the process inside it.
"""

from __future__ import annotations

import os
from typing import Any

from durable_workers import inside_forever, mark

from ctrlrun.durable import Steps

INVENTORY_SQLITE = "CREATE TABLE IF NOT EXISTS inventory (item TEXT PRIMARY KEY, qty INTEGER)"


def make_steps(
    calls: str,
    *,
    hang_in: str | None = None,
    inside: Any = None,
    fail_email: BaseException | None = None,
) -> Steps:
    """The registry. A database step names its table with the transaction's ``schema`` on
    Postgres (the store's schema), bare on SQLite (``schema`` is None there)."""
    steps = Steps()

    @steps.db("inventory.reserve")
    def reserve(ctx: Any) -> dict[str, Any]:
        item, qty = ctx.arguments["item"], ctx.arguments["qty"]
        if ctx.schema is not None:
            from psycopg import sql

            ctx.connection.execute(
                sql.SQL("INSERT INTO {}.inventory (item, qty) VALUES (%s, %s)").format(
                    sql.Identifier(ctx.schema)
                ),
                (item, qty),
            )
        else:
            ctx.connection.execute("INSERT INTO inventory (item, qty) VALUES (?, ?)", (item, qty))
        mark(calls, f"db-{ctx.step_index}-{os.getpid()}")  # every execution, committed or not
        if hang_in == "db":
            inside.set()
            inside_forever()
        return {"reserved": qty}

    @steps.external("email.send")
    def send(to: str, body: str) -> dict[str, Any]:
        mark(calls, f"email-{to}")
        if hang_in == "external":
            inside.set()
            inside_forever()
        if fail_email is not None:
            raise fail_email
        return {"sent": to}

    return steps
