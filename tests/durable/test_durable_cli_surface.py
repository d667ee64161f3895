"""What a person approves from, on both stores: ``plans show`` prints every argument whole, an
approval by hash is refused (nothing written) when the hash differs, ``--status`` is a choice,
``--json`` times are RFC 3339 with ``Z``, and ``ctrlrun outbox`` settles parked and dead
messages."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner

from ctrlrun.cli import main
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.durable import Dispatcher, MessageStatus, Operations, Outbox, Plans, PlanStatus
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.sqlite import SQLiteStateStore

LONG = "x" * 300 + "-the-end"
STEPS = [
    {"action": "inventory.reserve", "arguments": {"item": LONG, "qty": 2}},
    {"action": "invoice.send", "arguments": {"to": "a@example.com", "note": "n" * 100}},
]
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
LOOKS_LIKE_TIME = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d")


class Cli:
    """The store (real SQLite file or real Postgres schema, on the real clock, since the CLI
    judges expiry by it) and ``ctrlrun`` pointed at it, with ``bob`` as the person."""

    def __init__(self, store: Any, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store, self.url = store, url
        monkeypatch.setenv("CTRLRUN_STORE_URL", url)
        monkeypatch.setenv("CTRLRUN_USER", "bob")

    def __call__(self, *args: str) -> Any:
        return CliRunner().invoke(main, list(args))

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of ``table``, read through the store's own read path."""
        return self.store.read(lambda txn: [dict(r) for r in txn.all("dump_" + table, {})])


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def cli(request, tmp_path, monkeypatch):
    if request.param == "sqlite":
        store = SQLiteStateStore(tmp_path / "state.db")
        url = f"sqlite://{store.path}"
    else:
        schema = request.getfixturevalue("pg_schema")
        store = PostgresStateStore(schema.url, schema=schema.schema)
        url = with_schema(schema.url, schema.schema)
    yield Cli(store, url, monkeypatch)
    store.close()


def snapshot(store: Any) -> Any:
    """Everything a plan answer could change: the plan rows and the receipt chain."""
    plans = Plans(store)
    return [(p.plan_id, p.status, p.approver, p.approved_hash) for p in plans.list()], (
        store.chain_head()
    )


def test_plans_show_prints_every_argument_whole(cli):
    plan = Plans(cli.store).propose(STEPS, agent="planner")
    shown = cli("plans", "show", plan.plan_id)
    assert shown.exit_code == 0, shown.output
    assert json.dumps(STEPS[0]["arguments"], sort_keys=True) in shown.output
    assert json.dumps(STEPS[1]["arguments"], sort_keys=True) in shown.output
    assert "..." not in shown.output and "…" not in shown.output
    assert f"hash     {plan.plan_hash}\n" in shown.output
    listed = cli("plans", "list").output
    assert plan.plan_hash in listed  # the whole hash, not a prefix


def test_an_approval_by_a_hash_other_than_the_stored_one_is_refused_and_writes_nothing(cli):
    plan = Plans(cli.store).propose(STEPS, agent="planner")
    before = snapshot(cli.store)
    for wrong in ("sha256:" + "0" * 64, plan.plan_hash[:-1], plan.plan_hash + " "):
        refused = cli("plans", "approve", plan.plan_id, "--hash", wrong)
        assert refused.exit_code == 1 and refused.output.startswith("Error: "), refused.output
        assert refused.output.count("\n") == 1
        assert snapshot(cli.store) == before
    approved = cli("plans", "approve", plan.plan_id, "--hash", plan.plan_hash)
    assert approved.exit_code == 0
    assert approved.output == f"approved {plan.plan_id} {plan.plan_hash} by bob\n"
    assert Plans(cli.store).get(plan.plan_id).status is PlanStatus.APPROVED


def test_status_is_a_choice_listing_its_values(cli):
    commands = {
        ("plans", "list"): "'approved'",
        ("operations", "list"): "'succeeded'",
        ("outbox", "list"): "'dead'",
        ("effects",): "'ambiguous'",
        ("approvals",): "'granted'",
    }
    for command, value in commands.items():
        result = cli(*command, "--status", "bogus")
        assert result.exit_code == 2, (command, result.output)
        assert "'bogus' is not one of" in result.output and value in result.output
    assert cli("effects", "--state", "ambiguous").exit_code == 2  # one name: --status


def times_in(document: Any) -> list[str]:
    """Every string in ``document`` that looks like a timestamp."""
    if isinstance(document, dict):
        return [t for value in document.values() for t in times_in(value)]
    if isinstance(document, list):
        return [t for value in document for t in times_in(value)]
    return [document] if isinstance(document, str) and LOOKS_LIKE_TIME.match(document) else []


def test_every_json_time_is_rfc3339_utc_with_z(cli):
    plans = Plans(cli.store)
    plan = plans.propose(STEPS, agent="planner")
    plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="alice")
    Operations(cli.store).submit("branch.reset", "db:main")
    Outbox(cli.store).enqueue("mail", {"to": "a@example.com"})
    outputs = [
        cli("plans", "list", "--json"),
        cli("plans", "show", plan.plan_id, "--json"),
        cli("operations", "list", "--json"),
        cli("outbox", "list", "--json"),
    ]
    found = []
    for result in outputs:
        assert result.exit_code == 0, result.output
        for line in result.output.splitlines():
            found += times_in(json.loads(line))
    assert len(found) >= 10
    assert [t for t in found if not RFC3339_Z.match(t)] == []


def park(cli, topic: str = "pay") -> str:
    """An outbox message parked AMBIGUOUS by a delivery whose outcome is unknown."""
    message_id = Outbox(cli.store).enqueue(topic, {"amount": 5})

    def lost(message):
        raise TimeoutError("no reply")

    (delivery,) = Dispatcher(cli.store, lost, on_unknown={topic: "park"}).run_once()
    assert delivery.status is MessageStatus.AMBIGUOUS
    return message_id


def kill(cli) -> str:
    """An outbox message DEAD after its only attempt failed."""
    message_id = Outbox(cli.store).enqueue("mail", {"to": "a@example.com"})

    def refused(message):
        raise TimeoutError("mail server down")

    (delivery,) = Dispatcher(cli.store, refused, max_attempts=1).run_once()
    assert delivery.status is MessageStatus.DEAD
    return message_id


def test_outbox_lists_shows_and_resolves_parked_and_dead_messages(cli):
    parked, dead = park(cli), kill(cli)
    listed = cli("outbox", "list")
    assert listed.exit_code == 0
    assert [line.split()[:2] for line in listed.output.splitlines()[1:]] == [
        [parked, "ambiguous"],
        [dead, "dead"],
    ]
    assert cli("outbox", "list", "--status", "dead", "--json").output.count("\n") == 1
    shown = cli("outbox", "show", parked)
    assert shown.exit_code == 0 and 'payload   {"amount": 5}' in shown.output
    assert Outbox(cli.store).get(parked).token in shown.output
    sent = cli("outbox", "resolve", parked, "--sent")
    assert sent.exit_code == 0 and sent.output.startswith(f"{parked} resolved sent: ")
    again = cli("outbox", "resolve", dead, "--pending", "--by", "carol")
    assert again.exit_code == 0 and "carol" in again.output
    assert Outbox(cli.store).get(parked).status is MessageStatus.SENT
    assert Outbox(cli.store).get(dead).status is MessageStatus.PENDING
    delivered = Dispatcher(cli.store, lambda m: None).run_once()
    assert [(d.message_id, d.status) for d in delivered] == [(dead, MessageStatus.SENT)]


def test_outbox_refusals_write_nothing(cli):
    parked = park(cli)
    Outbox(cli.store).enqueue("mail", {})
    before = [(m.message_id, m.status, m.attempts) for m in Outbox(cli.store).list()]
    pending = before[1][0]
    usage = cli("outbox", "resolve", parked, "--sent", "--failed")
    assert usage.exit_code == 2 and "exactly one" in usage.output
    assert cli("outbox", "resolve", parked).exit_code == 2
    refused = cli("outbox", "resolve", pending, "--sent")
    assert refused.exit_code == 1
    assert refused.output == f"Error: message {pending} is pending, not ambiguous or dead\n"
    missing = cli("outbox", "show", "msg_missing")
    assert missing.exit_code == 1 and missing.output == "Error: no outbox message msg_missing\n"
    after = [(m.message_id, m.status, m.attempts) for m in Outbox(cli.store).list()]
    assert after == before
