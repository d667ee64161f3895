"""The one verifier of stored evidence: the receipt chain, and the approvals its receipts
cite. ``store.verify_chain()``, ``ctrlrun receipts --verify-chain``, the console's receipts
page and ``ctrlrun verify``'s evidence guarantee all report what ``evidence_breaks`` yields.

Beyond the chain (``kernel.receipt.verify_chain``), each receipt that cites an approval is
checked against the stored request and its grants: an approval is spent once, so two
committed receipts citing one is ``approval_reused``; a cited request that is not there is
``approval_missing`` (so is a committed call the policy approved that cites none); a request
for another action hash is ``approval_mismatch``; and its grants must meet the policy the
receipt was decided under: under named approvers, grants whose signature verifies over the
receipt's own action hash (else ``approval_unsigned``), and as many distinct approvers, none
of them an excluded requester, as it asks (else ``approval_quorum``). The policy is the one
given when its hash is the receipt's; otherwise the request's own ``required`` and
``excluded`` stand in, and signatures cannot be judged (no keys). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ctrlrun.kernel.approval import ApprovalRecord, Grant, requesters
from ctrlrun.kernel.identity import identities
from ctrlrun.kernel.partition import receipt_partition
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.receipt import (
    BreakKind,
    ChainBreak,
    ChainHead,
    ChainReport,
    ReceiptResult,
    StoredReceipt,
    verify_chain,
)
from ctrlrun.kernel.signing import grant_message, verify

_COMMITTED: Final = str(ReceiptResult.COMMITTED)


@dataclass(frozen=True, slots=True)
class ApprovalEvidence:
    """A stored request and every grant row it has."""

    record: ApprovalRecord
    grants: tuple[Grant, ...] = ()


Checkpointed = Sequence[ChainHead] | Mapping[int, Sequence[ChainHead]] | None
"""The heads verified checkpoints state: per partition, or a sequence for partition 0 alone
(None: no checkpoints given)."""


def partition_checkpoints(checkpoints: Checkpointed, partition: int) -> Sequence[ChainHead] | None:
    """The heads ``checkpoints`` state for ``partition`` (None when none were given)."""
    if checkpoints is None:
        return None
    if isinstance(checkpoints, Mapping):
        return checkpoints.get(partition, ())
    return checkpoints if partition == 0 else ()


@dataclass(frozen=True, slots=True)
class EvidenceSnapshot:
    """What the verifier reads: the receipts (with their indexed columns), the head read
    around them, the requests they cite (by id), and the policy to judge grants by (None:
    the requests' own rules, no signatures)."""

    receipts: tuple[StoredReceipt, ...]
    head: ChainHead | None
    approvals: Mapping[str, ApprovalEvidence] = field(default_factory=dict)
    policy: Policy | None = None
    anchor: ChainHead | None = None  # where the chain starts after a prune (None: genesis)
    checkpoints: Checkpointed = None  # heads signed checkpoints state, verified
    heads: tuple[ChainHead | None, ...] = ()
    """Every partition's head, 0, 1, … (empty: one chain, ``head``)."""
    anchors: Mapping[int, ChainHead] = field(default_factory=dict)
    """Where each partition starts after a prune (absent: genesis; partition 0: ``anchor``)."""


def cited_approvals(receipts: Iterable[StoredReceipt]) -> set[str]:
    """The approval ids the readable receipts among ``receipts`` cite."""
    found = set()
    for receipt in receipts:
        document = _document(receipt)
        if document is not None and isinstance(document.get("approval_id"), str):
            found.add(document["approval_id"])
    return found


def verify_evidence(snapshot: EvidenceSnapshot) -> ChainReport:
    """The chain's report with every approval break added (``evidence_breaks``)."""
    chain = _chain(snapshot)
    extra = tuple(approval_breaks(snapshot))
    return replace(chain, breaks=chain.breaks + extra) if extra else chain


def evidence_breaks(snapshot: EvidenceSnapshot) -> Iterator[ChainBreak]:
    """Every named break of ``snapshot``: the chain's, then the approvals'."""
    yield from _chain(snapshot).breaks
    yield from approval_breaks(snapshot)


def _chain(snapshot: EvidenceSnapshot) -> ChainReport:
    """Every partition's chain walked by ``verify_chain``, the reports joined in partition
    order (``head``, ``anchor`` and ``checkpointed`` are partition 0's)."""
    heads = snapshot.heads or (snapshot.head,)  # one chain: the snapshot's head
    count = len(heads)
    rows: list[list[StoredReceipt]] = [[] for _ in range(count)]
    stray: list[ChainBreak] = []
    for row in snapshot.receipts:
        if 0 <= row.partition < count:
            rows[row.partition].append(row)
        else:  # a row in no chain the store keeps: it links to nothing
            stray.append(ChainBreak(BreakKind.LINK_BROKEN, row.seq, row.partition))
    reports = [
        verify_chain(
            rows[p],
            heads[p],
            anchor=snapshot.anchors.get(p, snapshot.anchor if p == 0 else None),
            checkpoints=partition_checkpoints(snapshot.checkpoints, p),
            partition=p,
        )
        for p in range(count)
    ]
    first = reports[0]
    named = [brk for report in reports for brk in report.breaks]
    return replace(
        first,
        breaks=(
            *named,
            *_misplaced(snapshot.receipts, count, {(b.partition, b.seq) for b in named}),
            *stray,
            *_lost_partitions(snapshot.checkpoints, count),
        ),
        verified=sum(report.verified for report in reports),
        total=len(snapshot.receipts),
        heads=snapshot.heads,
    )


def _misplaced(
    receipts: Iterable[StoredReceipt], count: int, named: set[tuple[int, int | None]]
) -> Iterator[ChainBreak]:
    """A receipt written since the chains were partitioned (``written`` above 0) that sits
    in, and states, a chain other than the one its effect key (else its action id) hashes to:
    placed there by a writer that chose the chain itself. A receipt already named is left to
    that break; history from before partitioning is partition 0's, whatever its key."""
    for row in receipts:
        if row.written is None or row.written <= 0 or (row.partition, row.seq) in named:
            continue
        document = _document(row)
        if document is None or not isinstance(document.get("action_id"), str):
            continue
        key = document.get("effect_key")
        source = key if isinstance(key, str) else None
        if receipt_partition(source, document["action_id"], count) != row.partition:
            yield ChainBreak(BreakKind.LINK_BROKEN, row.seq, row.partition)


def _lost_partitions(checkpoints: Checkpointed, count: int) -> Iterator[ChainBreak]:
    """A checkpointed chain the store no longer keeps (its head row gone): its tail is cut."""
    if not isinstance(checkpoints, Mapping):
        return
    for partition, heads in sorted(checkpoints.items()):
        newest = max((head.seq for head in heads), default=0)
        if partition >= count and newest > 0:
            yield ChainBreak(BreakKind.TAIL_CUT, newest, partition)


def approval_breaks(snapshot: EvidenceSnapshot) -> Iterator[ChainBreak]:
    """Per chained, readable receipt in (partition, seq) order, at most one approval break."""
    spent: set[str] = set()
    chained = sorted(
        (r for r in snapshot.receipts if r.seq is not None), key=lambda r: (r.partition, r.seq or 0)
    )
    for receipt in chained:
        document = _document(receipt)
        if document is None:
            continue  # the chain names it already (content_altered)
        kind = _receipt_break(document, snapshot, spent)
        if kind is not None:
            yield ChainBreak(kind, receipt.seq, receipt.partition)


def _receipt_break(
    document: dict[str, Any], snapshot: EvidenceSnapshot, spent: set[str]
) -> BreakKind | None:
    approval_id = document.get("approval_id")
    committed = document.get("result") == _COMMITTED
    if not isinstance(approval_id, str):
        approved = committed and document.get("decision") == "approve"
        return BreakKind.APPROVAL_MISSING if approved else None
    if committed:
        if approval_id in spent:
            return BreakKind.APPROVAL_REUSED
        spent.add(approval_id)
    evidence = snapshot.approvals.get(approval_id)
    if evidence is None:
        return BreakKind.APPROVAL_MISSING
    if evidence.record.action_hash != document.get("action_hash"):
        return BreakKind.APPROVAL_MISMATCH
    return _grants_break(document, evidence, snapshot.policy)


def _grants_break(
    document: dict[str, Any], evidence: ApprovalEvidence, policy: Policy | None
) -> BreakKind | None:
    record = evidence.record
    required, excluded = record.required, record.excluded
    keys: Mapping[str, str] = {}
    if policy is not None and policy.policy_hash == document.get("policy_hash"):
        entry = policy.entry(str(document.get("action")))
        if entry is not None:
            required = entry.approval.count
            excluded = requesters(document) if entry.approval.distinct_from_requester else ()
        keys = policy.approvers
    grants = _grants(evidence)
    if keys:
        grants = [g for g in grants if _verifies(keys, record, document, g)]
        if not grants:
            return BreakKind.APPROVAL_UNSIGNED
    # one person under look-alike names is one approver, as consumption counts them
    named = identities(g.approver for g in grants) - identities(excluded)
    return BreakKind.APPROVAL_QUORUM if len(named) < required else None


def _grants(evidence: ApprovalEvidence) -> Sequence[Grant]:
    """The request's grant rows; a request answered before grants had rows (one approver,
    its name on the request) counts that approver, unsigned."""
    record = evidence.record
    if evidence.grants or record.approver is None or record.required != 1:
        return evidence.grants
    return (Grant(record.approver, record.answered_at or record.created_at, None),)


def _verifies(
    keys: Mapping[str, str], record: ApprovalRecord, document: dict[str, Any], grant: Grant
) -> bool:
    """Whether ``grant`` is signed by the key the policy names for its approver, over the
    action hash and policy hash the receipt itself carries."""
    key = keys.get(grant.approver)
    if key is None or grant.signature is None:
        return False
    message = grant_message(
        approval_id=record.approval_id,
        action_hash=str(document.get("action_hash")),
        policy_hash=str(document.get("policy_hash")),
        expires_at=record.expires_at,
        approver=grant.approver,
    )
    return verify(key, message, grant.signature)


def _document(receipt: StoredReceipt) -> dict[str, Any] | None:
    try:
        document = json.loads(receipt.text)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None
