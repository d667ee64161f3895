"""G4: one winner when eight OS processes race the same action, behind a barrier."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Final

import ctrlrun
from ctrlrun._rendezvous import arrivals, run_workers
from ctrlrun.kernel.policy import Decision

from .effects import NO_EFFECT
from .lab import Lab, NotApplicable, Passed
from .synthesis import PRINCIPAL, Vector, variants

WORKER: Final = "ctrlrun.verify.worker"
BARRIER_TIMEOUT: Final = 30.0
WORKER_TIMEOUT: Final = 90.0


def one_winner_under_concurrency(lab: Lab) -> Passed:
    """G4. N OS processes (``python -m ctrlrun.verify.worker``, each rebuilding the policy,
    the store and a ``Control`` from scratch), released together by a file barrier whose N
    arrivals are asserted, run the same action on one effect key: exactly one commits, the
    executor (an exclusive-create marker file) runs exactly once, every other process is
    refused ``DuplicateEffect``, the record is COMMITTED. Control: first, N processes on N
    distinct keys all commit, from N distinct child pids — so the children do start, reach
    the store and can win."""
    n = lab.processes
    raced, *vectors = _distinct(lab, n + 1)
    lab.store  # noqa: B018 - create and migrate the store once, so the race is on the key
    control_run, _ = _race(lab, vectors)
    committed = [o for o in control_run if o.get("outcome") == "committed"]
    lab.check(
        len(committed) == n,
        f"control failed: {len(committed)} of {n} processes committed on distinct keys:"
        f" {sorted(str(o.get('outcome')) for o in control_run)}",
    )
    race, calls = _race(lab, [raced] * n)
    winners = [o for o in race if o.get("outcome") == "committed"]
    losers = sorted(str(o.get("outcome")) for o in race if o not in winners)
    lab.check(
        len(winners) == 1 and calls == 1,
        f"{len(winners)} of {n} processes committed one"
        f" effect and the executor ran {calls} times; the others: {losers}",
    )
    lab.check(
        all(o.startswith("duplicate:") for o in losers),
        f"a losing process was not refused as a duplicate: {losers}",
    )
    record = lab.store.get_effect(raced.effect_key)
    lab.check(
        record is not None and str(record.state) == "committed",
        f"the raced record is {record}, not committed",
    )
    return Passed(
        lab.action,
        f"{n} processes arrived together on {raced.effect_key}: 1 committed, executor"
        f" 1 call, {n - 1} refused; control: {n} distinct keys all committed",
    )


def _distinct(lab: Lab, count: int) -> list[Vector]:
    """``count`` vectors with distinct effect keys for the first action that has them."""
    first = lab.pick(lambda t: t.entry.effect is not None)
    if first is None:
        raise NotApplicable(NO_EFFECT)
    picked = lab.pick(
        lambda t: t.entry.effect is not None and len(variants(lab.policy, t, count)) == count
    )
    if picked is None:
        raise NotApplicable(
            f"no admitted action's effect key can take {count} distinct values (the race needs"
            f" one and the positive control {count - 1} others)"
        )
    return variants(lab.policy, picked[0], count)


def _race(lab: Lab, vectors: list[Vector]) -> tuple[list[dict[str, Any]], int]:
    """Run one worker per vector behind a barrier; their reports and the executor calls the
    marker files counted, after checking the race was real: all arrived, distinct pids (not
    ours), our ``ctrlrun`` imported."""
    approvals = [_approval(lab, v) for v in vectors]
    with tempfile.TemporaryDirectory(prefix="ctrlrun-verify-g4-") as work:
        folder = Path(work)
        barrier, remote = folder / "barrier", folder / "remote"
        barrier.mkdir()
        remote.mkdir()
        payloads = [
            _payload(lab, v, a, barrier=barrier, remote=remote, parties=len(vectors))
            for v, a in zip(vectors, approvals, strict=True)
        ]
        try:
            results = run_workers(WORKER, payloads, folder, timeout=WORKER_TIMEOUT)
        except TimeoutError as exc:
            raise lab.fail(f"the worker processes did not finish: {exc}") from exc
        arrived = arrivals(barrier)
        calls = len(os.listdir(remote))
    outputs = [
        r.output or {"outcome": f"error: exit {r.returncode}: {r.stderr[-300:]}"} for r in results
    ]
    pids = {o.get("pid") for o in outputs}
    lab.check(
        len(arrived) == len(vectors),
        f"only {len(arrived)} of {len(vectors)} processes reached the barrier",
    )
    lab.check(
        len(pids) == len(vectors) and os.getpid() not in pids, f"child pids not distinct: {pids}"
    )
    foreign = {str(o.get("ctrlrun")) for o in outputs} - {ctrlrun.__file__}
    lab.check(not foreign, f"a worker imported another ctrlrun: {foreign}")
    return outputs, calls


def _approval(lab: Lab, vector: Vector) -> str | None:
    if vector.target.decision is not Decision.APPROVE:
        return None
    return lab.approve(lab.control(), vector.action())


def _payload(
    lab: Lab, vector: Vector, approval: str | None, *, barrier: Path, remote: Path, parties: int
) -> dict[str, Any]:
    return {
        "policy": lab.policy.to_document(),
        "url": lab.scratch.url(),
        "action": vector.target.entry.name,
        "arguments": dict(vector.arguments),
        "resource": vector.resource,
        "agent": PRINCIPAL.agent,
        "user": PRINCIPAL.user,
        "approval_id": approval,
        "barrier": str(barrier),
        "parties": parties,
        "barrier_timeout": BARRIER_TIMEOUT,
        "remote": str(remote),
    }
