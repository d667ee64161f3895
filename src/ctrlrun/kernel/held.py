"""A receipt a caller holds, checked against the receipts a store holds (pure).

What an auditor does after a failover: the chain on the new primary verifies whether or not it
lost its tail (a lost tail leaves no break behind), so the evidence is the copies handed out
before — ``JSONLSink`` lines or ``ctrlrun receipts --json`` lines, each the stored document
with its ``hash`` added. Each copy is judged:

* ``present`` — the store holds a receipt of that id with that hash: identical;
* ``replaced`` — the store holds that id with another hash, or not that id but another
  receipt at its ``seq`` (``found`` names it): the store's history was rewritten there;
* ``missing`` — neither its id nor its seq is in the store: the tail was lost;
* ``not_a_receipt`` — the copy is not a receipt document whose hash matches its content: it
  proves nothing either way (``detail`` says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ctrlrun.canonical import canonical_text, sha256_hex
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.partition import stated_partition
from ctrlrun.kernel.receipt import Receipt


class HeldStatus(StrEnum):
    """The verdict on one held receipt (module docstring)."""

    PRESENT = "present"
    MISSING = "missing"
    REPLACED = "replaced"
    NOT_A_RECEIPT = "not_a_receipt"


@dataclass(frozen=True, slots=True)
class HeldCheck:
    """One held receipt's verdict: its id and seq as the copy says, and for ``replaced`` the
    receipt the store holds in its place (``found``)."""

    receipt_id: str | None
    seq: int | None
    status: HeldStatus
    found: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is HeldStatus.PRESENT

    def to_dict(self) -> dict[str, Any]:
        return {
            "receipt_id": self.receipt_id,
            "seq": self.seq,
            "status": str(self.status),
            "found": self.found,
            "detail": self.detail,
        }


class StoredIndex:
    """The store's receipts by id and by place (partition, seq)."""

    def __init__(self, stored: Iterable[Receipt]) -> None:
        self.by_id: dict[str, Receipt] = {}
        self.by_seq: dict[tuple[int, int], Receipt] = {}
        for receipt in stored:
            self.by_id[receipt.receipt_id] = receipt
            if receipt.seq is not None:
                self.by_seq[(receipt.partition, receipt.seq)] = receipt


def check_held(held: Any, index: StoredIndex) -> HeldCheck:
    """Judge one held copy against ``index`` (module docstring)."""
    if not isinstance(held, Mapping):
        return HeldCheck(None, None, HeldStatus.NOT_A_RECEIPT, detail="not a JSON object")
    document = {key: value for key, value in held.items() if key != "hash"}
    receipt_id, seq, digest = document.get("receipt_id"), document.get("seq"), held.get("hash")
    shown_id = receipt_id if isinstance(receipt_id, str) else None
    shown_seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
    why = _not_genuine(document, digest, shown_id)
    if why:
        return HeldCheck(shown_id, shown_seq, HeldStatus.NOT_A_RECEIPT, detail=why)
    assert shown_id is not None
    stored = index.by_id.get(shown_id)
    if stored is not None:
        if stored.hash == digest:
            return HeldCheck(shown_id, shown_seq, HeldStatus.PRESENT)
        return HeldCheck(
            shown_id,
            shown_seq,
            HeldStatus.REPLACED,
            found=shown_id,
            detail="the store holds this receipt id with different content",
        )
    partition = stated_partition(document)
    place = None if shown_seq is None or partition is None else (partition, shown_seq)
    other = index.by_seq.get(place) if place is not None else None
    if other is not None:
        return HeldCheck(
            shown_id,
            shown_seq,
            HeldStatus.REPLACED,
            found=other.receipt_id,
            detail=f"seq {shown_seq}{f' of partition {partition}' if partition else ''} now"
            " holds another receipt",
        )
    return HeldCheck(shown_id, shown_seq, HeldStatus.MISSING, detail="not in the store")


def _not_genuine(document: dict[str, Any], digest: Any, receipt_id: str | None) -> str:
    """Why the copy is not a receipt whose hash matches its content ("" when it is)."""
    if receipt_id is None:
        return "no receipt_id"
    if not isinstance(digest, str):
        return "no hash"
    try:
        text = canonical_text(document)
    except InvalidArgument as exc:
        return f"not canonical JSON ({type(exc).__name__})"
    if sha256_hex(text.encode("utf-8")) != digest:
        return "its hash does not match its content (altered, or not a receipt copy)"
    return ""


def check_receipts(held: Iterable[Any], stored: Iterable[Receipt]) -> list[HeldCheck]:
    """Judge every held copy against the store's receipts ``stored``."""
    index = StoredIndex(stored)
    return [check_held(one, index) for one in held]
