"""``ctrlrun receipts``: the chained evidence, listed or verified."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any, Final

import click

from ctrlrun.checkpoints import Checkpoint, heads_by_partition
from ctrlrun.cli.checkpoints import proof_options, proven_checkpoints
from ctrlrun.cli.common import (
    Refusal,
    existing_store,
    json_line,
    shorten,
    store_url_option,
    table,
    who,
)
from ctrlrun.cli.held import check_file
from ctrlrun.kernel.evidence_check import Checkpointed
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.receipt import (
    BreakKind,
    ChainHead,
    ChainReport,
    Receipt,
    describe,
    place,
)
from ctrlrun.store.protocol import StateStore

HEADER: Final = ("SEQ", "FINISHED", "RESULT", "ACTION", "EFFECT KEY", "AGENT", "ACTION ID", "WHY")


def read_document(receipt: Receipt) -> dict[str, Any] | str:
    """The receipt's document, or why it cannot be read (an altered row is shown, not fatal)."""
    if receipt.unreadable is not None:
        return receipt.unreadable
    try:
        document: Any = receipt.document  # the stored text may be any JSON, or none
    except ValueError as exc:
        return f"{type(exc).__name__}: {exc}"
    if not isinstance(document, dict):
        return f"not a JSON object but {type(document).__name__}"
    return document


def receipt_json(receipt: Receipt) -> dict[str, Any]:
    """``--json`` form: the stored document with its ``hash`` added (as ``JSONLSink`` writes
    it); an unreadable row as ``seq``, ``receipt_id``, ``hash`` and ``unreadable``."""
    document = read_document(receipt)
    if isinstance(document, str):
        return {
            "seq": receipt.seq,
            "receipt_id": receipt.receipt_id,
            "hash": receipt.hash,
            "unreadable": document,
        }
    return {**document, "hash": receipt.hash}


def cites(receipt: Receipt, control: str) -> bool:
    """Whether the receipt's document lists ``control`` in its ``controls``; an unreadable or
    malformed row cites nothing (it is still shown by the unfiltered listing)."""
    document = read_document(receipt)
    if isinstance(document, str):
        return False
    cited = document.get("controls")
    return isinstance(cited, list) and control in cited


def _seq(receipt: Receipt) -> str:
    return place(receipt.partition, receipt.seq)


def _why(document: dict[str, Any]) -> str:
    if document.get("error"):
        return shorten(str(document["error"]), 80)
    return f"approved by {document['approver']}" if document.get("approver") else ""


def receipt_row(receipt: Receipt) -> tuple[str, ...]:
    """One line of the listing. An unreadable row is shown in place, marked UNREADABLE."""
    document = read_document(receipt)
    if isinstance(document, str):
        return (_seq(receipt), "-", "UNREADABLE", "-", "-", "-", receipt.receipt_id, document)
    finished = str(document.get("finished_at") or "-")
    return (
        _seq(receipt),
        finished[:19] + "Z" if len(finished) >= 19 else finished,
        str(document.get("result", "-")),
        str(document.get("action", "-")),
        str(document.get("effect_key") or "-"),
        who(document.get("principal")),
        str(document.get("action_id", "-")),
        _why(document),
    )


@click.command()
@click.option("--last", type=click.IntRange(min=1), metavar="N", help="Only the newest N.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document per line.")
@click.option(
    "--verify-chain",
    "verify",
    is_flag=True,
    help="Check the whole hash chain instead of listing; exit 1 on any break.",
)
@click.option(
    "--control",
    metavar="ID",
    help="Only receipts citing this control id (a filter: no match lists nothing).",
)
@click.option(
    "--check",
    "held",
    type=click.File("r", encoding="utf-8"),
    metavar="FILE|-",
    help="Check receipts you hold (JSON lines, as JSONLSink or --json wrote them) against the"
    " store: present and identical, missing, or replaced; exit 1 unless all are present.",
)
@proof_options
@store_url_option
def receipts(
    *,
    last: int | None,
    as_json: bool,
    verify: bool,
    control: str | None,
    held: IO[str] | None,
    checkpoints: str | None,
    public_key: str | None,
    origin: str | None,
    store_url: str | None,
) -> None:
    """Receipts in chain order (rows without a seq last).

    With --control ID, only the receipts of decisions taken under that control. With
    --verify-chain, walk the whole chain and print each break as `seq N  kind` (`seq -` for a
    row outside the chain); exit 1 if there is any. With --checkpoints FILE --public-key KEY
    it is also judged against the signed checkpoints: a cut tail, a rewound head and a
    rewrite before a checkpoint are breaks too (docs/checkpoints.md). With --check FILE (or -
    for stdin), judge each held receipt: what an auditor does after a failover, where a lost
    tail leaves the chain intact.
    """
    if held is not None:
        if verify or last is not None or control is not None or checkpoints or public_key:
            raise click.UsageError(
                "--check takes no --verify-chain, --last, --control or --checkpoints"
            )
        with existing_store(store_url) as store:
            check_file(store, held, as_json=as_json)
        return
    _refuse_mixed(verify=verify, last=last, control=control, proof=(checkpoints, public_key))
    if verify:
        _verify_chain(store_url, proven_checkpoints(checkpoints, public_key, origin), as_json)
        return
    if origin is not None:
        raise click.UsageError("--origin chooses among --checkpoints; give them too")
    with existing_store(store_url) as store:
        rows = store.receipts()
    if control is not None:
        rows = tuple(r for r in rows if cites(r, control))
    chosen = rows[-last:] if last else rows
    if as_json:
        for receipt in chosen:
            json_line(receipt_json(receipt))
    elif not chosen:
        click.echo("no receipts yet" if control is None else f"no receipts cite {control}")
    else:
        table([receipt_row(r) for r in chosen], header=HEADER, color_column=2)


def _refuse_mixed(
    *, verify: bool, last: int | None, control: str | None, proof: tuple[str | None, ...]
) -> None:
    if verify and last is not None:
        raise click.UsageError("--last limits the listing; --verify-chain checks every receipt")
    if verify and control is not None:
        raise click.UsageError("--control filters the listing; --verify-chain checks every receipt")
    if not verify and any(proof):
        raise click.UsageError("--checkpoints and --public-key go with --verify-chain")


def _verify_chain(
    store_url: str | None, proven: Sequence[Checkpoint] | None, as_json: bool
) -> None:
    heads = None if proven is None else heads_by_partition(proven)
    with existing_store(store_url) as store:
        rows, report = chain_snapshot(store, heads, _located_policy())
    show_report(rows, report, as_json=as_json)


def chain_snapshot(
    store: StateStore,
    checkpoints: Checkpointed = None,
    policy: Policy | None = None,
) -> tuple[tuple[Receipt, ...], ChainReport]:
    """The receipts, and the store's own verdict over its chain (``store.verify_chain``: the
    one verifier, reading rows, anchor and head as one snapshot, with the indexed columns and
    the cited approvals), judged against the heads of signed ``checkpoints`` when given and
    the approvals' grants under ``policy``. The rows are read again to name the receipts a
    break concerns."""
    report = store.verify_chain(policy, checkpoints=checkpoints)
    return store.receipts(), report


def _located_policy() -> Policy | None:
    """The policy file, when there is one (``$CTRLRUN_CONFIG`` or ./ctrlrun.yaml)."""
    from ctrlrun.config import load_policy_file
    from ctrlrun.runtime.locate import policy_path

    path = policy_path()
    return load_policy_file(path) if path.is_file() else None


def break_rows(rows: Sequence[Receipt], report: ChainReport) -> list[dict[str, Any]]:
    """Each break with the receipt it concerns, where one can be named."""
    by_seq = {(r.partition, r.seq): r.receipt_id for r in rows if r.seq is not None}
    unchained = iter(r.receipt_id for r in rows if r.seq is None)
    found = []
    for brk in report.breaks:
        receipt_id = (
            next(unchained, None) if brk.seq is None else by_seq.get((brk.partition, brk.seq))
        )
        if brk.kind not in _ROW_KINDS:
            receipt_id = None  # the seq names no row that is in the right place
        found.append(
            {
                "kind": str(brk.kind),
                "partition": brk.partition,
                "seq": brk.seq,
                "receipt_id": receipt_id,
                "what": describe(brk),
            }
        )
    return found


_ROW_KINDS: Final = frozenset(
    {
        BreakKind.CONTENT_ALTERED,
        BreakKind.HASH_MISSING,
        BreakKind.LINK_BROKEN,
        BreakKind.UNCHAINED,
        BreakKind.COLUMN_MISMATCH,
        BreakKind.UNREADABLE,
        BreakKind.APPROVAL_REUSED,
        BreakKind.APPROVAL_MISSING,
        BreakKind.APPROVAL_MISMATCH,
        BreakKind.APPROVAL_UNSIGNED,
        BreakKind.APPROVAL_QUORUM,
    }
)
"""The breaks found at a stored row, which the listing names by receipt id."""


def _head_json(head: ChainHead | None) -> dict[str, Any] | None:
    return None if head is None else {"seq": head.seq, "hash": head.hash}


def _where(report: ChainReport) -> str:
    """The summary's tail: the head, where the chain starts when pruned, and the newest
    checkpoint it was judged against."""
    parts = ["head row missing" if report.head is None else f"head seq {report.head.seq}"]
    if report.partitions > 1 and report.head is not None:
        longest = max(h.seq for h in report.heads if h is not None)
        parts = [f"{report.partitions} chains, the longest at seq {longest}"]
    if report.anchor.seq:
        parts.append(f"starts after seq {report.anchor.seq} (pruned)")
    if report.checkpointed is not None:
        parts.append(f"checkpointed up to seq {report.checkpointed.seq}")
    return "; ".join(parts)


def show_report(rows: Sequence[Receipt], report: ChainReport, *, as_json: bool) -> None:
    """Print the verdict; raise a one-line refusal (exit 1) if the chain is not intact."""
    breaks = break_rows(rows, report)
    head = report.head
    if as_json:
        json_line(
            {
                "ok": report.ok,
                "verified": report.verified,
                "total": report.total,
                "head": _head_json(head),
                "anchor": _head_json(report.anchor),
                "checkpointed": _head_json(report.checkpointed),
                "partitions": report.partitions,
                "heads": [_head_json(h) for h in report.heads or (head,)],
                "breaks": breaks,
            }
        )
    else:
        click.echo(
            f"chain: {report.verified} of {report.total} receipts verified; {_where(report)}"
        )
        lines = [
            (
                "seq "
                + ("-" if b["seq"] is None else str(b["seq"]))
                + (f" of partition {b['partition']}" if b["partition"] else ""),
                b["kind"],
                b["receipt_id"] or ("" if b["kind"] in _ROW_KINDS else b["what"]),
            )
            for b in breaks
        ]
        if lines:
            table(lines, color_column=1)
    if head is None:
        raise Refusal("the receipt chain head row is missing; the store is damaged")
    if breaks:
        raise Refusal(f"the receipt chain has {len(breaks)} break(s)")
