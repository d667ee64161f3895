"""``ctrlrun policy templates`` lists what the store remembers; ``ctrlrun policy accept``
records an operator's acceptance of a changed effect-key template (as an event, shown by
``inspect``), after which calls keyed the new way run."""

from __future__ import annotations

import json

import pytest

import ctrlrun
from ctrlrun import EffectTemplateChanged
from ctrlrun.config import load_policy_file
from support.cli import refused, run

REKEYED = 'effect: "refund:{payment_id}:{amount:int}"'


def rekey(project):
    policy = project / "ctrlrun.yaml"
    policy.write_text(policy.read_text().replace('effect: "refund:{payment_id}"', REKEYED))


def test_templates_lists_what_the_first_calls_recorded(scene):
    scene.committed()
    result = run("policy", "templates")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == ["ACTION", "TEMPLATE", "BY", "SINCE"]
    assert row.split()[:3] == ["stripe.refund", "refund:{payment_id}", "(first"]
    [line] = run("policy", "templates", "--json").stdout.splitlines()
    document = json.loads(line)
    assert document["accepted_by"] is None and document["recorded_at"].endswith("Z")


def test_an_empty_store_says_so(scene):
    assert run("policy", "templates").stdout.startswith("no effect-key templates yet")
    assert run("policy", "templates", "--json").stdout == ""


def test_accept_takes_the_policy_file_s_template_and_unblocks(scene, project):
    scene.committed()
    rekey(project)
    changed = load_policy_file(project / "ctrlrun.yaml")
    blocked = ctrlrun.Control(changed, scene.store)

    @ctrlrun.protect("stripe.refund", control=blocked)
    def refund(payment_id: str, amount: int):
        return "ok"

    with ctrlrun.context("bot"):
        with pytest.raises(EffectTemplateChanged) as refused_call:
            refund("pay_9", 5)
        result = run("policy", "accept", "stripe.refund")
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            "accepted refund:{payment_id}:{amount:int} for stripe.refund"
            " (was refund:{payment_id}), as cli:local\n"
        )
        assert refund("pay_9", 5) == "ok"
    shown = run("inspect", refused_call.value.action_id).stdout
    assert "template     refund:{payment_id}:{amount}  accepted by cli:local" in shown
    assert "EFFECT_TEMPLATE_ACCEPTED" in shown and "reason=effect_template_changed" in shown


def test_accept_refuses_what_it_cannot_do_and_writes_nothing(scene):
    scene.committed()
    refused(run("policy", "accept", "stripe.refund"), "already its effect-key template")
    refused(run("policy", "accept", "crm.read"), "no effect template: give --template")
    refused(run("policy", "accept", "stripe.refund", "--template", "x:{"), "brace")
    before = run("policy", "templates").stdout
    assert "(first call)" in before
