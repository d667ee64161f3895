"""The console's stats page in a real browser (headless Debian Chromium via Playwright), over
the real `ctrlrun console` process and a store written by real protected calls: the same
figures as `ctrlrun stats`, drawn as server-side SVG, with hostile names inert."""

from __future__ import annotations

import json

import ctrlrun
from ctrlrun.kernel.effect import EffectState
from support.cli import run
from support.console import CONSOLE_POLICY, Agents, screenshot

HOSTILE_AGENT = "\u202eevil\u202c<b>bot</b>"


def test_the_stats_page_draws_what_ctrlrun_stats_counts(page, agents, tmp_path):
    agents.refund("pay_1", 5_000)
    agents.refund("pay_2", 5_000)
    agents.refund("pay_1", 5_000)  # a duplicate: blocked
    agents.refund("pay_big", 50_000_000)  # denied
    agents.fail_with.append(TimeoutError("reply lost"))
    agents.refund("pay_3", 5_000)  # ambiguous
    agents.store.resolve_effect("refund:pay_3", EffectState.FAILED, "cli:ada")
    needed = agents.refund("pay_4", 250_000)
    assert isinstance(needed, ctrlrun.ApprovalRequired)

    page.goto("/stats")
    assert page.inner_text(".summary") == "5 calls in the last 7d."
    bars = page.locator("#calls g g rect")
    shown = sorted(bars.nth(i).get_attribute("class") for i in range(bars.count()))
    assert shown == ["seg seg-ambiguous", "seg seg-blocked", "seg seg-committed", "seg seg-denied"]
    row = page.locator("table.stats tbody tr").first.inner_text().split("\t")
    assert row[:7] == ["stripe.refund", "5", "2", "0", "1", "1", "1"]
    assert (
        page.locator("#approvals svg").get_attribute("aria-label") == "Approval requests by status"
    )
    assert "pending" in page.inner_text("#approvals")
    assert page.inner_text(".open-for").startswith("Open for: median")
    screenshot(page, "stats", tmp_path)

    cli = run("stats", "--json", "--store-url", f"sqlite://{agents.path}", "--since", "7d")
    assert json.loads(cli.stdout)["calls"] == 5  # one count, two surfaces

    page.goto("/stats?by=agent&since=24h")
    assert page.locator("table.stats tbody tr").first.inner_text().startswith("support-bot\t5")
    page.goto("/stats?by=nonsense&since=forever")  # unknown choices fall back, never fail
    assert page.inner_text(".summary") == "5 calls in the last 7d."


def test_hostile_names_render_inert(page, agents):
    agents.refund("pay_h", 1)
    page.goto("/stats")  # folds the call into the rollup
    # a rollup row written as someone with store access could, naming what the kernel refuses
    agents.store.transact(
        lambda txn: txn.run_many(
            "stats_add",
            [{"dimension": "agent", "bucket": txn.ts(txn.now), "name": HOSTILE_AGENT,
              "decision": "allow", "result": "committed", "reason": "", "calls": 1}],
        )
    )  # fmt: skip
    page.goto("/stats?by=agent")
    text = page.inner_text("#calls")
    assert "<b>" in text and "\\u202e" in text  # shown as text, the override escaped
    assert page.locator("#calls b").count() == 0


def test_the_stats_page_shows_what_each_budget_window_holds(page, agents, tmp_path):
    policy = CONSOLE_POLICY.replace(
        "  stripe.refund:\n",
        "  stripe.refund:\n    budget: {sum: amount, limit: 12000, per: agent, window: 24h}\n",
    )
    budgeted = Agents(tmp_path, policy)  # the same store file, under a budgeted policy
    try:
        assert budgeted.refund("pay_b1", 5_000) == {"refund": "re_1"}
        assert budgeted.refund("pay_b2", 5_000) == {"refund": "re_2"}
        refused = budgeted.refund("pay_b3", 5_000)
        assert isinstance(refused, ctrlrun.ActionDenied) and refused.reason == "over_budget"
    finally:
        budgeted.store.close()

    page.goto("/stats")
    assert page.locator("#budgets svg").get_attribute("aria-label") == "Spent per budget window"
    cells = page.locator("table.budgets tbody tr").first.inner_text().split("\t")
    assert cells[0] == "stripe.refund:agent:support-bot" and cells[2] == "10000"
    assert cells[1].endswith("T00:00:00Z")  # a 24h window begins at midnight UTC
    screenshot(page, "stats-budgets", tmp_path)
    cli = run("stats", "--json", "--store-url", f"sqlite://{agents.path}", "--since", "7d")
    assert [b["spent"] for b in json.loads(cli.stdout)["budgets"]] == [10000]


def test_the_stats_page_says_when_no_budget_was_spent(page, agents):
    agents.refund("pay_1", 5_000)
    page.goto("/stats")
    assert page.locator("#budgets").count() == 0
    assert "No budget spent in this window." in page.inner_text("main")
