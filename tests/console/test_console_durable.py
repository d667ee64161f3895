"""Plans and parked outbox messages in the console, in a real browser against the real
`ctrlrun console` process: a plan is shown whole and approved by the hash the person saw, as
the signed-in person; a plan changed after the page was shown is refused; a parked message is
settled behind a confirmation."""

from __future__ import annotations

from ctrlrun.durable import Outbox, Plans, PlanStatus
from ctrlrun.kernel.outbox import MessageStatus
from support.console import screenshot

RESERVE = {"action": "inventory.reserve", "arguments": {"item": "widget\u202e", "qty": 2}}


def test_a_plan_is_shown_whole_and_approved_by_its_hash(page, agents, tmp_path):
    plans = Plans(agents.store)
    plan = plans.propose([RESERVE], agent="planner", user="alice")
    page.goto("/durable")
    screenshot(page, "durable", tmp_path)
    section = page.locator(f"#plan-{plan.plan_id}")
    assert section.locator(".hash").inner_text() == plan.plan_hash
    assert "\\u202e" in section.locator("code.value").inner_text()  # shown, never obeyed
    section.locator("form.approve button").click()
    assert f"approved {plan.plan_id}" in page.inner_text(".done")
    record = plans.get(plan.plan_id)
    assert (record.status, record.approver, record.approved_hash) == (
        PlanStatus.APPROVED,
        "ada",
        plan.plan_hash,
    )


def test_a_plan_changed_after_it_was_shown_is_refused(page, agents):
    plans = Plans(agents.store)
    plan = plans.propose([RESERVE], agent="planner")
    page.goto("/durable")
    forged = "sha256:" + "0" * 64  # what the form posts is not what the person saw
    page.locator(f"#plan-{plan.plan_id} form.approve input[name=plan_hash]").evaluate(
        "(input, value) => { input.value = value; }", forged
    )
    page.locator(f"#plan-{plan.plan_id} form.approve button").click()
    assert page.inner_text("h1") == "Nothing was done"
    assert "hash" in page.inner_text("[role=alert]")
    assert plans.get(plan.plan_id).status is PlanStatus.PENDING


def test_a_parked_message_is_settled_behind_a_confirmation(page, agents, tmp_path):
    outbox = Outbox(agents.store)
    message_id = outbox.enqueue("email.send", {"to": "ops@example.com"})

    def park(txn):
        txn.connection.execute(
            "UPDATE outbox SET status = 'ambiguous' WHERE message_id = ?", (message_id,)
        )

    agents.store.transact(park)
    page.goto("/durable")
    row = page.locator(f"#message-{message_id}")
    assert row.locator(".status").inner_text() == "ambiguous"
    row.locator("form.settle-sent button").click()
    assert "delivered" in page.inner_text(".consequence")
    screenshot(page, "settle-confirm", tmp_path)
    page.locator("#confirm button").click()
    assert f"settled {message_id}" in page.inner_text(".done")
    assert outbox.get(message_id).status is MessageStatus.SENT


def test_an_unknown_start_is_reconciled_behind_a_confirmation(page, agents):
    from ctrlrun.durable import Operations, OperationStatus

    operations = Operations(agents.store)
    queued = operations.submit("vm.create", "vm:web-1", {"size": "large"})

    def lost(operation):
        raise TimeoutError("the provider's reply was lost")

    flagged = operations.start(queued.operation_id, lost)
    assert flagged.reconcile
    page.goto("/durable")
    section = page.locator(f"#operation-{queued.operation_id}")
    section.locator("input[name=remote_id]").fill("i-0abc")
    section.locator("form.found button").click()
    assert "never started again" in page.inner_text(".consequence")
    page.locator("#confirm button").click()
    assert f"reconciled {queued.operation_id}" in page.inner_text(".done")
    settled = operations.get(queued.operation_id)
    assert (settled.status, settled.remote_id) == (OperationStatus.RUNNING, "i-0abc")
