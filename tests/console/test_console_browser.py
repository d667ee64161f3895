"""The console in a real browser (headless Debian Chromium driven by Playwright), against the
real `ctrlrun console` process and a store written by real protected calls."""

from __future__ import annotations

import json
import re

import ctrlrun
from ctrlrun.kernel.effect import EffectState
from support.cli import tamper
from support.console import CONSOLE_POLICY, PASSWORD, Agents, screenshot, sign_in

HOSTILE = "\u202eevil\u202c<script>window.__pwned=1</script>\nFORGED line\x1b[31m\x07"


def test_signing_in_needs_the_right_password_and_every_page_needs_a_session(browser, console):
    context = browser.new_context(base_url=console.url)
    tab = context.new_page()
    tab.goto("/effects")
    assert tab.url.endswith("/sign-in")
    sign_in(tab, password="wrong")
    assert "do not match" in tab.inner_text("[role=alert]")
    sign_in(tab, password=PASSWORD)
    assert tab.inner_text(".person") == "ada"
    cookie = next(c for c in context.cookies() if c["name"] == "ctrlrun_console")
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    context.close()


def test_a_request_appears_live_is_granted_and_the_identical_call_runs_once(page, agents, tmp_path):
    page.goto("/")
    assert page.inner_text(".empty") == "Nothing waits for a person."
    needed = agents.refund("pay_9", 250_000)
    assert isinstance(needed, ctrlrun.ApprovalRequired)
    request = page.locator(f"#request-{needed.request_id}")
    request.wait_for()  # arrives by the page's polling, without a reload by the test
    held = agents.store.get_approval(needed.request_id)
    assert request.locator(".hash").inner_text() == held.action_hash
    assert '"pay_9"' in request.inner_text() and "250000" in request.inner_text()
    assert request.locator(".progress").inner_text().startswith("0 of 1")
    screenshot(page, "inbox", tmp_path)
    request.locator("form.grant button").click()
    assert f"granted {needed.request_id}" in page.inner_text(".done")
    assert agents.refund("pay_9", 250_000, approval=needed.request_id) == {"refund": "re_1"}
    again = agents.refund("pay_9", 250_000, approval=needed.request_id)
    assert isinstance(again, ctrlrun.Refused)  # the grant was single-use, and it is spent
    assert agents.calls == [{"payment_id": "pay_9", "amount": 250_000}]
    committed = [r for r in agents.receipts_for("refund:pay_9") if r["result"] == "committed"]
    assert [r["approver"] for r in committed] == ["ada"]
    page.goto("/receipts?q=refund:pay_9&field=effect_key")
    assert "ada" in page.locator("td.approver").all_inner_texts()


def test_a_denial_needs_a_reason_and_the_agent_is_then_denied(page, agents):
    needed = agents.refund("pay_7", 300_000)
    page.goto("/")
    request = page.locator(f"#request-{needed.request_id}")
    request.locator("form.deny input[name=reason]").fill("not a customer of ours")
    request.locator("form.deny button").click()
    assert f"denied {needed.request_id}" in page.inner_text(".done")
    held = agents.store.get_approval(needed.request_id)
    assert held.status == "denied" and held.approver == "ada"
    assert isinstance(agents.refund("pay_7", 300_000, approval=needed.request_id), ctrlrun.Refused)
    assert agents.calls == []


def test_an_ambiguous_effect_is_resolved_after_a_confirmation_naming_the_consequence(
    page, agents, tmp_path
):
    agents.fail_with.append(TimeoutError("reply lost after the provider refunded"))
    agents.refund("pay_2", 5_000)
    page.goto("/effects")
    assert "ambiguous" in page.inner_text("table.effects")
    screenshot(page, "effects", tmp_path)
    page.click("text=refund:pay_2")
    page.click("form.resolve-committed button")
    assert "retry of it stays refused" in page.inner_text(".consequence")
    assert agents.store.get_effect("refund:pay_2").state is EffectState.AMBIGUOUS
    screenshot(page, "resolve-confirm", tmp_path)
    page.click("#confirm button")
    assert page.inner_text(".state") == "committed"
    assert page.inner_text(".resolved-by") == "ada"
    assert agents.store.get_effect("refund:pay_2").resolved_by == "ada"


def test_a_tampered_receipt_shows_as_a_break_at_its_seq(page, agents, tmp_path):
    for n in range(3):
        agents.refund(f"pay_{n}", 4321)
    page.goto("/receipts")
    assert page.inner_text(".verified").startswith("Chain verified: 3 of 3")
    altered = "UPDATE receipts SET document = replace(document, '4321', '9999') WHERE seq = 2"
    tamper(agents.path, altered)
    page.goto("/receipts")
    assert "content_altered at seq 2" in page.inner_text(".broken")
    assert page.get_attribute("#seq-2", "class") == "break"
    assert page.get_attribute("#seq-1", "class") == ""
    screenshot(page, "receipts-break", tmp_path)


def test_hostile_strings_render_inert(page, agents, tmp_path):
    needed = agents.notify("m1", HOSTILE)
    assert isinstance(needed, ctrlrun.ApprovalRequired)
    page.goto("/")
    request = page.locator(f"#request-{needed.request_id}")
    shown = request.locator(".value").first.inner_text()
    assert "\\u202e" in shown and "<script>" in shown and "\\n" in shown and "\\u001b" in shown
    assert not re.search("[\u202e\u202c\x1b\x07]", page.content())
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script").count() == 0
    screenshot(page, "hostile", tmp_path)
    row = agents.store.get_approval(needed.request_id)
    forged = {**row.action, "principal": {"agent": HOSTILE, "user": None}}
    tamper(  # a principal ctrlrun refuses at the door, written behind its back: tampering
        agents.path,
        f"UPDATE approvals SET action_json = '{json.dumps(forged)}'",
    )
    page.goto("/")
    assert page.locator(f"#tampered-{needed.request_id}").count() == 1
    assert page.locator(f"#request-{needed.request_id}").count() == 0
    assert "pwned" not in page.content() and page.evaluate("window.__pwned") is None
    screenshot(page, "tampered", tmp_path)


def test_a_request_past_an_over_approve_budget_shows_the_budget_and_a_grant_runs_it(
    page, agents, tmp_path
):
    policy = CONSOLE_POLICY.replace(
        "  stripe.refund:\n",
        "  stripe.refund:\n"
        "    budget: {sum: amount, limit: 12000, per: agent, window: 24h, over: approve}\n",
    )
    budgeted = Agents(tmp_path, policy)  # the store the console serves, a budgeted policy
    try:
        assert budgeted.refund("pay_b1", 10_000) == {"refund": "re_1"}
        needed = budgeted.refund("pay_b2", 5_000)
        assert isinstance(needed, ctrlrun.ApprovalRequired)
        page.goto("/")
        request = page.locator(f"#request-{needed.request_id}")
        request.wait_for()
        shown = request.locator(".budget").inner_text()
        assert "spent 10000 of 12000" in shown and "this call 5000 makes 15000" in shown
        request.locator("form.grant button").click()
        assert f"granted {needed.request_id}" in page.inner_text(".done")
        assert budgeted.refund("pay_b2", 5_000, approval=needed.request_id) == {"refund": "re_2"}
        charged = budgeted.receipts_for("refund:pay_b2")[-1]["budget"]
        assert (charged["spent_before"], charged["spent_after"]) == (10_000, 15_000)
    finally:
        budgeted.store.close()
