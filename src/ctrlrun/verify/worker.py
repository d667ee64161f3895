"""One contender of G4: ``python -m ctrlrun.verify.worker <payload file>``.

It rebuilds everything from the payload, as a separate agent process would: the policy from
its canonical document, the store from its URL (``ctrlrun.store.open_store``), a ``Control``,
and a fresh ``Action``. It waits at the file barrier, runs the action once through the real
pipeline with an executor whose every call leaves an exclusive-create marker file, and prints
one JSON object: ``pid``, the ``ctrlrun`` it imported, ``outcome`` (``committed``,
``duplicate:<state>``, ``refused:<Class>:<reason>``, ``error:<Class>:<message>``) and
``calls`` (how many times its executor ran).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ctrlrun
from ctrlrun._rendezvous import arrive, mark_once, worker_payload, worker_reply
from ctrlrun.errors import DuplicateEffect, Refused
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.policy import Policy
from ctrlrun.runtime.control import Control
from ctrlrun.store import open_store


def attempt(payload: dict[str, Any], control: Control, out: dict[str, Any]) -> None:
    """Run the action once; record the outcome and the executor's calls in ``out``."""
    remote = Path(payload["remote"])
    out["calls"] = 0

    def executor(**arguments: Any) -> str:
        out["calls"] += 1
        mark_once(remote / f"call-{os.getpid()}-{out['calls']}")
        return "done"

    action = Action(
        payload["action"],
        payload["arguments"],
        Principal(payload["agent"], payload["user"]),
        resource=payload["resource"],
    )
    try:
        control.execute(action, executor, approval_id=payload["approval_id"])
        out["outcome"] = "committed"
    except DuplicateEffect as exc:
        out["outcome"] = f"duplicate:{exc.state}"
    except Refused as exc:
        out["outcome"] = f"refused:{type(exc).__name__}:{exc.reason}"


def main() -> None:
    payload = worker_payload()
    out: dict[str, Any] = {"pid": os.getpid(), "ctrlrun": ctrlrun.__file__}
    store = open_store(payload["url"])
    control = Control(Policy.from_document(payload["policy"]), store)
    arrive(payload["barrier"], payload["parties"], timeout=payload["barrier_timeout"])
    try:
        attempt(payload, control, out)
    except Exception as exc:
        out["outcome"] = f"error:{type(exc).__name__}:{exc}"
    finally:
        store.close()
    worker_reply(out)


if __name__ == "__main__":
    main()
