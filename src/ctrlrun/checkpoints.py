"""Signed checkpoints of the receipt chain, and retention that keeps proof (docs/checkpoints.md).

The operator's side, never an agent's: ``make_checkpoint`` signs every partition's head with an
Ed25519 key the agents do not hold and appends the statement to places outside the store (a
file, a webhook) and then to the store; ``load_checkpoints`` reads such a file back, proving
every statement with the public key, for ``StateStore.verify_chain(checkpoints=…)``; ``prune``
removes receipts (and their events) that a checkpoint covers, leaving a chain that verifies
from that checkpoint.

    from ctrlrun.checkpoints import make_checkpoint
    make_checkpoint(store, Path("checkpoint.key").read_bytes(), file="/audit/checkpoints")

Run it on a schedule (cron, a systemd timer): a cut tail is provable only up to the newest
checkpoint. ``cryptography`` (the ``signing`` extra) is imported on first use.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ctrlrun._time import utc_now
from ctrlrun.errors import (
    ChainRefusal,
    ChainRefused,
    CheckpointInvalid,
    CheckpointReason,
    InvalidArgument,
)
from ctrlrun.kernel import signing
from ctrlrun.kernel.checkpoint import (
    DEFAULT_ORIGIN,
    Checkpoint,
    PartitionHead,
    checkpoint_body,
    partition_heads,
    read_statements,
    sign_statement,
    verified,
)
from ctrlrun.kernel.receipt import GENESIS_HEAD, ChainHead, ChainReport, describe
from ctrlrun.store.ops import Txn
from ctrlrun.store.protocol import StateStore
from ctrlrun.store.stats import refresh_stats

__all__ = [
    "DEFAULT_ORIGIN",
    "ChainRefusal",
    "ChainRefused",
    "Checkpoint",
    "CheckpointInvalid",
    "CheckpointReason",
    "FileSink",
    "Pruned",
    "WebhookSink",
    "checkpoint_heads",
    "heads_by_partition",
    "load_checkpoints",
    "make_checkpoint",
    "prune",
    "verify_store",
]

Sink = Callable[[Checkpoint], None]
WEBHOOK_TIMEOUT: Final = 10.0


class FileSink:
    """Appends each statement, then a blank line, to ``path`` (created 0644 if absent),
    flushed to disk before returning. Keep the file where the store's writers cannot write:
    another host, a write-once bucket, a log shipped away."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __call__(self, checkpoint: Checkpoint) -> None:
        data = (checkpoint.statement + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


class WebhookSink:
    """POSTs ``{"type": "ctrlrun.checkpoint", "origin": …, "statement": …}`` as JSON to
    ``url``; anything but a 2xx answer within ``timeout`` seconds is a failure. The body is
    not signed by the transport: the statement signs itself."""

    def __init__(self, url: str, *, timeout: float = WEBHOOK_TIMEOUT) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidArgument(f"a checkpoint webhook is an http(s) URL, got {url!r}")
        self.url, self.timeout = url, timeout

    def __call__(self, checkpoint: Checkpoint) -> None:
        body = {
            "type": "ctrlrun.checkpoint",
            "origin": checkpoint.origin,
            "statement": checkpoint.statement,
        }
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
            self.url,
            data=json.dumps(body).encode("utf-8"),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
            answer.read()


def read_checkpoint_text(path: str | os.PathLike[str]) -> str:
    """The text of a checkpoint file; ``CheckpointInvalid`` (``malformed``) if it cannot be
    read as UTF-8 text."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointInvalid(
            f"cannot read the checkpoint file {os.fspath(path)}: {exc}",
            reason=CheckpointReason.MALFORMED,
        ) from exc


def load_checkpoints(
    path: str | os.PathLike[str], public_key: str, *, origin: str | None = None
) -> tuple[Checkpoint, ...]:
    """Every checkpoint in the file at ``path`` (of ``origin`` only, when given), each proven
    by ``public_key`` (``ed25519:<base64>``). A statement that is malformed, not signed by
    that key, or whose signature does not verify (edited, forged) refuses the whole file
    (``CheckpointInvalid`` naming its line): a verifier never judges a chain against
    checkpoints it cannot trust."""
    signing.check_public_key(public_key)
    return verified(read_statements(read_checkpoint_text(path)), public_key, origin)


def checkpoint_heads(
    checkpoints: Sequence[Checkpoint], partition: int = 0
) -> tuple[ChainHead, ...]:
    """The ``(seq, hash)`` heads the checkpoints state for ``partition``, for
    ``StateStore.verify_chain(checkpoints=…)``."""
    return tuple(partition_heads(checkpoints, partition))


def heads_by_partition(checkpoints: Sequence[Checkpoint]) -> dict[int, tuple[ChainHead, ...]]:
    """The ``(seq, hash)`` heads the checkpoints state, per partition they name, for
    ``StateStore.verify_chain(checkpoints=…)``."""
    named = max((len(c.heads) for c in checkpoints), default=1)
    return {p: checkpoint_heads(checkpoints, p) for p in range(named)}


def verify_store(store: StateStore, checkpoints: Sequence[Checkpoint] | None) -> ChainReport:
    """``store.verify_chain`` against the heads of ``checkpoints`` (None: without any), every
    partition against its own."""
    heads = None if checkpoints is None else heads_by_partition(checkpoints)
    return store.verify_chain(checkpoints=heads)


def _refuse_broken(report: ChainReport, operation: str) -> None:
    if report.ok:
        return
    what = "; ".join(describe(brk) for brk in report.breaks[:3]) or "the head row is missing"
    raise ChainRefused(
        f"the receipt chain does not verify ({what}); {operation} refused: settle the break"
        " first (docs/checkpoints.md)",
        reason=ChainRefusal.CHAIN_BROKEN,
        operation=operation,
    )


def make_checkpoint(
    store: StateStore,
    private_key_pem: bytes,
    *,
    origin: str = DEFAULT_ORIGIN,
    file: str | os.PathLike[str] | None = None,
    sinks: Sequence[Sink] = (),
    now: datetime | None = None,
) -> Checkpoint:
    """Sign the store's chain head(s) and the time, and append the statement to ``file``
    (``FileSink``) and every other sink, then to the store's ``checkpoints`` table.

    Before signing, the chain is verified against the checkpoints already in ``file`` (those
    of ``origin``, proven by the key's public half): a chain that was cut, rewound or
    rewritten since is refused (``ChainRefused(chain_broken)``), never endorsed. A sink that
    fails raises ``ChainRefused(sink_failed)``; the sinks before it keep the statement (a
    statement in more places proves nothing false) and the store is not written."""
    public_key = signing.public_key_text(private_key_pem)
    outside: list[Sink] = []
    earlier: tuple[Checkpoint, ...] | None = None  # a first checkpoint has none to match
    if file is not None:
        outside.append(FileSink(file))
        if Path(file).exists():
            earlier = load_checkpoints(file, public_key, origin=origin)
    report = verify_store(store, earlier)
    _refuse_broken(report, "checkpoint")
    heads = report.heads or (report.head,)
    signed = tuple(PartitionHead(p, h.seq, h.hash) for p, h in enumerate(heads) if h is not None)
    body = checkpoint_body(origin, signed, now or utc_now())
    checkpoint = _signed(body, private_key_pem)
    for sink in (*outside, *sinks):
        _deliver(sink, checkpoint)
    store.transact(lambda txn: _record(txn, checkpoint))
    return checkpoint


def _signed(body: str, private_key_pem: bytes) -> Checkpoint:
    (statement,) = read_statements(sign_statement(body, private_key_pem))
    return statement.checkpoint


def _deliver(sink: Sink, checkpoint: Checkpoint) -> None:
    try:
        sink(checkpoint)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        where = getattr(sink, "path", None) or getattr(sink, "url", None) or repr(sink)
        raise ChainRefused(
            f"the checkpoint could not be appended to {where}: {exc}; the store was not written",
            reason=ChainRefusal.SINK_FAILED,
            operation="checkpoint",
        ) from exc


def _record(txn: Txn, checkpoint: Checkpoint) -> None:
    txn.run(
        "checkpoint_insert",
        {
            "made_at": txn.ts(checkpoint.time),
            "origin": checkpoint.origin,
            "statement": checkpoint.statement,
        },
    )


def stored_checkpoints(store: StateStore) -> tuple[str, ...]:
    """The statements the store's ``checkpoints`` table keeps, oldest first (a copy: it
    proves nothing against whoever can write the store; the file does)."""
    rows = store.read(lambda txn: txn.all("checkpoint_list", {}))
    return tuple(str(row["statement"]) for row in rows)


# --- retention -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pruned:
    """What ``prune`` removed: receipts up to ``anchor.seq`` (the chain now starts there) and
    ``events`` events; ``checkpoint`` is the statement it anchored at."""

    anchor: ChainHead
    receipts: int
    events: int
    checkpoint: Checkpoint
    budget_rows: int = 0  # windows (and their charges) that ended before the checkpoint


def prune(store: StateStore, before: datetime, checkpoints: Sequence[Checkpoint]) -> Pruned:
    """Remove the receipts the newest checkpoint made before ``before`` covers, and their
    events, keeping what verification needs (docs/checkpoints.md).

    The chain must first verify against ``checkpoints`` (proven: ``load_checkpoints``), or
    nothing is removed (``ChainRefused(chain_broken)``). The anchor is the newest checkpoint
    whose time is before ``before`` and that covers receipts still held
    (``ChainRefused(no_checkpoint)`` if none). In one write transaction: the receipts with
    seq ≤ its seq are deleted, and the events of their actions older than it — never an
    event of an action that keeps a receipt, of an open (pending or granted) approval, or of
    an effect not settled; no effect record or approval is touched; and the anchor is set to
    the checkpoint's ``(seq, hash)`` with its signed statement. Budget windows that ended
    before the checkpoint (a later window of the budget began by then), and their charges,
    go too: no decision reads them again. The stats rollup is brought up to date first, so
    ``ctrlrun stats`` still counts what was pruned."""
    report = verify_store(store, checkpoints)
    _refuse_broken(report, "prune")
    anchors = store.chain_anchors()
    candidates = [c for c in checkpoints if c.time < before and _covers(c, anchors)]
    if not candidates:
        raise ChainRefused(
            "no checkpoint made before that date covers receipts the store still holds;"
            " nothing was removed (run `ctrlrun checkpoint`, then prune after it)",
            reason=ChainRefusal.NO_CHECKPOINT,
            operation="prune",
        )
    chosen = max(candidates, key=lambda c: (c.time, sum(h.seq for h in c.heads)))
    # `ctrlrun stats` counts from a rollup of the receipts: fold what it has not reached yet
    # (everything up to today's heads, beyond the anchors), so pruned receipts stay counted
    refresh_stats(store)
    return store.transact(lambda txn: _prune_in_txn(txn, chosen, anchors))


def _covers(checkpoint: Checkpoint, anchors: Mapping[int, ChainHead]) -> bool:
    """Whether ``checkpoint`` states a head beyond where some partition's chain now starts."""
    return any(h.seq > anchors.get(h.partition, GENESIS_HEAD).seq for h in checkpoint.heads)


def _prune_in_txn(txn: Txn, checkpoint: Checkpoint, anchors: Mapping[int, ChainHead]) -> Pruned:
    """Each partition the checkpoint carries beyond its anchor, cut at the checkpoint's head:
    its receipts, their actions' events, and its anchor moved there."""
    receipts = events = 0
    before = txn.ts(checkpoint.time)
    for head in checkpoint.heads:
        if head.seq <= anchors.get(head.partition, GENESIS_HEAD).seq:
            continue
        at = {"partition": head.partition, "seq": head.seq}
        txn.one("chain_head_lock", at)  # serialises with this chain's writers and prunes
        row = txn.one("receipt_at", at)
        if row is None or row["hash"] != head.hash:
            raise ChainRefused(
                f"receipt {head.seq} of partition {head.partition} is not the one the"
                " checkpoint states; nothing was removed",
                reason=ChainRefusal.CHAIN_BROKEN,
                operation="prune",
            )
        events += txn.run("prune_events", {**at, "before": before})
        receipts += txn.run("prune_receipts", at)
        txn.run(
            "anchor_set",
            {
                "partition_id": head.partition,
                "seq": head.seq,
                "hash": head.hash,
                "statement": checkpoint.statement,
                "anchored_at": txn.ts(txn.now),
            },
        )
    cutoff = {"before": before}
    budget_rows = txn.run("budget_prune_charges", cutoff) + txn.run("budget_prune_windows", cutoff)
    return Pruned(checkpoint.heads[0].head, receipts, events, checkpoint, budget_rows)
