"""The pure part of ``ctrlrun stats`` (kernel/stats.py): rollup keys, percentiles, the report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ctrlrun.kernel.stats import (
    ApprovalRow,
    BudgetUse,
    Dimension,
    Durations,
    ResolvedRow,
    budget_use,
    fold_receipts,
    percentile,
    plan_report,
    stats_key,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def receipt(result="committed", *, error=None, at="2026-12-01T09:41:07.250Z", **extra):
    return {
        "action": "stripe.refund",
        "principal": {"agent": "bot", "user": None},
        "decision": "allow",
        "decision_reason": "rule[0]",
        "result": result,
        "error": error,
        "finished_at": at,
        "effect_key": "refund:pay_1",
        "attempt": 1,
        **extra,
    }


def test_a_receipt_is_keyed_by_its_hour_and_the_type_its_error_names():
    key = stats_key(receipt("blocked", error="DuplicateEffect: effect 'k' is in progress"))
    assert key is not None
    assert key.bucket == T0 and (key.action, key.agent, key.rule) == (
        "stripe.refund",
        "bot",
        "rule[0]",
    )
    assert (key.decision, key.result, key.reason) == ("allow", "blocked", "DuplicateEffect")
    plain, committed = (
        stats_key(receipt(error="NotAType but text")),
        stats_key(receipt(error="X: y")),
    )
    assert plain is not None and plain.reason == ""
    assert committed is not None and committed.reason == ""  # a committed call has no reason
    odd = stats_key(receipt(principal="bot", action=None, decision=None))
    assert odd is not None and (odd.agent, odd.action, odd.decision) == ("", "", "")
    assert stats_key(receipt(at="yesterday")) is None
    watched = stats_key(receipt("observed", observed={"would_have": "denied"}))
    ran = stats_key(receipt("observed", error="TimeoutError: x", observed={"would_have": None}))
    assert watched is not None and watched.reason == "denied"
    assert ran is not None and ran.reason == "would_run"


def test_folding_counts_keys_and_notes_ambiguous_attempts():
    counts, opened = fold_receipts(
        [
            receipt(),
            receipt(),
            receipt("ambiguous", error="TimeoutError: lost"),
            receipt("ambiguous", error="TimeoutError: lost", effect_key=None),
            receipt(at="never"),
        ]
    )
    assert sum(counts.values()) == 4 * 3  # once per dimension
    [only] = opened
    assert only.effect_key == "refund:pay_1" and only.opened_at == T0 + timedelta(
        minutes=41, seconds=7.25
    )


def test_percentiles_are_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([5.0], 90) == 5.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 11))), 90) == 9.0
    assert Durations.of([]) == Durations(0, None, None)
    assert Durations.of([1.00049, 2.0]) == Durations(2, 1.0, 2.0)


def test_the_report_groups_orders_and_summarises():
    counts, _ = fold_receipts(
        [
            receipt(),
            receipt("denied", error="ActionDenied: no", decision="deny", decision_reason="rule[2]"),
            receipt(action="crm.read", decision_reason="decision"),
            receipt(action="crm.read", decision_reason="decision"),
            receipt("ambiguous", error="TimeoutError: lost"),
        ]
    )
    approvals = [
        ApprovalRow("consumed", T0, T0 + timedelta(hours=1), T0 + timedelta(minutes=5)),
        ApprovalRow("denied", T0, T0 + timedelta(hours=1), T0 + timedelta(minutes=1)),
        ApprovalRow("pending", T0, T0 + timedelta(hours=1), None),
        ApprovalRow("pending", T0, T0 + timedelta(minutes=10), None),
        ApprovalRow("expired", T0, T0 + timedelta(minutes=10), None),
    ]
    resolved = [ResolvedRow("committed", T0 + timedelta(hours=2), T0)]
    now = T0 + timedelta(minutes=30)
    report = plan_report(Dimension.ACTION, counts.items(), approvals, resolved, open_now=2, now=now)
    assert [g.name for g in report.groups] == ["stripe.refund", "crm.read"]
    refunds = report.groups[0]
    assert refunds.calls == 3 and refunds.reasons == {"ActionDenied": 1, "TimeoutError": 1}
    assert report.approvals == {"consumed": 1, "denied": 1, "pending": 1, "expired": 2}
    assert report.answered == Durations(2, 60.0, 300.0)
    assert report.ambiguous_opened == 1 and report.ambiguous_resolved == {"committed": 1}
    assert report.ambiguous_open_for == Durations(1, 7200.0, 7200.0)
    document = report.to_dict()
    assert document["calls"] == 5 and document["ambiguous"]["open_now"] == 2
    assert document["groups"][1] == {
        "name": "crm.read", "calls": 2, "results": {"committed": 2},
        "decisions": {"allow": 2}, "reasons": {},
    }  # fmt: skip
    by_rule = plan_report(Dimension.RULE, counts.items(), [], [], open_now=0, now=now)
    assert sorted(g.name for g in by_rule.groups) == ["decision", "rule[0]", "rule[2]"]


def test_budget_use_covers_the_windows_a_report_spans():
    day = timedelta(days=1)
    d0 = datetime(2026, 12, 1, tzinfo=UTC)
    rows = [
        ("b", d0, 10),  # ended before the window the report starts in
        ("b", d0 + day, 20),  # the window `since` falls in
        ("b", d0 + 2 * day, 30),
        ("a", d0, 5),  # a's latest window before `since`: shown, it is the one in progress
    ]
    since = d0 + day + timedelta(hours=6)
    assert budget_use(rows, since) == [
        BudgetUse("a", d0, 5),
        BudgetUse("b", d0 + day, 20),
        BudgetUse("b", d0 + 2 * day, 30),
    ]
    assert budget_use(rows, None) == sorted(BudgetUse(*r) for r in rows)
    assert budget_use(rows, d0 + 3 * day) == [
        BudgetUse("a", d0, 5),
        BudgetUse("b", d0 + 2 * day, 30),
    ]
    assert budget_use([], since) == []
