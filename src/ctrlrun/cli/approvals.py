"""``ctrlrun approvals`` (what waits for a human), ``ctrlrun approve`` and ``ctrlrun deny``.

An answer from the shell is recorded as ``--as NAME`` (``$CTRLRUN_AS``), else ``cli:local``:
the command line cannot tell who typed it. A grant authorises exactly the action it names (its
hash), once, until it expires.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import click

from ctrlrun._time import utc_now
from ctrlrun.cli.common import (
    CLI_PERSON,
    Refusal,
    compact,
    display_policy,
    existing_store,
    instant,
    json_line,
    person_option,
    reason_option,
    say,
    shown_compact,
    store_url_option,
    table,
    when,
    who,
)
from ctrlrun.config import load_policy_file
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.event import Event, EventType
from ctrlrun.kernel.request_check import is_tampered, recomputed_hash
from ctrlrun.runtime.answering import TAMPERED, refuse_if_tampered, sign_answer, split_tampered
from ctrlrun.runtime.request_facts import RequestFacts, request_facts
from ctrlrun.store.protocol import StateStore

APPROVER_ENV = "CTRLRUN_APPROVER"
"""The old name of ``$CTRLRUN_AS`` for ``approve``/``deny``, still read for one release."""

HEADER = (
    "APPROVAL",
    "STATUS",
    "EXPIRES",
    "ACTION",
    "REQUESTED BY",
    "ENVIRONMENT",
    "RULE",
    "NEEDS",
    "EFFECT",
    "ARGUMENTS",
)


def answerable_expired(record: ApprovalRecord, now: datetime) -> bool:
    """Pending or granted, but past its expiry: it can no longer be answered or used."""
    live = record.status in (ApprovalStatus.PENDING, ApprovalStatus.GRANTED)
    return live and record.is_expired(now)


def shown_status(record: ApprovalRecord, now: datetime, reason: str | None = None) -> str:
    """The status and who answered (``granted by X``, ``consumed (granted by X)``, ``denied by
    X: reason``), marked ``(expired)`` if it lapsed unanswered or unused. Only the display
    changes."""
    text = str(record.status)
    if record.approver:
        answered = record.status in (ApprovalStatus.GRANTED, ApprovalStatus.DENIED)
        text += f" by {record.approver}" if answered else f" (granted by {record.approver})"
    if reason is not None and record.status is ApprovalStatus.DENIED:
        text += f": {reason}"
    return text + (" (expired)" if answerable_expired(record, now) else "")


def denial_reasons(store: StateStore, records: Iterable[ApprovalRecord]) -> dict[str, str]:
    """The reason each denied request among ``records`` was given (from its
    ``APPROVAL_DENIED`` event); the events are read only if one of them was denied."""
    if not any(r.status is ApprovalStatus.DENIED for r in records):
        return {}
    return {
        event.approval_id: str(event.data["reason"])
        for event in store.events()
        if event.type is EventType.APPROVAL_DENIED
        and event.approval_id
        and event.data.get("reason") is not None
    }


ANSWERS: Final = {EventType.APPROVAL_GRANTED: "granted", EventType.APPROVAL_DENIED: "denied"}


def answers_given(events: Iterable[Event]) -> dict[str, list[dict[str, str | None]]]:
    """Every answer among ``events``, by approval id, in order: ``{"answer": "granted" |
    "denied", "by": who, "reason": why or None}`` (one per grant of an M-of-N request)."""
    out: dict[str, list[dict[str, str | None]]] = {}
    for event in events:
        answer = ANSWERS.get(event.type)
        if answer is None or not event.approval_id:
            continue
        reason = event.data.get("reason")
        by = event.data.get("approver")
        out.setdefault(event.approval_id, []).append(
            {
                "answer": answer,
                "by": None if by is None else str(by),
                "reason": None if reason is None else str(reason),
            }
        )
    return out


def answers_line(answers: Iterable[dict[str, str | None]]) -> str:
    """``granted by alice: "why"; granted by bob`` (what each person said, when anything)."""
    return "; ".join(
        f"{a['answer']} by {a['by']}" + (f": {a['reason']}" if a["reason"] else "") for a in answers
    )


def approval_document(
    record: ApprovalRecord,
    now: datetime,
    reason: str | None = None,
    answers: list[dict[str, str | None]] | None = None,
) -> dict[str, Any]:
    """The ``--json`` form of one approval (stable field names). ``answers``: who answered
    and why (``answers_given``), when they were read."""
    return {
        "answers": answers or [],
        "approval_id": record.approval_id,
        "status": str(record.status),
        "expired": answerable_expired(record, now),
        "action": record.action,
        "action_hash": record.action_hash,
        "policy_hash": record.policy_hash,
        "created_at": instant(record.created_at),
        "expires_at": instant(record.expires_at),
        "approver": record.approver,
        "answered_at": instant(record.answered_at),
        "consumed_at": instant(record.consumed_at),
        "consumed_by": record.consumed_by,
        "deny_reason": reason,
    }


def _row(
    record: ApprovalRecord, now: datetime, reason: str | None, facts: RequestFacts
) -> tuple[str, ...]:
    action = record.action
    effect = "-"
    if facts.effect_key is not None:
        effect = f"{facts.effect_key} ({facts.effect_state or 'not reserved'})"
    return (
        record.approval_id,
        shown_status(record, now, reason),
        when(record.expires_at),
        str(action.get("name", "-")),
        who(action.get("principal")),
        facts.environment or "-",
        facts.rule or "-",
        str(facts.still_needed) if record.status is ApprovalStatus.PENDING else "-",
        effect,
        shown_compact(action.get("arguments", {}), facts.shown),
    )


def _budget_cell(facts: RequestFacts) -> str:
    """The request's budget as the store recorded it (checked: ``budget_facts``), and what
    its window holds now while the request waits."""
    line = facts.budget.line() or "-"
    now = facts.budget_now_text()
    return line if now is None else f"{line} ({now})"


def _granted_so_far(store: StateStore, record: ApprovalRecord) -> int:
    """How many distinct approvers have granted ``record`` (its grant rows)."""
    if record.status is not ApprovalStatus.PENDING or record.required == 1:
        return 0
    from ctrlrun.store.ops.approvals import grants_in_txn

    return len(store.read(lambda txn: grants_in_txn(txn, record.approval_id)))


@click.command()
@click.option(
    "--status",
    type=click.Choice([str(s) for s in ApprovalStatus]),
    help="Only requests in this status.",
)
@click.option("--pending", is_flag=True, help="Only requests still waiting (--status pending).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document per line.")
@store_url_option
def approvals(status: str | None, pending: bool, as_json: bool, store_url: str | None) -> None:
    """Approval requests, oldest first: the action each would authorise, and when it expires.

    With --pending, only those waiting for `ctrlrun approve ID` or `ctrlrun deny ID`
    (including any that expired unanswered, marked so).
    """
    if pending and status not in (None, "pending"):
        raise click.UsageError("--pending is --status pending; give one of them")
    if pending:
        status = "pending"
    policy = display_policy()
    with existing_store(store_url) as store:
        records = store.list_approvals(ApprovalStatus(status) if status else None)
        reasons = denial_reasons(store, records)
        answered = any(r.approver for r in records) or any(r.required > 1 for r in records)
        answers = answers_given(store.events()) if as_json and answered else {}
        tampered = {r.approval_id for r in records if is_tampered(r)}
        facts = {  # what a person needs beside a request: never from a tampered one
            r.approval_id: request_facts(store, r, policy, _granted_so_far(store, r))
            for r in records
            if r.approval_id not in tampered
        }
    if tampered:  # evidence: recorded once per request, in a store opened to write
        with existing_store(store_url, writing=True) as store:
            split_tampered(store, [r for r in records if r.approval_id in tampered])
    now = utc_now()
    if as_json:
        for record in records:
            rid = record.approval_id
            document = approval_document(record, now, reasons.get(rid), answers.get(rid))
            if rid in tampered:
                document = tampered_document(record, document)
            else:
                document |= facts[rid].document()
            json_line(document)
        return
    if not records:
        say("nothing waits for a human" if status == "pending" else "no approval requests yet")
        return
    rows = [
        _tampered_row(r)
        if r.approval_id in tampered
        else _row(r, now, reasons.get(r.approval_id), facts[r.approval_id])
        for r in records
    ]
    budgets = {rid: _budget_cell(f) for rid, f in facts.items() if f.budget.line() is not None}
    if budgets:  # a column only where a budgeted action waits: other listings stay as they were
        rows = [(*row, budgets.get(row[0], "-")) for row in rows]
    table(rows, header=(*HEADER, "BUDGET") if budgets else HEADER, color_column=1)
    if tampered:
        say(
            f"{len(tampered)} request(s) TAMPERED: the stored action does not hash to the action"
            " it binds; they cannot be answered (recorded as events)",
            err=True,
        )


def tampered_document(record: ApprovalRecord, document: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` form of a tampered request: ``status`` ``tampered``, the stored
    status kept as ``stored_status``, and no action (what it shows is not what it binds)."""
    return {
        **document,
        "status": TAMPERED,
        "stored_status": document["status"],
        "action": None,
        "recomputed_hash": recomputed_hash(record.action),
    }


def _tampered_row(record: ApprovalRecord) -> tuple[str, ...]:
    """A tampered request's row: nothing of what it stores, only why it is not shown."""
    found = recomputed_hash(record.action)
    said = f"stored action hashes to {found or 'nothing'}, not {record.action_hash}"
    blank = ("-",) * (len(HEADER) - 4)
    return (record.approval_id, "TAMPERED", when(record.expires_at), *blank, said)


def _answered(verb: str, record: ApprovalRecord, person: str) -> None:
    action = record.action
    say(
        f"{verb} {record.approval_id} by {person}: {action.get('name', '-')}"
        f" {compact(action.get('arguments', {}))} for {who(action.get('principal'))}"
    )


answerer_option = person_option(default=CLI_PERSON, legacy_env=(APPROVER_ENV,))
"""``--as NAME`` (``$CTRLRUN_AS``, or the old ``$CTRLRUN_APPROVER``); with ``--key``, the
approver whose key signs. Default ``cli:local``."""


def _signature(
    store: StateStore, approval_id: str, person: str, key: str | None, *, grant: bool
) -> str | None:
    """Check the stored request (tampering refused and recorded) and, with the private key
    in file ``key``, sign ``person``'s answer over the recomputed hash. When the policy file
    names approvers, every answer must be signed by one of them (refused otherwise, before
    anything is written)."""
    record = store.get_approval(approval_id)
    refuse_if_tampered(store, record)
    keys = _approver_keys()
    if key is None and not keys:
        return None
    if record is None:
        raise Refusal(f"approval {approval_id} is unknown")
    if key is None:
        verb = "grant" if grant else "denial"
        raise Refusal(
            f"the policy names approvers: the {verb} must be signed (--key FILE, the key of"
            f" {person!r}); nothing written"
        )
    return sign_answer(keys, record, person, Path(key).read_bytes(), grant=grant)


def _approver_keys() -> dict[str, str]:
    from ctrlrun.runtime.locate import policy_path

    path = policy_path()
    return dict(load_policy_file(path).approvers) if path.is_file() else {}


@click.command()
@click.argument("approval_id", metavar="ID")
@click.option(
    "--hash",
    "action_hash",
    metavar="HASH",
    help="The action hash you reviewed: refused (nothing written) unless it is the request's.",
)
@click.option(
    "--key",
    metavar="FILE",
    help="Sign the grant with this Ed25519 private key (`ctrlrun approver keygen`).",
)
@answerer_option
@reason_option
@store_url_option
def approve(  # noqa: PLR0917 - click passes one argument per option
    approval_id: str,
    action_hash: str | None,
    key: str | None,
    person: str,
    reason: str | None,
    store_url: str | None,
) -> None:
    """Grant the pending request ID, as --as NAME (default cli:local), signed with --key;
    --reason TEXT is recorded with the grant.

    The grant authorises exactly the action shown (its hash), once, until the request
    expires; the identical call then runs (or presents it with `ctrlrun.with_approval(ID)`).
    With --hash, the grant is refused unless HASH is the hash of the action the request
    holds. When the policy names approvers, only a grant signed by one of them counts. An
    unknown, answered or expired request is refused (exit 1).
    """
    with existing_store(store_url, writing=True) as store:
        if action_hash is not None:
            held = store.get_approval(approval_id)
            refuse_if_tampered(store, held)  # its hash is not what the person reviewed
            if held is not None and held.action_hash != action_hash:
                raise Refusal(
                    f"approval {approval_id} is for action {held.action_hash}, not the"
                    f" {action_hash} you reviewed; nothing granted"
                )
        signature = _signature(store, approval_id, person, key, grant=True)
        record = store.grant_approval(approval_id, person, signature, reason)
    _answered("granted", record, person)
    if reason is not None:
        say(f"reason: {reason}")
    if record.status is ApprovalStatus.PENDING:  # more approvers must grant it too
        say(f"still pending: it needs {record.required} distinct approvers")
        return
    say(
        f"expires {when(record.expires_at)}; single use, for exactly this action"
        f" ({record.action_hash})"
    )


@click.command()
@click.argument("approval_id", metavar="ID")
@click.option(
    "--key",
    metavar="FILE",
    help="Sign the denial with this Ed25519 private key (required when the policy names"
    " approvers).",
)
@answerer_option
@reason_option
@store_url_option
def deny(
    approval_id: str, reason: str | None, key: str | None, person: str, store_url: str | None
) -> None:
    """Deny the pending request ID, as --as NAME (default cli:local), signed with --key.
    The identical call is then denied until the request would have expired. When the
    policy names approvers, only a denial signed by one of them is accepted (a veto needs a
    key). A tampered request is refused (exit 1)."""
    with existing_store(store_url, writing=True) as store:
        signature = _signature(store, approval_id, person, key, grant=False)
        record = store.deny_approval(approval_id, person, reason, signature)
    _answered("denied", record, person)
    if reason is not None:
        say(f"reason: {reason}")
