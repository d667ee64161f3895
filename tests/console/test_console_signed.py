"""Signed grants from the console: with `--approver-key`, the console signs each grant as the
signed-in person, and a policy naming that person with the console's public key accepts it; a
console without the key writes grants the spending call refuses. In a real browser, against the
real `ctrlrun console` process."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun.kernel.signing import generate
from support.console import CONSOLE_POLICY, Agents, Console, sign_in

PEM, PUBLIC = generate()
SIGNED = CONSOLE_POLICY.replace(
    "schema: ctrlrun.policy/v1\n",
    f'schema: ctrlrun.policy/v1\napprovers:\n  ada: {{key: "{PUBLIC}"}}\n',
    1,
)


@pytest.fixture
def signed_agents(tmp_path):
    built = Agents(tmp_path, SIGNED)
    yield built
    built.store.close()


def served(browser, tmp_path, agents, *extra):
    console = Console(tmp_path, agents.path, *extra)
    context = browser.new_context(base_url=console.url)
    tab = context.new_page()
    sign_in(tab)
    return console, context, tab


def grant_in_browser(tab, request_id):
    tab.goto("/")
    tab.locator(f"#request-{request_id} form.grant button").click()
    assert f"granted {request_id}" in tab.inner_text(".done")


def test_a_console_with_the_key_signs_and_the_call_runs(browser, tmp_path, signed_agents):
    key = tmp_path / "console.pem"
    key.write_bytes(PEM)
    console, context, tab = served(browser, tmp_path, signed_agents, "--approver-key", str(key))
    try:
        needed = signed_agents.refund("pay_s", 250_000)
        assert isinstance(needed, ctrlrun.ApprovalRequired)
        grant_in_browser(tab, needed.request_id)
        assert signed_agents.refund("pay_s", 250_000) == {"refund": "re_1"}
        [receipt] = [
            r for r in signed_agents.receipts_for("refund:pay_s") if r["result"] == "committed"
        ]
        assert receipt["approval_signatures"][0]["approver"] == "ada"
    finally:
        context.close()
        console.stop()


def test_a_console_without_the_key_writes_a_grant_that_does_not_count(
    browser, tmp_path, signed_agents
):
    console, context, tab = served(browser, tmp_path, signed_agents)
    try:
        needed = signed_agents.refund("pay_u", 250_000)
        grant_in_browser(tab, needed.request_id)
        refused = signed_agents.refund("pay_u", 250_000)
        assert isinstance(refused, ctrlrun.ApprovalMismatch)
        assert refused.reason is ctrlrun.MismatchReason.UNSIGNED
        assert signed_agents.calls == []
    finally:
        context.close()
        console.stop()


def test_m_of_n_progress_is_shown(browser, tmp_path):
    two = CONSOLE_POLICY.replace(
        "  stripe.refund:\n", "  stripe.refund:\n    approval: {count: 2}\n"
    )
    agents = Agents(tmp_path, two)
    console, context, tab = served(browser, tmp_path, agents)
    try:
        needed = agents.refund("pay_m", 250_000)
        grant_in_browser(tab, needed.request_id)
        tab.goto("/")
        progress = tab.locator(f"#request-{needed.request_id} .progress").inner_text()
        assert progress == "1 of 2 (ada)"
        assert agents.store.get_approval(needed.request_id).status.value == "pending"
    finally:
        context.close()
        console.stop()
        agents.store.close()
