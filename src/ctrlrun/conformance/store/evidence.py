"""Evidence: the receipt chain is numbered from 1, linked, hashed over the stored bytes and
read back exactly; events come back in append order with stable, increasing ids."""

from __future__ import annotations

from typing import Any, Final

from ctrlrun.canonical import GENESIS_HASH, sha256_hex
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.receipt import BreakKind, ChainHead, Receipt, StoredReceipt, verify_chain
from ctrlrun.store.ops.evidence import append_events_in_txn

from .framework import Case, CaseContext, CaseFailed, check, finish, receipt_for, start

PAYLOAD: Final[dict[str, Any]] = {
    "text": 'ünïcødé ✓ "quoted"',
    "n": 12345678901234,
    "flags": [True, False, None],
    "nested": {"list": [1, "two", {"three": None}]},
}


def _write_chain(ctx: CaseContext) -> tuple[Any, list[Receipt]]:
    store = ctx.scratch.open()
    written = [store.record((), receipt_for(ctx.action(0), "denied", None, payload=PAYLOAD))]
    for n, outcome in enumerate((EffectState.COMMITTED, EffectState.FAILED), start=1):
        start(store, ctx.key(n), ctx.action(n))
        written.append(finish(store, ctx.key(n), ctx.action(n), 1, outcome))
    written.append(store.record((), receipt_for(ctx.action(3), "blocked", ctx.key(1))))
    return store, [r for r in written if r is not None]


def receipt_chain(ctx: CaseContext) -> str:
    """Receipts are numbered 1..n in write order within their chain (partition: a store may
    keep several, and states the partition in every receipt off partition 0); each links to
    its chain predecessor's hash (the first to genesis) and its hash is SHA-256 of the stored
    text; ``receipts()`` returns them byte-identical; each head is (n, last hash) of its
    chain; the chains verify — and a copy with one altered receipt does not (so the
    verification is not vacuous)."""
    store, written = _write_chain(ctx)
    heads = store.chain_heads()
    chains: dict[int, list[StoredReceipt]] = {}
    for receipt in written:
        chains.setdefault(receipt.partition, []).append(receipt)
    for partition, chain in chains.items():
        _check_linked(partition, chain, heads)
    check(
        sorted(store.receipts(), key=_place) == sorted(written, key=_place),
        "receipts() differs from what was returned",
    )
    check(store.receipts(ctx.action(1)) == (written[1],), "receipts(action_id) is not filtered")
    report = store.verify_chain()
    check(report.ok and report.verified == len(written), f"the chain does not verify: {report}")
    first = chains[written[0].partition]
    altered = [
        StoredReceipt(r.seq, r.receipt_id, r.text.replace("denied", "committed"), r.hash)
        for r in first
    ]
    found = [(b.kind, b.seq) for b in verify_chain(altered, None).breaks]
    check(found == [(BreakKind.CONTENT_ALTERED, 1)], f"control: alteration not found: {found}")
    return (
        f"{len(written)} receipts in {len(chains)} chain(s) numbered from 1, linked, exact,"
        " verified"
    )


def _place(receipt: StoredReceipt) -> tuple[int, int]:
    return receipt.partition, receipt.seq or 0


def _check_linked(partition: int, chain: list[StoredReceipt], heads: tuple[ChainHead, ...]) -> None:
    """One chain's receipts as written: numbered 1..k, linked, hashed, stating the chain."""
    seqs = [r.seq for r in chain]
    check(seqs == list(range(1, len(chain) + 1)), f"receipts numbered {seqs}, expected 1..n")
    previous = GENESIS_HASH
    for receipt in chain:
        document = receipt.document
        where = f"seq {receipt.seq} of partition {partition}"
        check(receipt.hash == sha256_hex(receipt.text.encode()), f"{where}: bad hash")
        check(document.get("seq") == receipt.seq, f"{where}: seq not in the document")
        check(document.get("prev_hash") == previous, f"{where}: broken link")
        check(document.get("partition", 0) == partition, f"{where}: states another chain")
        previous = receipt.hash or ""
    head = heads[partition] if partition < len(heads) else None
    check(head == (len(chain), previous), f"head {head} of partition {partition}: not its last")


def events_in_order(ctx: CaseContext) -> str:
    """Events come back in append order (the caller's, then the store's own for a reservation
    and an outcome), with unique, positive, strictly increasing ids that are the same whether
    read whole or filtered by action, and payloads that round-trip exactly."""
    store = ctx.scratch.open()
    mine = ctx.action("events")
    drafts = tuple(
        EventDraft(EventType.ACTION_PROPOSED, mine, data={**PAYLOAD, "i": i}) for i in range(3)
    )
    store.record(drafts, None)
    start(store, ctx.key(), mine)
    store.record((EventDraft(EventType.POLICY_EVALUATED, ctx.action("other")),), None)
    finish(store, ctx.key(), mine, 1, EffectState.COMMITTED)
    whole = store.events()
    ids = [e.event_id for e in whole]
    check(
        all(isinstance(i, int) and i > 0 for i in ids) and ids == sorted(set(ids)),
        f"event ids are not unique, positive and increasing: {ids}",
    )
    filtered = store.events(mine)
    check(
        [(e.event_id, e.type) for e in filtered]
        == [(e.event_id, e.type) for e in whole if e.action_id == mine],
        "event ids are not stable: the filtered log disagrees with the whole log",
    )
    kinds = [e.type for e in filtered]
    expected = [EventType.ACTION_PROPOSED] * 3 + [
        EventType.EFFECT_RESERVED,
        EventType.EXECUTION_STARTED,
        EventType.EXECUTION_COMMITTED,
    ]
    check(kinds == expected, f"events out of append order: {kinds}")
    payloads = [dict(e.data) for e in filtered[:3]]
    check(
        payloads == [{**PAYLOAD, "i": i} for i in range(3)],
        f"event payloads did not round-trip: {payloads}",
    )
    return f"{len(whole)} events in order, ids stable and increasing, payloads exact"


def two_transactions(ctx: CaseContext) -> str:
    """A protected call's happy path costs two write transactions (the reservation, then
    the outcome with its events and receipt), counted by ``write_transactions``."""
    store = ctx.scratch.open()
    before = store.write_transactions
    start(store, ctx.key(), ctx.action())
    finish(store, ctx.key(), ctx.action(), 1, EffectState.COMMITTED)
    spent = store.write_transactions - before
    check(spent == 2, f"a protected call cost {spent} write transactions, expected 2")
    return "start + finish = 2 write transactions"


class _Boom(Exception):
    """Raised inside ``transact`` to roll its work back."""


def transact_atomic(ctx: CaseContext) -> str:
    """``transact`` (the extension point durable work builds on) commits its work, which a
    later ``read`` sees; work that raises is rolled back whole and the exception propagates."""
    store = ctx.scratch.open()
    kept, dropped = ctx.action("kept"), ctx.action("dropped")
    store.transact(lambda txn: append_events_in_txn(txn, [_proposed(kept)]))
    rows = store.read(lambda txn: txn.all("event_list", {}))
    check([r["action_id"] for r in rows] == [kept], f"read after transact saw {len(rows)} rows")

    def fails(txn: Any) -> None:
        append_events_in_txn(txn, [_proposed(dropped)])
        raise _Boom

    try:
        store.transact(fails)
    except _Boom:
        pass
    else:
        raise CaseFailed("transact swallowed the work's exception")
    check(store.events(dropped) == (), "work that raised was committed in part")
    return "committed work is read back; work that raised left nothing"


def _proposed(action_id: str) -> EventDraft:
    return EventDraft(EventType.ACTION_PROPOSED, action_id)


CASES: Final = (
    Case.of("evidence", "receipt-chain", receipt_chain),
    Case.of("evidence", "events-in-order", events_in_order),
    Case.of("evidence", "two-transactions", two_transactions),
    Case.of("evidence", "transact-atomic", transact_atomic),
)
