"""One soak worker: protected calls over a small, contended key space, with injected faults.

Run as ``python worker.py CONFIG_JSON``. Each call picks a slot, finds the slot's current
generation (a slot moves on once its key is settled), and calls the fake remote through a
``Control``. The executor journals ``start`` (with the fault it was dealt) and, just before the
remote acts, ``acting``; the worker journals the outcome it saw after the call.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from journal import Journal, read_journals

import ctrlrun
from ctrlrun.runtime.control import CallSpec

FAULTS = (
    ("ok", 70),
    ("not_executed", 8),
    ("error", 8),
    ("hang", 4),
    ("kill_before", 2),
    ("kill_after", 2),
    ("slow", 6),
)


def journal_truth(directory: Path, key: str, attempt: int) -> str:
    """What the remote says about one attempt: acted, provably not, or unknown."""
    token = ctrlrun.idempotency_token_for(key, attempt)
    lines = [e for e in read_journals(directory) if e.get("token") == token]
    if any(e["phase"] == "acting" for e in lines):
        return "committed"
    if any(e["phase"] == "start" and e["fault"] == "kill_before" for e in lines):
        return "not_executed"  # the injector killed that process before it could act
    return "unknown"


class Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.directory = Path(config["directory"])
        self.rng = random.Random(config["seed"])
        self.journal = Journal(self.directory / f"journal-{os.getpid()}.jsonl")
        self.store = ctrlrun.store.open_store(config["store_url"])
        policy = ctrlrun.Policy.from_file(config["policy"])
        self.control = ctrlrun.Control(policy, self.store)
        self.generations: dict[int, int] = {}

    def key_for(self, slot: int) -> str:
        generation = self.generations.get(slot, 0)
        while True:
            key = f"soak:s{slot}-g{generation}"
            record = self.store.get_effect(key)
            if record is None or record.state is not ctrlrun.EffectState.COMMITTED:
                self.generations[slot] = generation
                return key
            generation += 1

    def remote(self, fault: str) -> Any:
        def act(key: str, amount: int) -> str:
            token = ctrlrun.idempotency_token()
            self.journal.write(phase="start", token=token, key=key, fault=fault, pid=os.getpid())
            if fault == "not_executed":
                raise ctrlrun.NotExecuted("the remote refused before acting")
            if fault == "kill_before":
                os.kill(os.getpid(), signal.SIGKILL)
            self.journal.write(phase="acting", token=token, key=key, fault=fault)
            if fault == "kill_after":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "error":
                raise ConnectionResetError("reply lost after the remote acted")
            if fault == "hang":
                time.sleep(self.config["short_lease"] * 1.5)
            if fault == "slow":
                time.sleep(self.rng.random() * 0.01)
            return "ok"

        return act

    def reconcile(self, key: str) -> str:
        record = self.store.get_effect(key)
        return "unknown" if record is None else journal_truth(self.directory, key, record.attempt)

    def call(self) -> None:
        slot = self.rng.randrange(self.config["slots"])
        key = self.key_for(slot)
        fault = self.rng.choices([f for f, _ in FAULTS], [w for _, w in FAULTS])[0]
        lease = self.config["short_lease"] if fault == "hang" else self.config["lease"]
        action = ctrlrun.Action(
            "soak.transfer", {"key": key, "amount": 100}, ctrlrun.Principal(f"w{os.getpid()}")
        )
        spec = CallSpec(effect_key=key, lease=timedelta(seconds=lease), reconcile=self.reconcile)
        try:
            self.control.run(action, self.remote(fault), spec)
            outcome = "returned"
        except ctrlrun.Refused as exc:
            outcome = f"refused:{type(exc).__name__}"
        except ctrlrun.NotExecuted:
            outcome = "not_executed"
        except ctrlrun.StoreError as exc:
            outcome = f"store_error:{exc}"
        except Exception as exc:
            outcome = f"raised:{type(exc).__name__}"
        self.journal.write(
            phase="outcome", action_id=action.action_id, key=key, fault=fault, outcome=outcome
        )

    def run(self) -> None:
        deadline = self.config["deadline"]
        while time.time() < deadline:
            self.call()


if __name__ == "__main__":
    Worker(json.loads(sys.argv[1])).run()
