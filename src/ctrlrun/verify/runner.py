"""Running the guarantees: selection, a scratch store per guarantee, verdicts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from ctrlrun.kernel.policy import Policy

from . import approvals, commit, concurrency, effects, evidence, leases, refusals
from .lab import Failed, Lab, NotApplicable, Passed
from .report import Result, Status, VerifyReport
from .scratch import ConfigRefused, PostgresScratches, SQLiteScratches


@dataclass(frozen=True, slots=True)
class Guarantee:
    """One guarantee: its id, its name, and the scenario that grades it (the scenario's
    docstring states what it asserts and its positive control)."""

    gid: str
    name: str
    run: Callable[[Lab], Passed]


GUARANTEES: Final = (
    Guarantee("G1", "mutated approval refused", approvals.mutated_approval_refused),
    Guarantee("G2", "replayed approval refused", approvals.replayed_approval_refused),
    Guarantee("G3", "duplicate effect refused", effects.duplicate_effect_refused),
    Guarantee("G4", "one winner under concurrency", concurrency.one_winner_under_concurrency),
    Guarantee("G5", "ambiguous blocks a blind retry", effects.ambiguous_blocks_retry),
    Guarantee("G6", "unknown action denied", refusals.unknown_action_denied),
    Guarantee("G7", "no principal denied", refusals.no_principal_denied),
    Guarantee("G8", "unknown exception is ambiguous", effects.unknown_exception_ambiguous),
    Guarantee("G9", "altered receipt detected", evidence.altered_receipt_detected),
    Guarantee("G10", "expired lease becomes ambiguous", leases.expired_lease_ambiguous),
    Guarantee("G11", "lost commit never failed", commit.lost_commit_never_failed),
    Guarantee("G12", "cut tail detected", evidence.cut_tail_detected),
)

Progress = Callable[[Guarantee, Result | None], None]


def select(only: Sequence[str]) -> tuple[Guarantee, ...]:
    """The guarantees ``only`` names (``G3`` or ``g3``), in catalogue order; all if empty.
    ``ConfigRefused`` for an id that is none."""
    wanted = {name.strip().upper() for name in only if name.strip()}
    unknown = sorted(wanted - {g.gid for g in GUARANTEES})
    if unknown:
        known = ", ".join(g.gid for g in GUARANTEES)
        raise ConfigRefused(f"no such guarantee: {', '.join(unknown)} (known: {known})")
    return tuple(g for g in GUARANTEES if not wanted or g.gid in wanted)


def scratches_for(store_url: str | None) -> Any:
    """SQLite temp files by default; scratch schemas for a ``postgresql://`` URL. A SQLite
    URL is refused: verify never opens a store it was pointed at."""
    if store_url is None:
        return SQLiteScratches()
    if store_url.startswith(("postgresql://", "postgres://")):
        return PostgresScratches(store_url)
    raise ConfigRefused(
        "--store-url takes a postgresql:// URL (verify creates and drops scratch schemas in"
        " that database); without it verify uses temporary SQLite files. It never opens the"
        " store a URL names"
    )


@contextmanager
def quiet_kernel() -> Iterator[None]:
    """Silence the ``ctrlrun`` logger's warnings (refusals are the point here); by level, so
    nothing is filtered out of any check."""
    logger = logging.getLogger("ctrlrun")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_one(guarantee: Guarantee, policy: Policy, scratches: Any, processes: int) -> Result:
    """One guarantee on its own scratch store; its verdict."""
    began = time.monotonic()
    g, action = guarantee, ""
    try:
        with scratches.scratch(g.gid) as scratch:
            lab = Lab(g.gid, policy, scratch, processes)
            try:
                passed = g.run(lab)
            finally:
                action = lab.action
        status, action, detail, example = Status.PASS, passed.action, passed.detail, None
    except Failed as failed:
        status, action, detail = Status.FAIL, failed.action or action, failed.detail
        example = failed.counterexample
    except NotApplicable as na:
        status, action, detail, example = Status.NOT_APPLICABLE, "", na.reason, None
    except Exception as exc:
        status, detail, example = (
            Status.ERROR,
            f"verify's own error: {type(exc).__name__}: {exc}",
            None,
        )
    return Result(g.gid, g.name, status, action, detail, example, time.monotonic() - began)


def run(
    policy: Policy,
    *,
    store_url: str | None = None,
    only: Sequence[str] = (),
    processes: int = 8,
    progress: Progress | None = None,
) -> VerifyReport:
    """Grade ``policy`` against the guarantees in scratch stores (see the package docstring).

    Raises ``ConfigRefused`` (or another ``CtrlrunError``) for a configuration verify cannot
    use: an unknown guarantee id, a non-Postgres ``store_url``, no driver, no ``CREATE``.
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 2:
        raise ConfigRefused(f"processes must be an integer >= 2, got {processes!r}")
    selected = select(only)
    scratches = scratches_for(store_url)
    results: list[Result] = []
    with quiet_kernel(), scratches.session():
        for guarantee in selected:
            if progress is not None:
                progress(guarantee, None)
            results.append(run_one(guarantee, policy, scratches, processes))
            if progress is not None:
                progress(guarantee, results[-1])
    return VerifyReport(
        policy.source or "<policy>",
        policy.policy_hash,
        scratches.kind,
        tuple(results),
        tuple(scratches.warnings),
    )


__all__ = ["GUARANTEES", "Guarantee", "run", "select"]
