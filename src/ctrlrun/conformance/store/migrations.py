"""Migrations: a store whose schema is newer than this binary knows is refused at open,
naming the unknown migration, and is left as it was."""

from __future__ import annotations

from typing import Final

from ctrlrun.errors import SchemaMismatch
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.store.protocol import StateStore

from .framework import Case, CaseContext, check, expect_refusal

NEWER: Final = "9999_ctrlrun_conformance_newer"


def _open_again(ctx: CaseContext) -> StateStore:
    return ctx.scratch.reopen() or ctx.scratch.open()


def newer_schema_refused(ctx: CaseContext) -> str:
    """After a newer ctrlrun recorded a migration this binary does not know, opening the
    store raises ``SchemaMismatch`` naming it — and keeps refusing (nothing was "repaired").
    Control: before that, the same storage reopens and reads what was written."""
    first = ctx.scratch.open()
    first.record((EventDraft(EventType.ACTION_PROPOSED, ctx.action()),), None)
    first.close()
    control = _open_again(ctx)
    check(control.events(ctx.action()), "control: a current store did not reopen with its data")
    control.close()
    ctx.scratch.mark_newer_schema(NEWER)
    for attempt in ("open", "open again"):
        refused = expect_refusal(
            f"{attempt} a store at a newer schema", lambda: _open_again(ctx), SchemaMismatch
        )
        check(NEWER in str(refused), f"the refusal does not name {NEWER}: {refused}")
    return "newer schema refused twice, naming the unknown migration"


CASES: Final = (Case.of("migrations", "newer-schema-refused", newer_schema_refused),)
