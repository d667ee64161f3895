"""Budget consumption on Postgres through the SECURITY DEFINER functions: eight OS processes
behind a barrier never pass the limit, a charge given back returns once, and an ``over:
approve`` request, its grant and the forced charge work under the three least-privilege
roles."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ctrlrun.kernel.budget import Budget
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.budgets import budget_spend, consume_budget, give_back_budget, peek_budget
from support.budget_race import check_rounds, race_budget
from support.race import preloaded_processes

pytestmark = [pytest.mark.postgres]


@pytest.mark.timeout(180)
def test_eight_processes_never_pass_the_limit(pg_schema: Any) -> None:
    """Eight processes, five rounds: each round exactly the amounts that fit are consumed."""
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()  # migrate once
    url = f"{pg_schema.url}{'&' if '?' in pg_schema.url else '?'}ctrlrun_schema={pg_schema.schema}"
    answers = race_budget(preloaded_processes(), url)
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    check_rounds(answers, {budget_id: spent for budget_id, _, spent in budget_spend(store)})
    store.close()


def test_give_back_returns_once_and_force_passes_the_limit(direct: PostgresStateStore) -> None:
    """Give-back frees a charge exactly once; force consumes past the limit; peek writes
    nothing."""
    budget = Budget("amount", 500, window=timedelta(days=3650))
    assert consume_budget(direct, budget, "b", 400, "act1")[0]
    assert peek_budget(direct, budget, "b", 200).spent_before == 400
    ok, state = consume_budget(direct, budget, "b", 200, "act2")
    assert not ok and state.spent_before == 400
    assert give_back_budget(direct, "act1")
    assert not give_back_budget(direct, "act1")
    ok, state = consume_budget(direct, budget, "b", 200, "act2")
    assert ok and state.spent_before == 0
    ok, state = consume_budget(direct, budget, "b", 900, "act3", force=True)
    assert ok and state.spent_after == 1100


def test_over_approve_under_least_privilege(roles: Any) -> None:
    """With the three LOGIN roles: the agent's request past an ``over: approve`` limit reads
    the budget in its own transaction; the approver's surfaces read it back (and the window
    now) and grant; the agent's retry consumes past the limit through its functions."""
    import ctrlrun
    from ctrlrun import ApprovalRequired, Control
    from ctrlrun.config import load_policy_text
    from ctrlrun.runtime.request_facts import request_facts

    policy = load_policy_text(
        "schema: ctrlrun.policy/v1\nactions:\n  pay:\n    decision: allow\n"
        "    budget: {sum: amount, limit: 100, per: agent, window: 3650d, over: approve}\n"
    )
    agent = PostgresStateStore(roles.agent_url, schema=roles.schema)
    approver = PostgresStateStore.open_existing(roles.approver_url, schema=roles.schema)
    try:
        control = Control(policy, agent)

        @ctrlrun.protect("pay", control=control)
        def pay(ref: str, amount: int) -> str:
            return "paid"

        with ctrlrun.context("bot"):
            pay("r1", 80)
            with pytest.raises(ApprovalRequired) as needed:
                pay("r2", 30)
        record = approver.get_approval(needed.value.request_id)
        facts = request_facts(approver, record, policy, 0)
        assert facts.budget.facts is not None and facts.budget.facts.spent == 80
        assert facts.budget_now is not None and facts.budget_now.spent_before == 80
        approver.grant_approval(record.approval_id, "alice")
        with ctrlrun.context("bot"):
            assert pay("r2", 30) == "paid"
        assert {b: s for b, _, s in budget_spend(approver)} == {"pay:agent:bot": 110}
    finally:
        agent.close()
        approver.close()
