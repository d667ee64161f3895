"""Issue 29's race, through protected calls: eight OS processes behind a barrier spend against
one budget on each store, their executors committing, failing provably or losing the reply.
Every round: what committed plus what is AMBIGUOUS never passes the limit, and the store's
spent total is exactly that (FAILED attempts gave their charge back)."""

from __future__ import annotations

from typing import Any

import pytest

from ctrlrun.kernel.effect import EffectState
from ctrlrun.store import open_store
from ctrlrun.store.budgets import budget_spend
from support.budget_calls import AMOUNT, LIMIT, OUTCOMES, PROCESSES, ROUNDS, run_spenders
from support.race import preloaded_processes

EXPECTED = {
    "commit": "committed",
    "fail": "raised:NotExecuted",
    "lose_reply": "raised:TimeoutError",
}


def _store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'budget.db'}"
    pg = request.getfixturevalue("pg_schema")
    return f"{pg.url}{'&' if '?' in pg.url else '?'}ctrlrun_schema={pg.schema}"


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_committed_and_ambiguous_never_pass_the_limit(backend, request, tmp_path):
    url = _store_url(backend, request, tmp_path)
    open_store(url).close()  # migrate once, before the race
    answers = run_spenders(preloaded_processes(), url)
    store = open_store(url)
    try:
        spent = {budget_id: n for budget_id, _, n in budget_spend(store)}
        for round_ in range(ROUNDS):
            held = [
                i
                for i in range(PROCESSES)
                if store.get_effect(f"pay:{round_}-{i}") is not None
                and store.get_effect(f"pay:{round_}-{i}").state
                in (EffectState.COMMITTED, EffectState.AMBIGUOUS)
            ]
            got = answers[round_]
            for i, answer in got.items():  # each child ran as its executor says, or was refused
                assert answer in (EXPECTED[OUTCOMES[i % 3]], "denied:over_budget"), got
            ran = {i for i, a in got.items() if a in ("committed", "raised:TimeoutError")}
            assert set(held) == ran, got  # COMMITTED and AMBIGUOUS are exactly what ran
            assert spent.get(f"pay:agent:round-{round_}", 0) == AMOUNT * len(held) <= LIMIT, got
            assert held, got  # the first charge of a round always fits
        assert store.verify_chain().ok
    finally:
        store.close()
