"""One soak worker: protected calls over a small, contended key space, with injected faults.

Run as ``python worker.py CONFIG_JSON``. Each call picks a slot, finds the slot's current
generation (a slot moves on once its key is settled), and calls the fake remote through a
``Control``. The executor journals ``start`` (with the fault it was dealt) and, just before the
remote acts, ``acting``; the worker journals the outcome it saw after the call.

On Postgres the worker talks to the server through its own fault proxy (``support.pgproxy``,
in this process), and some calls are also dealt a *cut*: the connection is cut around the
COMMIT of the call's first write transaction (``start_*``) or of its outcome (``finish_*``),
before the COMMIT reaches the server (``*_before``) or after the server committed and before
the reply arrives (``*_after``). Every cut is journalled (``phase: cut``) before it is armed,
so the checker can tell which calls a lost COMMIT may have made AMBIGUOUS.
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
from ctrlrun.config import load_policy_file
from ctrlrun.runtime.call import CallSpec

FAULTS = (
    ("ok", 70),
    ("not_executed", 8),
    ("error", 8),
    ("hang", 4),
    ("kill_before", 2),
    ("kill_after", 2),
    ("slow", 6),
)
CUTS = (
    ("none", 80),
    ("start_before", 5),
    ("start_after", 5),
    ("finish_before", 5),
    ("finish_after", 5),
)
TESTS = Path(__file__).resolve().parents[2] / "tests"


def journal_truth(directory: Path, key: str, attempt: int) -> str:
    """What the remote says about one attempt: acted, provably not, or unknown."""
    token = ctrlrun.idempotency_token_for(key, attempt)
    lines = [e for e in read_journals(directory) if e.get("token") == token]
    if any(e["phase"] == "acting" for e in lines):
        return "committed"
    if any(e["phase"] == "start" and e["fault"] == "kill_before" for e in lines):
        return "not_executed"  # the injector killed that process before it could act
    return "unknown"


def open_proxy(upstream_url: str) -> Any:
    """This worker's own fault proxy in front of the server (the test support's real one)."""
    sys.path.insert(0, str(TESTS))
    from support.pgproxy import PgProxy

    return PgProxy(upstream_url)


class Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.directory = Path(config["directory"])
        self.rng = random.Random(config["seed"])
        self.journal = Journal(self.directory / f"journal-{os.getpid()}.jsonl")
        self.proxy = open_proxy(config["upstream_url"]) if config.get("upstream_url") else None
        url = self.proxy.url if self.proxy is not None else config["store_url"]
        self.store = ctrlrun.store.open_store(url)
        policy = load_policy_file(config["policy"])
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

    # --- faults ---------------------------------------------------------------------------

    def deal(self) -> tuple[str, str]:
        fault = self.rng.choices([f for f, _ in FAULTS], [w for _, w in FAULTS])[0]
        if self.proxy is None or fault.startswith("kill"):
            return fault, "none"
        return fault, self.rng.choices([c for c, _ in CUTS], [w for _, w in CUTS])[0]

    def arm(self, cut: str, action_id: str, key: str) -> None:
        """Journal the cut, THEN arm it: a cut the checker has not heard of cannot happen."""
        self.journal.write(phase="cut", cut=cut, action_id=action_id, key=key, pid=os.getpid())
        if cut.endswith("_before"):
            self.proxy.cut_before_commit(1)
        else:
            self.proxy.cut_after_commit(1)

    def disarm(self, before: int) -> bool:
        """Disarm whatever did not fire; True if a cut fired since ``before``."""
        if self.proxy is None:
            return False
        self.proxy.cut_before_commit(0)
        self.proxy.cut_after_commit(0)
        return self.cuts() > before

    def cuts(self) -> int:
        if self.proxy is None:
            return 0
        return int(self.proxy.cuts_before_commit + self.proxy.cuts_after_commit)

    # --- the call -------------------------------------------------------------------------

    def remote(self, fault: str, cut: str, action_id: str) -> Any:
        def act(key: str, amount: int) -> str:
            token = ctrlrun.idempotency_token()
            self.journal.write(
                phase="start", token=token, key=key, fault=fault, cut=cut, pid=os.getpid()
            )
            try:
                return self.behave(fault, token, key)
            finally:
                if cut.startswith("finish_"):  # the next COMMIT is the outcome's
                    self.arm(cut, action_id, key)

        return act

    def behave(self, fault: str, token: str, key: str) -> str:
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

    def reconcile(self, key: str) -> str:
        record = self.store.get_effect(key)
        return "unknown" if record is None else journal_truth(self.directory, key, record.attempt)

    def call(self) -> None:
        slot = self.rng.randrange(self.config["slots"])
        key = self.key_for(slot)
        fault, cut = self.deal()
        lease = self.config["short_lease"] if fault == "hang" else self.config["lease"]
        action = ctrlrun.Action(
            "soak.transfer", {"key": key, "amount": 100}, ctrlrun.Principal(f"w{os.getpid()}")
        )
        spec = CallSpec(effect_key=key, lease=timedelta(seconds=lease), reconcile=self.reconcile)
        before = self.cuts()
        if cut.startswith("start_"):  # the call's first COMMIT is its reservation's
            self.arm(cut, action.action_id, key)
        outcome = self.run(action, self.remote(fault, cut, action.action_id), spec)
        fired = self.disarm(before)
        self.journal.write(
            phase="outcome",
            action_id=action.action_id,
            key=key,
            fault=fault,
            cut=cut,
            cut_fired=fired,
            outcome=outcome,
        )

    def run(self, action: ctrlrun.Action, executor: Any, spec: CallSpec) -> str:
        try:
            self.control.run(action, executor, spec)
            return "returned"
        except ctrlrun.Refused as exc:
            return f"refused:{type(exc).__name__}"
        except ctrlrun.NotExecuted:
            return "not_executed"
        except ctrlrun.StoreError as exc:
            return f"store_error:{type(exc).__name__}:{exc}"
        except Exception as exc:
            return f"raised:{type(exc).__name__}"

    def loop(self) -> None:
        deadline = self.config["deadline"]
        while time.time() < deadline:
            self.call()
        if self.proxy is not None:
            self.store.close()
            self.proxy.close()  # raises if an armed fault could not be injected as armed


if __name__ == "__main__":
    Worker(json.loads(sys.argv[1])).loop()
