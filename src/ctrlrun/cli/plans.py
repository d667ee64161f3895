"""``ctrlrun plans``: list, show, approve and reject approved plans (by their hash)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from ctrlrun._time import utc_now
from ctrlrun.cli.common import compact, reason_option, say, when
from ctrlrun.cli.durable_common import (
    default_person,
    durable_person_option,
    emit_json,
    open_operator_store,
    refusals,
    store_option,
    table,
)
from ctrlrun.errors import PlanReason, PlanRefused
from ctrlrun.kernel.plan import PlanStatus


@click.group("plans")
def plans_group() -> None:
    """Multi-step plans a person approves or rejects as a whole, by hash."""


def _plans(store_url: str | None, *, writing: bool = False) -> Any:
    from ctrlrun.durable.plans import Plans

    return Plans(open_operator_store(store_url, writing=writing))


def _as_dict(record: Any) -> dict[str, Any]:
    data = dataclasses.asdict(record)
    data["steps"] = [step.to_dict() for step in record.steps]
    return data


@plans_group.command("list")
@click.option(
    "--status",
    type=click.Choice([str(s) for s in PlanStatus]),
    help="Only plans in this status.",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@store_option
def list_plans(status: str | None, as_json: bool, store_url: str | None) -> None:
    """Plans, oldest first."""
    with refusals():
        records = _plans(store_url).list(status, heal=False)
        if as_json:
            emit_json(*(_as_dict(r) for r in records))
            return
        rows = [
            (
                r.plan_id,
                shown_status(r),
                str(len(r.steps)),
                r.agent,
                when(r.expires_at),
                r.plan_hash,  # whole: a person approves by it
            )
            for r in records
        ]
        click.echo(table(("PLAN", "STATUS", "STEPS", "AGENT", "EXPIRES", "HASH"), rows))


@plans_group.command("show")
@click.argument("plan_id")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@store_option
def show_plan(plan_id: str, as_json: bool, store_url: str | None) -> None:
    """One plan: its hash, every step, and every step receipt."""
    with refusals():
        plans = _plans(store_url)
        record = plans.get(plan_id, heal=False)
        if record is None:
            raise PlanRefused(
                f"plan {plan_id} is unknown", reason=PlanReason.UNKNOWN, plan_id=plan_id
            )
        receipts = {r.step_index: r for r in plans.receipts(plan_id)}
        if as_json:
            emit_json(
                {**_as_dict(record), "receipts": [dataclasses.asdict(r) for r in receipts.values()]}
            )
            return
        for name, value in _header(record):
            say(f"{name:<9}{value}")
        rows = [
            (
                str(index),
                step.action,
                str(receipts[index].result) if index in receipts else "-",
                compact(step.to_dict()["arguments"]),  # in full: a person approves from this
            )
            for index, step in enumerate(record.steps)
        ]
        click.echo(table(("STEP", "ACTION", "RESULT", "ARGUMENTS"), rows))


def shown_status(record: Any) -> str:
    """The status; an executing plan whose worker's heartbeat lapsed says so (reading does not
    move it: the next run, or any writing read, heals it back to approved)."""
    lapsed = record.heartbeat_lapsed(utc_now())
    return f"{record.status} (heartbeat lapsed)" if lapsed else str(record.status)


def _header(record: Any) -> list[tuple[str, str]]:
    """The key/value lines above the steps (each value escaped when printed)."""
    lines = [
        ("plan", record.plan_id),
        ("status", shown_status(record)),
        ("hash", record.plan_hash),
        ("agent", record.agent + (f" for {record.user}" if record.user else "")),
        ("expires", when(record.expires_at)),
        ("approver", record.approver or "-"),
    ]
    if record.answer_reason:
        lines.append(("reason", record.answer_reason))
    return lines + ([("error", record.error)] if record.error else [])


@plans_group.command("approve")
@click.argument("plan_id")
@click.option("--hash", "plan_hash", help="the hash you reviewed (default: the stored one)")
@durable_person_option
@click.option("--key", metavar="FILE", help="sign the approval with this Ed25519 private key")
@reason_option
@store_option
def approve_plan(  # noqa: PLR0917 - click passes one argument per option
    plan_id: str,
    plan_hash: str | None,
    person: str | None,
    key: str | None,
    reason: str | None,
    store_url: str | None,
) -> None:
    """Approve the whole plan, bound to its hash, as --as NAME (default: the OS user; with
    --key, whose key signs); signed with --key when the policy names approvers (the runner
    refuses an unsigned approval then)."""
    with refusals():
        plans = _plans(store_url, writing=True)
        presented = plan_hash or _stored_hash(plans, plan_id)
        approver = person or default_person()
        signature = None
        if key is not None:
            from ctrlrun.kernel.signing import plan_grant_message, sign

            message = plan_grant_message(plan_id=plan_id, plan_hash=presented, approver=approver)
            signature = sign(Path(key).read_bytes(), message)
        record = plans.approve(
            plan_id, plan_hash=presented, approver=approver, signature=signature, reason=reason
        )
        said = f": {record.answer_reason}" if record.answer_reason else ""
        say(f"approved {record.plan_id} {record.approved_hash} by {record.approver}{said}")


@plans_group.command("reject")
@click.argument("plan_id")
@click.option("--hash", "plan_hash", help="the hash you reviewed (default: the stored one)")
@durable_person_option
@reason_option
@store_option
def reject_plan(
    plan_id: str,
    plan_hash: str | None,
    person: str | None,
    reason: str | None,
    store_url: str | None,
) -> None:
    """Reject the whole plan (terminal), as --as NAME, with --reason TEXT."""
    with refusals():
        plans = _plans(store_url, writing=True)
        record = plans.reject(
            plan_id, plan_hash=plan_hash, approver=person or default_person(), reason=reason
        )
        said = f": {record.answer_reason}" if record.answer_reason else ""
        say(f"rejected {record.plan_id} {record.plan_hash} by {record.approver}{said}")


def _stored_hash(plans: Any, plan_id: str) -> str:
    record = plans.get(plan_id)
    if record is None:
        raise PlanRefused(f"plan {plan_id} is unknown", reason=PlanReason.UNKNOWN, plan_id=plan_id)
    return str(record.plan_hash)
