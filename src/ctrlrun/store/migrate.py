"""Forward-only schema migrations: classification and the plan, independent of the database.

The database records what was applied (``schema_version``); this binary knows an ordered tuple
of migrations. Before anything else is read, the two are compared. Only a database that is
empty, or whose applied list is a prefix of the known one, may be migrated; anything ahead,
gapped or divergent is refused naming both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

from ctrlrun.errors import SchemaMismatch


class SchemaShape(StrEnum):
    """How a database's applied migrations relate to the ones this binary knows."""

    EMPTY = "empty"
    CURRENT = "current"
    BEHIND = "behind"
    AHEAD = "ahead"
    DIVERGENT = "divergent"


@dataclass(frozen=True, slots=True)
class SchemaPlan:
    """The classification and the migrations still to apply (in order)."""

    shape: SchemaShape
    pending: tuple[str, ...]


def classify(applied: Sequence[str], known: Sequence[str]) -> SchemaPlan:
    """Compare ``applied`` (in application order) with ``known`` (this binary's order)."""
    applied, known = tuple(applied), tuple(known)
    if not applied:
        return SchemaPlan(SchemaShape.EMPTY, known)
    if applied == known:
        return SchemaPlan(SchemaShape.CURRENT, ())
    if known[: len(applied)] == applied:
        return SchemaPlan(SchemaShape.BEHIND, known[len(applied) :])
    if set(applied) - set(known):
        if applied[: len(known)] == known:
            return SchemaPlan(SchemaShape.AHEAD, ())
        return SchemaPlan(SchemaShape.DIVERGENT, ())
    return SchemaPlan(SchemaShape.DIVERGENT, ())


def refuse_unless_migratable(
    plan: SchemaPlan, applied: Sequence[str], known: Sequence[str], running: str, where: str
) -> None:
    """Raise ``SchemaMismatch`` for a database this binary must not touch."""
    if plan.shape in {SchemaShape.EMPTY, SchemaShape.CURRENT, SchemaShape.BEHIND}:
        return
    unknown = [m for m in applied if m not in known]
    if plan.shape is SchemaShape.AHEAD:
        message = (
            f"{where} is at schema {applied[-1]}, newer than this ctrlrun {running} knows"
            f" ({known[-1] if known else 'none'}); upgrade ctrlrun before opening it"
        )
    else:
        message = (
            f"{where} has schema history {list(applied)} that diverges from this ctrlrun"
            f" {running} ({list(known)}); unknown: {unknown}. Refusing to open it"
        )
    raise SchemaMismatch(message, applied=tuple(applied), known=tuple(known), running=running)


READING_REMEDY: Final = (
    "this command reads only and does not migrate: the store's owner migrates it (any"
    " protected call by a process that owns it; on Postgres with roles, `ctrlrun grants"
    " --store-url <the owner's URL> … --apply`)"
)


def refuse_unless_current(
    plan: SchemaPlan,
    applied: Sequence[str],
    known: Sequence[str],
    running: str,
    where: str,
    *,
    remedy: str = READING_REMEDY,
) -> None:
    """For opens that never migrate: anything but CURRENT is refused with an instruction
    (``remedy`` says who migrates a store that is behind, and how)."""
    refuse_unless_migratable(plan, applied, known, running, where)
    if plan.shape is SchemaShape.EMPTY:
        raise SchemaMismatch(
            f"{where} holds no ctrlrun schema; nothing to read (a store is created by the"
            " first protected call, or by `ctrlrun init`)",
            applied=(),
            known=tuple(known),
            running=running,
        )
    if plan.shape is SchemaShape.BEHIND:
        raise SchemaMismatch(
            f"{where} is at schema {applied[-1]}, behind this ctrlrun {running}"
            f" ({known[-1]}); {remedy}",
            applied=tuple(applied),
            known=tuple(known),
            running=running,
        )


class History(Protocol):
    """One dialect's schema history on one connection: the only seam of ``migrate_forward``."""

    where: str  # how refusals name the store

    def applied(self) -> tuple[str, ...]:
        """The migrations recorded, in order; empty when there is no history table."""
        ...

    def foreign_tables(self) -> list[str]:
        """Tables other than the history table (a non-empty list with no history refuses)."""
        ...

    def locked(self) -> AbstractContextManager[None]:
        """One migration's transaction, holding the history's lock once the table exists;
        committed when the block ends, rolled back when it raises."""
        ...

    def apply(self, migration_id: str, sql: str) -> None:
        """Run ``sql`` and record ``migration_id`` (creating the history table first if
        absent), inside the current transaction."""
        ...

    def raced(self, error: BaseException) -> bool:
        """True (and logged) when ``error`` is a concurrent first start that created the
        history first: the migrations are classified once more."""
        ...


def migrate_forward(history: History, migrations: Sequence[tuple[str, str]], running: str) -> None:
    """Apply what is missing, one transaction per migration, each classifying the history
    again under its lock, so concurrent openers apply each migration once. A database this
    binary must not touch, or one holding other tables and no history, is refused
    (``SchemaMismatch``) before anything is written."""
    known = tuple(migration_id for migration_id, _ in migrations)
    for last_pass in (False, True):
        try:
            for migration_id, sql in migrations:
                with history.locked():
                    if _pending(history, known, running, migration_id):
                        history.apply(migration_id, sql)
            return
        except Exception as error:
            if last_pass or not history.raced(error):
                raise


def _pending(history: History, known: tuple[str, ...], running: str, migration_id: str) -> bool:
    applied = history.applied()
    plan = classify(applied, known)
    refuse_unless_migratable(plan, applied, known, running, history.where)
    if not applied and (tables := history.foreign_tables()):
        raise SchemaMismatch(
            f"{history.where} is not a ctrlrun store (it holds tables {tables}); use an empty one",
            known=known,
            running=running,
        )
    return migration_id in plan.pending


def check_current(
    history: History, known: Sequence[str], running: str, *, remedy: str = READING_REMEDY
) -> None:
    """For an open that never migrates: anything but an up-to-date history is refused with
    an instruction (``SchemaMismatch``; ``remedy`` for one that is behind)."""
    applied = history.applied()
    plan = classify(applied, known)
    refuse_unless_current(plan, applied, known, running, history.where, remedy=remedy)
