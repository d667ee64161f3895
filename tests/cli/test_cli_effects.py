"""``ctrlrun effects`` and ``ctrlrun resolve`` against a store written by real protected calls."""

from __future__ import annotations

import json

import pytest

import ctrlrun
from ctrlrun import EffectState, EventType
from support.cli import refused, run, usage


def test_effects_lists_every_key_with_its_state_in_aligned_columns(scene):
    scene.committed("pay_1")
    scene.ambiguous("pay_2")
    result = run("effects")
    assert result.exit_code == 0 and result.stderr == ""
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "EFFECT",
        "KEY",
        "STATE",
        "ATTEMPT",
        "ACTION",
        "ID",
        "UPDATED",
        "NOTE",
        "NAME",
        "REQUESTED",
        "BY",
        "IDEMPOTENCY",
        "TOKEN",
        "ARGUMENTS",
    ]
    assert [row.split()[:3] for row in rows] == [
        ["refund:pay_1", "committed", "1"],
        ["refund:pay_2", "ambiguous", "1"],
    ]
    assert "TimeoutError: reply lost" in rows[1]
    assert {row.index(row.split()[1]) for row in rows} == {header.index("STATE")}  # aligned


def test_state_filter_and_the_empty_cases(scene):
    assert run("effects").stdout == "no effects yet\n"
    scene.committed("pay_1")
    assert run("effects", "--status", "ambiguous").stdout == "no ambiguous effects\n"
    assert "refund:pay_1" in run("effects", "--status", "committed").stdout
    usage(run("effects", "--status", "nonsense"), "nonsense")


def test_json_is_one_document_per_line_with_stable_fields(scene):
    first = scene.committed("pay_1")
    scene.ambiguous("pay_2")
    lines = run("effects", "--json").stdout.splitlines()
    documents = [json.loads(line) for line in lines]
    assert [d["effect_key"] for d in documents] == ["refund:pay_1", "refund:pay_2"]
    assert set(documents[0]) == {
        "effect_key",
        "state",
        "lease_expired",
        "attempt",
        "action_id",
        "created_at",
        "updated_at",
        "lease_expires_at",
        "resolved_by",
        "error",
        "result",
        "action",
        "arguments",
        "arguments_shown",
        "principal",
        "idempotency_token",
    }
    assert documents[0]["action_id"] == first and documents[0]["result"] == {"refund": "re_1"}
    assert documents[1]["state"] == "ambiguous" and documents[1]["lease_expired"] is False


def test_an_expired_lease_is_shown_without_transitioning_the_record(scene):
    scene.executing("refund:crashed", lapsed=True)
    scene.executing("refund:running", lapsed=False)
    before = scene.store.events()
    out = run("effects").stdout
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "  executing (lease expired)  " in lines["refund:crashed"]
    running = lines["refund:running"]
    assert "executing" in running and "lease expired" not in running
    documents = {
        d["effect_key"]: d for d in map(json.loads, run("effects", "--json").stdout.splitlines())
    }
    doc = documents["refund:crashed"]
    assert documents["refund:running"]["lease_expired"] is False
    assert (doc["state"], doc["lease_expired"]) == ("executing", True)
    assert scene.store.get_effect("refund:crashed").state is EffectState.EXECUTING
    assert scene.store.events() == before


@pytest.mark.parametrize(("flag", "state"), [("--committed", "committed"), ("--failed", "failed")])
def test_resolve_settles_an_ambiguous_effect_as_cli_local(scene, flag, state):
    scene.ambiguous("pay_2")
    result = run("resolve", "refund:pay_2", flag)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"refund:pay_2 resolved {state} by cli:local"
    record = scene.store.get_effect("refund:pay_2")
    assert (record.state, record.resolved_by) == (EffectState(state), "cli:local")
    assert scene.store.events()[-1].type is EventType.EFFECT_RESOLVED
    retry = scene.refund("pay_2", 5_000)
    if state == "failed":
        assert lines[1] == "a retry is now allowed, as attempt 2"
        assert retry == {"refund": "re_2"} and scene.store.get_effect("refund:pay_2").attempt == 2
    else:
        assert lines[1] == "a retry will be refused as a duplicate"
        assert isinstance(retry, ctrlrun.DuplicateEffect) and len(scene.remote_calls) == 1


@pytest.mark.parametrize("flags", [(), ("--committed", "--failed")])
def test_resolve_needs_exactly_one_flag(scene, flags):
    scene.ambiguous("pay_2")
    usage(run("resolve", "refund:pay_2", *flags), "exactly one of --committed and --failed")
    assert scene.store.get_effect("refund:pay_2").state is EffectState.AMBIGUOUS


def test_resolve_refuses_a_key_that_is_not_ambiguous_and_writes_nothing(scene):
    scene.committed("pay_1")
    before = scene.store.events()
    refused(run("resolve", "refund:pay_1", "--failed"), "committed, not ambiguous")
    refused(run("resolve", "refund:nobody", "--failed"), "no effect record", "refund:nobody")
    assert scene.store.get_effect("refund:pay_1").state is EffectState.COMMITTED
    assert scene.store.events() == before


def test_resolve_explains_a_lapsed_lease_instead_of_moving_it(scene):
    scene.executing("refund:crashed", lapsed=True)
    line = refused(run("resolve", "refund:crashed", "--failed"), "lease expired")
    assert "next attempt" in line
    assert scene.store.get_effect("refund:crashed").state is EffectState.EXECUTING
