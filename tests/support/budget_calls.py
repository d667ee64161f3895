"""Eight OS processes making protected calls against one budget behind a barrier.

Unlike ``budget_race`` (the store's consume op alone), each child goes through the runtime:
it opens the store by URL, builds a ``Control`` over a budgeted policy and, each round, waits
at the barrier and makes one protected call whose executor commits, fails provably
(``NotExecuted``: the charge is given back) or loses its reply (AMBIGUOUS: the charge is kept),
by the child's index. Each round spends against its own budget (``per: agent``, one agent name
per round), so the parent can check every round against the store's effects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ctrlrun

SOURCE = str(Path(ctrlrun.__file__).resolve().parent)
PROCESSES = 8
ROUNDS = 4
AMOUNT = 300
LIMIT = 1000  # at most three charges of 300 can be held at once
POLICY = f"""\
schema: ctrlrun.policy/v1
actions:
  pay:
    effect: "pay:{{ref}}"
    decision: allow
    budget: {{sum: amount, limit: {LIMIT}, per: agent, window: 3650d}}
"""
OUTCOMES = ("commit", "fail", "lose_reply")


def spender(store_url: str, index: int, barrier: Any, results: Any) -> None:
    """One child: a protected call per round; what happened goes to ``results``."""
    import ctrlrun
    from ctrlrun.config import load_policy_text
    from ctrlrun.store import open_store

    assert str(Path(ctrlrun.__file__).resolve().parent) == SOURCE  # the tree under test
    outcome = OUTCOMES[index % len(OUTCOMES)]
    control = ctrlrun.Control(load_policy_text(POLICY), open_store(store_url))

    @ctrlrun.protect("pay", control=control)
    def pay(ref: str, amount: int) -> str:
        if outcome == "fail":
            raise ctrlrun.NotExecuted("the provider refused before acting")
        if outcome == "lose_reply":
            raise TimeoutError("the provider acted; its reply was lost")
        return "paid"

    for round_ in range(ROUNDS):
        barrier.wait(timeout=60)
        with ctrlrun.context(agent=f"round-{round_}"):
            try:
                pay(ref=f"{round_}-{index}", amount=AMOUNT)
                got = "committed"
            except ctrlrun.ActionDenied as exc:
                got = f"denied:{exc.reason}"
            except BaseException as exc:  # the executor's own failure, as the runtime raised it
                got = f"raised:{type(exc).__name__}"
        results.put((round_, index, got))
    control.store.close()


def run_spenders(ctx: Any, store_url: str) -> dict[int, dict[int, str]]:
    """Every child's answer, by round and child index."""
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    children = [
        ctx.Process(target=spender, args=(store_url, i, barrier, results)) for i in range(PROCESSES)
    ]
    for child in children:
        child.start()
    answers: dict[int, dict[int, str]] = {r: {} for r in range(ROUNDS)}
    for _ in range(PROCESSES * ROUNDS):
        round_, index, got = results.get(timeout=120)
        answers[round_][index] = got
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    return answers
