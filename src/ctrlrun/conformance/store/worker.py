"""A contender in a cross-process case: ``python -m ctrlrun.conformance.store.worker <payload>``.

It opens the store the payload's URL names (with ``ctrlrun.store.open_store``, the way any
process would), waits at the file barrier, makes one attempt, and prints one JSON object:
its pid, the ``ctrlrun`` it imported, the store class it got, and its ``outcome`` —
``won``, ``refused:<Class>:<reason or state>`` or ``error:<Class>:<message>``.

Tasks: ``reserve`` (reserve, call the fake remote, record COMMITTED), ``consume`` (consume
the approval and reserve this worker's own key) and ``grant`` (grant the approval as this
worker's own approver).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ctrlrun
from ctrlrun._rendezvous import arrive, mark_once, worker_payload, worker_reply
from ctrlrun.errors import Refused, evidence_name
from ctrlrun.kernel.effect import EffectState
from ctrlrun.store import open_store
from ctrlrun.store.protocol import StartRequest, StateStore

from .framework import finish


def attempt(payload: dict[str, Any], store: StateStore, out: dict[str, Any]) -> None:
    """The one attempt; fills ``out['outcome']`` (and ``double`` if the remote ran twice)."""
    if payload["task"] == "grant":
        _grant(payload, store, out)
        return
    request = StartRequest(
        action_id=payload["action_id"],
        effect_key=payload["key"],
        approval_id=payload.get("approval_id"),
        action_hash=payload.get("action_hash"),
    )
    try:
        started = store.start_action(request)
    except Refused as exc:
        detail = getattr(exc, "state", None) or exc.reason
        out["outcome"] = f"refused:{evidence_name(exc)}:{detail}"
        return
    out["outcome"] = "won"
    remote = Path(payload["remote"])
    mark_once(remote / f"call-{os.getpid()}")
    if payload["task"] == "reserve":
        out["double"] = not mark_once(remote / "executed", str(os.getpid()))
        attempt_no = started.reservation.attempt if started.reservation else 1
        finish(store, payload["key"], payload["action_id"], attempt_no, EffectState.COMMITTED)


def _grant(payload: dict[str, Any], store: StateStore, out: dict[str, Any]) -> None:
    try:
        record = store.grant_approval(payload["approval_id"], payload["approver"])
    except Refused as exc:
        out["outcome"] = f"refused:{evidence_name(exc)}:{exc.reason}"
        return
    out["outcome"], out["status"] = "won", str(record.status)


def main() -> None:
    payload = worker_payload()
    out: dict[str, Any] = {"pid": os.getpid(), "ctrlrun": ctrlrun.__file__}
    out["action_id"] = payload["action_id"]
    store = open_store(payload["url"])
    out["store_class"] = type(store).__qualname__
    arrive(payload["barrier"], payload["parties"], timeout=payload["barrier_timeout"])
    try:
        attempt(payload, store, out)
    except Exception as exc:
        out.setdefault("outcome", f"error:{type(exc).__name__}:{exc}")
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        store.close()
    worker_reply(out)


if __name__ == "__main__":
    main()
