"""Receipts a caller holds, checked against a store: ``check_held_receipts``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctrlrun.kernel.held import HeldCheck, check_receipts
from ctrlrun.store.protocol import StateStore


def check_held_receipts(store: StateStore, held: Iterable[Any]) -> list[HeldCheck]:
    """Judge each held receipt copy (a ``JSONLSink`` line or a ``ctrlrun receipts --json``
    line, parsed: the stored document with its ``hash``) against ``store``: ``present`` and
    identical, ``missing``, ``replaced`` (``found`` names what holds its place), or
    ``not_a_receipt``. One read of the store's receipts; writes nothing. See
    ``ctrlrun.kernel.held``."""
    return check_receipts(held, store.receipts())
