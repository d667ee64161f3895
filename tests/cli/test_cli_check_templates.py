"""``ctrlrun check`` refuses a policy whose effect-key template could render one key for two
different calls (``k:{a}{b}``), naming the file, the line and the template (decision 0026)."""

from __future__ import annotations

import json
import sys

from support.cli import refused, run

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  shop.refund:
    decision: allow
    effect: "k:{a}{b}"
"""

TOOLS = """\
import ctrlrun


@ctrlrun.protect("shop.refund")
def refund(a: str, b: str):
    return a + b
"""


def test_check_names_the_template(empty):
    (empty / "ctrlrun.yaml").write_text(POLICY)
    (empty / "one_key_tools.py").write_text(TOOLS)
    try:
        line = refused(run("check", "one_key_tools"), "ctrlrun.yaml:5", "'k:{a}{b}'", "touch")
    finally:
        sys.modules.pop("one_key_tools", None)
    assert "actions.shop.refund.effect" in line


TYPED_POLICY = """\
schema: ctrlrun.policy/v1
actions:
  shop.refund:
    decision: allow
    effect: "refund:{order}:{note}"
  shop.ship:
    decision: allow
    effect: "ship:{order:int}"
"""

TYPED_TOOLS = """\
import ctrlrun


@ctrlrun.protect("shop.refund")
def refund(order: int, note: str):
    return order


@ctrlrun.protect("shop.ship")
def ship(order: int):
    return order
"""


def test_check_reports_a_key_type_every_call_would_be_refused_for(empty):
    (empty / "ctrlrun.yaml").write_text(TYPED_POLICY)
    (empty / "typed_key_tools.py").write_text(TYPED_TOOLS)
    try:
        result = run("check", "typed_key_tools", "--json")
    finally:
        sys.modules.pop("typed_key_tools", None)
    assert result.exit_code == 1
    findings = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(f["function"], f["kind"]) for f in findings] == [
        ("typed_key_tools:refund", "key_type")
    ]
    assert "write {order:int}" in findings[0]["detail"]
