"""What a person needs to decide, in the console (issue 27), over the real `ctrlrun console`
process on loopback, read as HTML by a plain HTTP client: the request shows the rule that
matched, the environment, the effect key and its state, the approvers still needed, and money
as `€2,500.00 (250000)`; an AMBIGUOUS effect's page shows the action, arguments, principal,
attempt and idempotency token; a grant and a resolve take a reason, recorded; a call past an
``over: approve`` budget shows the budget as the store read it (an argument cannot forge the
line); and the console, like every command, defaults to the store beside the policy."""

from __future__ import annotations

import html
import http.client
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from ctrlrun.console.auth import hash_password
from ctrlrun.kernel.effect import idempotency_token_for
from ctrlrun.kernel.event import EventType
from support.console import PASSWORD, Agents, Console

DISPLAYED = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    display:
      amount: {money: EUR, minor: 2}
    rules:
      - when: {amount_lte: 100000}
        decision: allow
      - when: {amount_lte: 1000000}
        decision: approve
      - decision: approve
        approval: {count: 2}
  notify.send:
    decision: approve
    effect: "notify:{message_id}"
  payout:
    effect: "payout:{ref}"
    decision: allow
    budget: {sum: amount, limit: 100000, per: agent, window: 1d, over: approve}
"""


class Browserless:
    """A signed-in HTTP client reading pages as text. It keeps the session cookie itself: the
    console marks it Secure, which a browser honours on loopback and ``http.cookiejar`` does
    not."""

    def __init__(self, url: str, name: str = "ada") -> None:
        self.address = urllib.parse.urlsplit(url).netloc
        self.cookie = ""
        status, headers, _ = self.request("POST", "/sign-in", {"name": name, "password": PASSWORD})
        assert status == 303, status
        self.cookie = headers["set-cookie"].split(";", 1)[0]

    def request(self, method: str, path: str, form: dict[str, str] | None = None):
        conn = http.client.HTTPConnection(self.address, timeout=10)
        body = urllib.parse.urlencode(form).encode() if form is not None else None
        headers = {"Cookie": self.cookie} if self.cookie else {}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=headers)
        reply = conn.getresponse()
        text = reply.read().decode()
        conn.close()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, text

    def get(self, path: str) -> str:
        status, _, text = self.request("GET", path)
        assert status == 200, (status, text)
        return text

    def post(self, path: str, form: dict[str, str]) -> str:
        status, _, text = self.request("POST", path, {**form, "csrf": self.csrf()})
        assert status in (200, 303), (status, text)
        return text

    def csrf(self) -> str:
        return re.search(r'name="csrf" value="([^"]+)"', self.get("/")).group(1)


def text_of(page: str, css_class: str, after: str = "") -> str:
    """The text of the first element with ``css_class`` after ``after`` (tags dropped)."""
    start = page.index(after) if after else 0
    found = re.search(rf'class="{css_class}"[^>]*>(.*?)</d[dt]>', page[start:], re.DOTALL)
    assert found, f"no .{css_class} in the page"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


@pytest.fixture
def agents(tmp_path):
    (tmp_path / "ctrlrun.yaml").write_text(DISPLAYED)
    built = Agents(tmp_path, DISPLAYED)
    yield built
    built.store.close()


@pytest.fixture
def served(tmp_path, agents, monkeypatch):
    """The console started from the project directory WITHOUT --store-url: the store beside
    the policy, the policy's display and rules."""
    accounts = tmp_path / "accounts"
    accounts.write_text(f"ada:{hash_password(PASSWORD)}\nbo:{hash_password(PASSWORD)}\n")
    exe = Path(sys.executable).with_name("ctrlrun")
    command = [str(exe if exe.exists() else shutil.which("ctrlrun"))]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [*command, "console", "--listen", "127.0.0.1:0", "--accounts", str(accounts)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    assert found, f"console did not start: {line}{proc.stderr.read()}"
    yield found.group(0).rstrip("/")
    proc.terminate()
    proc.wait(timeout=10)


def test_the_console_defaults_to_the_store_beside_the_policy(served, agents):
    needed = agents.refund("pay_7", 250_000)
    assert needed.request_id in Browserless(served).get("/")


def test_a_request_shows_the_rule_environment_effect_needed_and_money(served, agents):
    small = agents.refund("pay_7", 250_000)
    large = agents.refund("pay_8", 2_500_000)
    page = Browserless(served).get("/")
    at_small, at_large = f'id="request-{small.request_id}"', f'id="request-{large.request_id}"'
    assert text_of(page, "rule", at_small) == (
        "rule[1]: when amount_lte €10,000.00 (1000000): approve (1 approver)"
    )
    assert text_of(page, "rule", at_large) == "rule[2]: always: approve (2 approvers)"
    assert text_of(page, "environment", at_small) == "production"
    assert text_of(page, "effect", at_small) == "refund:pay_7 not reserved yet"
    assert text_of(page, "needed", at_small) == "1 more approver"
    assert text_of(page, "needed", at_large) == "2 more approvers"
    assert 'Rule</dt><dd class="rule">not recorded' not in page
    shown = page[page.index(at_small) :]
    assert "€2,500.00 (250000)" in html.unescape(shown[: shown.index("</table>")])


def test_a_grant_takes_a_reason_recorded_on_its_event(served, agents):
    needed = agents.refund("pay_7", 250_000)
    client = Browserless(served)
    record = agents.store.get_approval(needed.request_id)
    client.post(
        f"/approvals/{needed.request_id}/grant",
        {"action_hash": record.action_hash, "reason": "customer called, refund confirmed"},
    )
    [event] = [e for e in agents.store.events() if e.type is EventType.APPROVAL_GRANTED]
    assert event.data == {"approver": "ada", "reason": "customer called, refund confirmed"}


def test_an_ambiguous_effect_shows_what_to_check_and_a_resolve_keeps_its_reason(served, agents):
    agents.fail_with.append(TimeoutError("reply lost"))
    agents.refund("pay_1", 50_000)
    client = Browserless(served)
    page = client.get("/effect?key=refund%3Apay_1")
    assert text_of(page, "action") == "stripe.refund"
    assert text_of(page, "principal") == '{"agent":"support-bot","user":"alice"}'
    assert text_of(page, "attempt") == "1"
    assert idempotency_token_for("refund:pay_1", 1) in page
    assert "€500.00 (50000)" in html.unescape(page)
    confirm = client.post(
        "/effect/resolve",
        {"key": "refund:pay_1", "outcome": "failed", "reason": "not in the Stripe dashboard"},
    )
    assert "the next identical call runs it again" in confirm  # the consequence, restated
    assert "Your reason, recorded with it: not in the Stripe dashboard" in html.unescape(confirm)
    client.post(
        "/effect/resolve",
        {
            "key": "refund:pay_1",
            "outcome": "failed",
            "reason": "not in the Stripe dashboard",
            "confirmed": "yes",
        },
    )
    [event] = [e for e in agents.store.events() if e.type is EventType.EFFECT_RESOLVED]
    assert event.data["resolver"] == "ada"
    assert event.data["reason"] == "not in the Stripe dashboard"


def test_without_a_policy_file_the_console_still_names_its_store(tmp_path):
    agents = Agents(tmp_path)
    console = Console(tmp_path, agents.path)  # an explicit --store-url still works
    try:
        agents.refund("pay_7", 250_000)
        assert "Rule" in Browserless(console.url).get("/")
    finally:
        console.stop()
        agents.store.close()


def test_a_plan_answered_in_the_console_keeps_its_reason(served, agents):
    from ctrlrun.durable import Plans

    plans = Plans(agents.store)
    plan = plans.propose(
        [{"action": "invoice.send", "arguments": {"to": "a@example.com"}}], agent="planner"
    )
    Browserless(served).post(
        f"/plans/{plan.plan_id}/approve",
        {"plan_hash": plan.plan_hash, "reason": "checked with finance"},
    )
    answered = plans.get(plan.plan_id)
    assert (answered.approver, answered.answer_reason) == ("ada", "checked with finance")


def test_a_request_past_an_over_approve_budget_shows_the_budget(served, agents):
    """The line comes from the request's recorded, checked facts; an argument dressed as a
    budget line stays an escaped argument; the grant lets the identical call run."""
    import ctrlrun
    from ctrlrun import ApprovalRequired

    @ctrlrun.protect("payout", control=agents.control)
    def payout(ref: str, amount: int, memo: str = "") -> str:
        return "paid"

    forged = "x\nbudget payout:agent:support-bot (per agent): spent 0 of 100000"
    with ctrlrun.context("support-bot"):
        payout("r1", 80_000)
        with pytest.raises(ApprovalRequired) as needed:
            payout("r2", 30_000, forged)
    client = Browserless(served)
    page = client.get("/")
    at = f'id="request-{needed.value.request_id}"'
    shown = text_of(page, "budget", at)
    assert shown.startswith(
        "budget payout:agent:support-bot (per agent): spent 80000 of 100000 in the 1d window"
    )
    assert "this call 30000 makes 110000, 10000 over the limit" in shown
    assert "(now: spent 80000 of 100000 in the window from" in shown
    assert page.count('class="budget') == 1
    record = agents.store.get_approval(needed.value.request_id)
    client.post(
        f"/approvals/{record.approval_id}/grant",
        {"action_hash": record.action_hash, "reason": "month end"},
    )
    with ctrlrun.context("support-bot"):
        assert payout("r2", 30_000, forged) == "paid"
    budget = agents.store.receipts()[-1].document["budget"]
    assert (budget["spent_before"], budget["spent_after"]) == (80_000, 110_000)
