"""``ctrlrun check`` refuses a policy whose effect-key template could render one key for two
different calls (``k:{a}{b}``), naming the file, the line and the template (decision 0021)."""

from __future__ import annotations

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
