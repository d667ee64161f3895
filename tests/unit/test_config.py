"""The strict loader of ``ctrlrun.yaml``: every refusal names its key and its line."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from ctrlrun import Action, PolicyError, Principal
from ctrlrun.config import load_policy_file, load_policy_text, parse_yaml
from ctrlrun.kernel.policy import POLICY_SCHEMA, Decision, Policy, Reason

GOOD = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    description: |
      Refunds under 50.00 run alone; larger ones need a human.
    effect: "refund:{payment_id}"
    resource: "payment:{payment_id}"
    max_attempts: 3
    rules:
      - when:
          amount_gte: 0
          amount_lte: 5000
          currency_in: [usd, eur]
          live_eq: true
          note_neq: null
        decision: allow
      - when: {amount_gt: 5000}
        decision: approve
      - decision: deny
  k8s.namespace.delete:
    decision: approve
"""


def refused(text: str, *, source: str | None = None) -> PolicyError:
    """The ``PolicyError`` loading ``text`` raises (the test fails if it loads)."""
    with pytest.raises(PolicyError) as caught:
        load_policy_text(textwrap.dedent(text), source=source)
    return caught.value


def entry(body: str) -> str:
    """A document whose single action ``a.b`` has ``body`` (lines from line 4)."""
    indented = textwrap.indent(textwrap.dedent(body), "    ")
    return f"schema: ctrlrun.policy/v1\nactions:\n  a.b:\n{indented}"


def when(conditions: str) -> str:
    """A document whose single rule's ``when`` holds ``conditions`` (lines from line 7)."""
    indented = textwrap.indent(textwrap.dedent(conditions), "          ")
    return entry("rules:\n  - decision: allow\n    when:\n") + indented


WHEN = "actions.a.b.rules[0].when"


class TestLoading:
    def test_a_good_policy_loads_and_decides(self) -> None:
        """The documented shape loads; its rules decide as written."""
        policy = load_policy_text(GOOD, source="ctrlrun.yaml")
        assert policy.schema == POLICY_SCHEMA
        assert policy.source == "ctrlrun.yaml"
        assert sorted(policy.actions) == ["k8s.namespace.delete", "stripe.refund"]
        refund = policy.actions["stripe.refund"]
        assert refund.max_attempts == 3
        assert refund.effect is not None
        assert refund.effect.placeholders == ("payment_id",)
        assert refund.description is not None
        call = {"amount": 100, "currency": "usd", "live": True, "note": "x", "payment_id": "p"}
        evaluation = policy.evaluate(Action("stripe.refund", call, Principal("bot")))
        assert (evaluation.decision, evaluation.label) == (Decision.ALLOW, "rule[0]")

    def test_text_and_file_and_class_entry_points_agree(self, tmp_path: Path) -> None:
        """Text, file and ``load_policy_text`` give the same policy."""
        path = tmp_path / "ctrlrun.yaml"
        path.write_text(GOOD, encoding="utf-8")
        hashes = {
            load_policy_text(GOOD).policy_hash,
            load_policy_file(path).policy_hash,
            load_policy_file(str(path)).policy_hash,
            load_policy_text(GOOD).policy_hash,
        }
        assert len(hashes) == 1

    def test_the_json_subset_of_yaml_is_read_as_json(self) -> None:
        """Decimal integers with a sign, true/false in any case and every null spelling load."""
        data, _ = parse_yaml("a: +5\nb: -0\nc: TRUE\nd: False\ne: ~\nf:\ng: 'quoted 1.5'\nh: [1]\n")
        assert data == {
            "a": 5,
            "b": 0,
            "c": True,
            "d": False,
            "e": None,
            "f": None,
            "g": "quoted 1.5",
            "h": [1],
        }

    def test_lines_are_recorded_per_key_and_item(self) -> None:
        """The line map holds the 1-based line of every key and list item."""
        _, lines = parse_yaml(GOOD)
        assert lines[()] == 1
        assert lines[("actions", "stripe.refund")] == 3
        assert lines[("actions", "stripe.refund", "rules", 1)] == 17
        assert lines[("actions", "stripe.refund", "rules", 0, "when", "currency_in")] == 13
        assert lines[("actions", "stripe.refund", "rules", 0, "when", "currency_in", 1)] == 13

    def test_an_empty_actions_mapping_denies_everything(self) -> None:
        """``actions: {}`` is allowed: it names nothing, so everything is unknown and denied."""
        policy = load_policy_text("schema: ctrlrun.policy/v1\nactions: {}\n")
        evaluation = policy.evaluate(Action("a.b", {}, Principal("bot")))
        assert evaluation.reason is Reason.UNKNOWN_ACTION

    def test_a_byte_order_mark_is_tolerated(self, tmp_path: Path) -> None:
        """A UTF-8 file saved with a BOM loads."""
        path = tmp_path / "ctrlrun.yaml"
        path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
        assert load_policy_file(path).policy_hash == load_policy_text(GOOD).policy_hash

    def test_a_template_may_use_placeholders_and_the_effect_may_use_resource(self) -> None:
        """Placeholders are resolved per call elsewhere; ``{resource}`` is fine in ``effect``."""
        policy = load_policy_text(entry("decision: allow\neffect: 'ns:{resource}:{x}'\n"))
        effect = policy.actions["a.b"].effect
        assert effect is not None
        assert effect.placeholders == ("resource", "x")


class TestDuplicates:
    def test_a_duplicate_key_names_key_line_and_column(self) -> None:
        """The second occurrence is reported with its line and column, and the first's line."""
        error = refused(entry("decision: allow\ndecision: deny\n"))
        assert (error.key, error.line) == ("actions.a.b.decision", 5)
        assert "duplicate key 'decision' at line 5, column 5 (first at line 4)" in error.message

    def test_duplicate_action_names_and_conditions_are_refused(self) -> None:
        """Duplicates are refused at every level, not only in entries."""
        error = refused(
            "schema: ctrlrun.policy/v1\nactions:\n  a.b: {decision: allow}\n"
            "  a.b: {decision: deny}\n"
        )
        assert (error.key, error.line) == ("actions.a.b", 4)
        assert "column 3" in error.message
        error = refused(when("x_eq: 1\nx_eq: 2\n"))
        assert (error.key, error.line) == (f"{WHEN}.x_eq", 8)
        assert "column 11" in error.message
        error = refused("schema: ctrlrun.policy/v1\nschema: ctrlrun.policy/v1\nactions: {}\n")
        assert (error.key, error.line) == ("schema", 2)

    def test_a_duplicate_in_flow_style_is_refused(self) -> None:
        """``{a: 1, a: 2}`` is a duplicate too, with its column."""
        error = refused(when("{x_eq: 1, x_eq: 2}\n").replace("when:\n          {", "when: {"))
        assert error.key == f"{WHEN}.x_eq"
        assert error.line == 6
        assert "duplicate key" in error.message


FLOATS = [
    "1.5",
    "1e3",
    "1E3",
    "1.0e+3",
    "-2.5e-3",
    ".5",
    "-.5",
    "1_000.5",
    "1:30.5",
    "1.",
    ".inf",
    "-.Inf",
    "+.INF",
    ".nan",
    ".NaN",
    "0o17",
]


class TestScalars:
    @pytest.mark.parametrize("spelling", FLOATS)
    def test_floats_are_refused_in_conditions(self, spelling: str) -> None:
        """Every float spelling is refused with the integer-minor-units hint."""
        error = refused(when(f"amount_lte: {spelling}\n"))
        assert (error.key, error.line) == (f"{WHEN}.amount_lte", 7)
        assert "minor units" in error.message

    @pytest.mark.parametrize(
        ("body", "key", "line"),
        [
            ("decision: allow\nmax_attempts: 1.5\n", "actions.a.b.max_attempts", 5),
            ("decision: 1e3\n", "actions.a.b.decision", 4),
            ("decision: allow\ndescription: .inf\n", "actions.a.b.description", 5),
            (
                "rules:\n  - decision: allow\n    when: {x_in: [1, 2.5]}\n",
                "actions.a.b.rules[0].when.x_in[1]",
                6,
            ),
            (
                "rules:\n  - decision: allow\n    when: {x_eq: -.nan}\n",
                "actions.a.b.rules[0].when.x_eq",
                6,
            ),
            ("decision: allow\nextra: 3.0\n", "actions.a.b.extra", 5),
        ],
    )
    def test_floats_are_refused_everywhere(self, body: str, key: str, line: int) -> None:
        """A float is refused wherever it appears, even under a key that is refused anyway."""
        error = refused(entry(body))
        assert (error.key, error.line) == (key, line)
        assert "minor units" in error.message

    def test_a_float_at_the_top_level_is_refused(self) -> None:
        """``schema: 1.0`` is refused as a float before the schema is even read."""
        error = refused("schema: 1.0\nactions: {}\n")
        assert (error.key, error.line) == ("schema", 1)
        assert "float" in error.message

    def test_quoted_numbers_are_text(self) -> None:
        """A quoted ``"1.5"`` is a string, and compares as one."""
        policy = load_policy_text(when("v_eq: '1.5'\n"))
        call = Action("a.b", {"v": "1.5"}, Principal("bot"))
        assert policy.evaluate(call).decision is Decision.ALLOW

    @pytest.mark.parametrize("spelling", ["yes", "No", "ON", "off"])
    def test_yaml_1_1_booleans_are_refused(self, spelling: str) -> None:
        """``yes``/``no``/``on``/``off`` are not silently booleans."""
        error = refused(when(f"flag_eq: {spelling}\n"))
        assert (error.key, error.line) == (f"{WHEN}.flag_eq", 7)
        assert "write true or false, or quote it" in error.message

    @pytest.mark.parametrize("spelling", ["012", "0x1F", "0b11", "1_000", "1:30", "-0x1"])
    def test_non_decimal_integers_are_refused(self, spelling: str) -> None:
        """Octal, hex, binary, underscores and sexagesimal are refused: decimal only."""
        error = refused(when(f"amount_lte: {spelling}\n"))
        assert (error.key, error.line) == (f"{WHEN}.amount_lte", 7)
        assert "plain decimals" in error.message

    def test_an_integer_beyond_the_digit_limit_is_refused(self) -> None:
        """An integer too long to convert is a PolicyError, not a ValueError."""
        error = refused(when(f"amount_lte: {'9' * 5000}\n"))
        assert (error.key, error.line) == (f"{WHEN}.amount_lte", 7)
        assert "too long" in error.message

    @pytest.mark.parametrize("spelling", ["2024-01-01", "2024-01-01T10:00:00Z", "2024-1-1 1:00:00"])
    def test_timestamps_are_refused(self, spelling: str) -> None:
        """Dates are not JSON; they must be quoted to be text."""
        error = refused(when(f"day_eq: {spelling}\n"))
        assert (error.key, error.line) == (f"{WHEN}.day_eq", 7)
        assert "a timestamp" in error.message
        assert "quote it" in error.message

    def test_a_lone_surrogate_escape_is_refused(self) -> None:
        """``"\\ud800"`` decodes to text with no UTF-8 form, which could not be hashed."""
        error = refused(when('x_eq: "\\ud800"\n'))
        assert (error.key, error.line) == (f"{WHEN}.x_eq", 7)
        assert "lone surrogate" in error.message
        error = refused(when('"x\\udfff_eq": 1\n'))
        assert (error.key, error.line) == (f"{WHEN}.x\udfff_eq", 7)

    def test_the_yaml_value_scalar_is_refused(self) -> None:
        """The obscure ``=`` value scalar is not JSON."""
        error = refused(when("x_eq: =\n"))
        assert (error.key, error.line) == (f"{WHEN}.x_eq", 7)
        assert "a value" in error.message


class TestStructure:
    @pytest.mark.parametrize(
        ("value", "tag"),
        [
            ("!!binary aGVsbG8=", "!!binary"),
            ("!!set {a, b}", "!!set"),
            ("!!omap [{a: 1}]", "!!omap"),
            ("!!str 5", "!!str"),
            ("!custom 5", "!custom"),
            ("! 5", "!"),
            ("!!python/object:os.system ls", "!!python/object:os.system"),
        ],
    )
    def test_explicit_tags_are_refused(self, value: str, tag: str) -> None:
        """Binary, sets, ordered maps and every other explicit tag are refused by name."""
        error = refused(when(f"x_eq: {value}\n"))
        assert (error.key, error.line) == (f"{WHEN}.x_eq", 7)
        assert f"tag {tag}:" in error.message

    def test_anchors_and_aliases_are_refused(self) -> None:
        """An anchored value is refused where it is defined, before any alias can copy it."""
        text = entry(
            "rules:\n  - decision: allow\n    when: &w {x_eq: 1}\n  - decision: deny\n"
            "    when: *w\n"
        )
        error = refused(text)
        assert (error.key, error.line) == ("actions.a.b.rules[0].when", 6)
        assert "anchor &w" in error.message

    def test_an_anchor_on_a_key_or_a_scalar_is_refused(self) -> None:
        """Anchors are refused on keys and on scalars too."""
        error = refused(entry("&k decision: allow\n"))
        assert (error.key, error.line) == ("actions.a.b", 4)
        assert "anchor &k on a key" in error.message
        error = refused(entry("decision: &d allow\n"))
        assert (error.key, error.line) == ("actions.a.b.decision", 4)

    def test_an_alias_bomb_is_refused_at_once(self) -> None:
        """Nested aliases cannot make loading expand exponentially."""
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 12)]
        error = refused("\n".join(lines) + "\n")
        assert (error.key, error.line) == ("a0", 1)

    def test_merge_keys_are_refused(self) -> None:
        """``<<`` would copy keys from elsewhere: refused."""
        error = refused(entry("decision: allow\n<<: {max_attempts: 3}\n"))
        assert (error.key, error.line) == ("actions.a.b.<<", 5)
        assert "merge keys" in error.message

    @pytest.mark.parametrize(
        ("key", "kind"), [("1", "an int"), ("on", "a bool"), ("~", "a null"), ("2024-01-01", "a t")]
    )
    def test_non_string_keys_are_refused(self, key: str, kind: str) -> None:
        """A key must read as a string; ``on:`` or ``1:`` must be quoted."""
        error = refused(f"schema: ctrlrun.policy/v1\nactions:\n  {key}: {{decision: allow}}\n")
        assert error.key == f"actions.{key}"
        assert error.line == 3
        assert f"reads as {kind}" in error.message

    def test_a_collection_key_is_refused(self) -> None:
        """A complex key (``? [a, b]``) is refused."""
        error = refused("schema: ctrlrun.policy/v1\nactions:\n  ? [a, b]\n  : {decision: allow}\n")
        assert (error.key, error.line) == ("actions", 3)
        assert "not a list or a mapping" in error.message


class TestSchema:
    def test_a_missing_schema_is_an_error_never_assumed(self) -> None:
        """Without ``schema`` nothing loads."""
        error = refused("actions:\n  a.b: {decision: allow}\n")
        assert (error.key, error.line) == ("schema", 1)
        assert "missing required key" in error.message

    @pytest.mark.parametrize(
        "value", ["ctrlrun.policy/v2", "ctrlrun.policy/v0", "'ctrlrun.policy/v1 '", "1", "[x]"]
    )
    def test_a_wrong_schema_is_refused(self, value: str) -> None:
        """There is one schema, ``ctrlrun.policy/v1``; anything else is refused by name."""
        error = refused(f"actions: {{}}\nschema: {value}\n")
        assert (error.key, error.line) == ("schema", 2)
        assert "must be 'ctrlrun.policy/v1'" in error.message

    def test_missing_actions_is_refused(self) -> None:
        """``actions`` is required."""
        error = refused("schema: ctrlrun.policy/v1\n")
        assert (error.key, error.line) == ("actions", 1)

    @pytest.mark.parametrize("value", ["", "[a.b]", "allow"])
    def test_actions_must_be_a_mapping(self, value: str) -> None:
        """``actions`` maps names to entries."""
        error = refused(f"schema: ctrlrun.policy/v1\nactions: {value}\n")
        assert (error.key, error.line) == ("actions", 2)
        assert "must be a mapping of action names" in error.message

    @pytest.mark.parametrize(
        ("text", "key", "line"),
        [
            ("schema: ctrlrun.policy/v1\nactions: {}\nenforce: false\n", "enforce", 3),
            (entry("decision: allow\ncontrols: [x]\n"), "actions.a.b.controls", 5),
            (
                entry("rules:\n  - decision: allow\n    whenn: {x_eq: 1}\n"),
                "actions.a.b.rules[0].whenn",
                6,
            ),
            (when("amount_lte: 5\namount_lte_x: 5\n"), f"{WHEN}.amount_lte_x", 8),
        ],
        ids=["top", "entry", "rule", "condition"],
    )
    def test_unknown_keys_are_refused_at_every_level(self, text: str, key: str, line: int) -> None:
        """Every key set is closed; the unknown key is named with its dotted path and line."""
        error = refused(text)
        assert (error.key, error.line) == (key, line)

    @pytest.mark.parametrize(
        ("body", "key", "line", "message"),
        [
            ("{}", "actions.a.b", 3, "exactly one of 'decision' and 'rules'"),
            ("decision: allow\nrules: [{decision: deny}]\n", "actions.a.b.rules", 5, "exactly"),
            ("decision: ALLOW\n", "actions.a.b.decision", 4, "allow, approve, deny"),
            ("decision: true\n", "actions.a.b.decision", 4, "allow, approve, deny"),
            ("rules: []\n", "actions.a.b.rules", 4, "at least one rule"),
            ("rules: {decision: allow}\n", "actions.a.b.rules", 4, "a list of rules"),
            ("rules: [allow]\n", "actions.a.b.rules[0]", 4, "must be a mapping"),
            ("rules:\n  - when: {x_eq: 1}\n", "actions.a.b.rules[0].decision", 5, "missing"),
            ("rules:\n  - decision: allow\n    when:\n", "actions.a.b.rules[0].when", 6, "mapping"),
            (
                "rules:\n  - decision: allow\n    when: {}\n",
                "actions.a.b.rules[0].when",
                6,
                "leave 'when' out",
            ),
            (
                "rules:\n  - decision: allow\n    when: [x_eq]\n",
                "actions.a.b.rules[0].when",
                6,
                "mapping",
            ),
            (
                "rules:\n  - decision: allow\n  - decision: deny\n",
                "actions.a.b.rules[1]",
                6,
                "can never match",
            ),
            ("decision: allow\nmax_attempts:\n", "actions.a.b.max_attempts", 5, "leave the key"),
            ("decision: allow\ndescription: [a]\n", "actions.a.b.description", 5, "a string"),
            ("[decision, allow]\n", "actions.a.b", 3, "must be a mapping"),
        ],
    )
    def test_entry_and_rule_refusals(self, body: str, key: str, line: int, message: str) -> None:
        """Each structural mistake in an entry or rule names its key and line."""
        text = (
            entry(body)
            if not body.startswith(("{", "["))
            else entry(body).replace("  a.b:\n    ", "  a.b: ")
        )
        error = refused(text)
        assert (error.key, error.line) == (key, line)
        assert message in error.message

    @pytest.mark.parametrize("name", ["a..b", "1a.b", "a b", "a.", "-a"])
    def test_bad_action_names_are_refused(self, name: str) -> None:
        """Action names are dotted identifiers."""
        error = refused(f"schema: ctrlrun.policy/v1\nactions:\n  '{name}': {{decision: allow}}\n")
        assert (error.key, error.line) == (f"actions.{name}", 3)
        assert "dotted identifiers" in error.message

    @pytest.mark.parametrize(
        ("conditions", "key", "message"),
        [
            ("amount_lte: true\n", "amount_lte", "integers only"),
            ("amount_lte: '5'\n", "amount_lte", "integers only"),
            ("amount_eq: [1, 2]\n", "amount_eq", "a string, an integer, a boolean or null"),
            ("amount_eq: {a: 1}\n", "amount_eq", "a string, an integer, a boolean or null"),
            ("amount_in: usd\n", "amount_in", "list of scalars"),
            ("amount_in: []\n", "amount_in", "non-empty"),
            ("amount_in: [[1]]\n", "amount_in", "member [0]"),
            ("amount_in: [a, b, a]\n", "amount_in", "listed twice"),
            ("amount: 5\n", "amount", "is not a condition"),
            ("amount_like: 5\n", "amount_like", "is not a condition"),
            ("_eq: 5\n", "_eq", "is not a condition"),
            ("user_eq: alice\n", "user_eq", "not who is asking"),
            ("agent_in: [bot]\n", "agent_in", "not who is asking"),
        ],
    )
    def test_condition_refusals(self, conditions: str, key: str, message: str) -> None:
        """A condition of the wrong shape names its key under ``when`` and its line."""
        error = refused(when(conditions))
        assert (error.key, error.line) == (f"{WHEN}.{key}", 7)
        assert message in error.message

    @pytest.mark.parametrize(
        ("body", "key", "message"),
        [
            ("effect: 'refund:{payment_id'\n", "effect", "stray or malformed brace"),
            ("effect: 'refund:{payment_id:>3}'\n", "effect", "stray or malformed brace"),
            ("effect: 'refund:{0}'\n", "effect", "stray or malformed brace"),
            ("effect: ''\n", "effect", "non-empty string"),
            ("effect: 5\n", "effect", "non-empty string"),
            ("resource: 'ns:{a.b}'\n", "resource", "stray or malformed brace"),
            ("resource: 'ns:{resource}'\n", "resource", "cannot be built from itself"),
        ],
    )
    def test_bad_templates_are_refused(self, body: str, key: str, message: str) -> None:
        """Template syntax errors become PolicyErrors naming the key and line."""
        error = refused(entry("decision: allow\n" + body))
        assert (error.key, error.line) == (f"actions.a.b.{key}", 5)
        assert message in error.message

    @pytest.mark.parametrize("value", ["0", "-1", "true", "'3'", "[3]"])
    def test_max_attempts_must_be_a_positive_integer(self, value: str) -> None:
        """0, negatives, booleans, strings and lists are refused."""
        error = refused(entry(f"decision: allow\nmax_attempts: {value}\n"))
        assert (error.key, error.line) == ("actions.a.b.max_attempts", 5)
        assert "integer >= 1" in error.message

    def test_the_message_leads_with_source_line_and_key(self) -> None:
        """The one-line message reads ``source:line: key: problem``."""
        error = refused(entry("decision: maybe\n"), source="conf/ctrlrun.yaml")
        assert error.path == "conf/ctrlrun.yaml"
        assert error.message.startswith("conf/ctrlrun.yaml:4: actions.a.b.decision: must be")
        assert refused(entry("decision: maybe\n")).message.startswith("line 4: actions.a.b.")


class TestSyntax:
    @pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "---\n# nothing\n"])
    def test_an_empty_policy_is_refused(self, text: str) -> None:
        """There is no permissive empty policy."""
        error = refused(text)
        assert error.line == 1
        assert "empty" in error.message

    def test_a_syntax_error_names_its_line(self) -> None:
        """Broken YAML is a PolicyError with the line of the problem."""
        error = refused("schema: ctrlrun.policy/v1\nactions:\n  a.b: {decision: allow\n")
        assert error.line == 4
        assert error.key is None
        assert error.message.startswith("line 4: YAML syntax error")

    def test_a_tab_indent_is_a_syntax_error(self) -> None:
        """Tabs are refused by YAML itself, with a line."""
        error = refused("schema: ctrlrun.policy/v1\nactions:\n\ta.b: {decision: allow}\n")
        assert error.line == 3

    def test_more_than_one_document_is_refused(self) -> None:
        """A second document would be silently ignored elsewhere; here it is refused."""
        error = refused("schema: ctrlrun.policy/v1\nactions: {}\n---\nactions: {}\n")
        assert error.line == 3
        assert "single document" in error.message

    @pytest.mark.parametrize("text", ["[a.b]\n", "allow\n", "5\n", "true\n"])
    def test_the_top_level_must_be_a_mapping(self, text: str) -> None:
        """A list or a scalar is not a policy."""
        error = refused(text)
        assert error.line == 1
        assert "must be a mapping" in error.message

    def test_a_forbidden_character_names_its_line(self) -> None:
        """A control character is refused by the reader, with its line."""
        error = refused("schema: ctrlrun.policy/v1\nactions:\n  a.b: \x00\n")
        assert error.line == 3
        assert "U+0000" in error.message

    def test_deep_nesting_is_a_policy_error(self) -> None:
        """Nesting deep enough to exhaust the parser's recursion is refused cleanly."""
        error = refused("a: " + "[" * 3000 + "]" * 3000 + "\n")
        assert "nested too deeply" in error.message

    def test_text_must_be_str(self) -> None:
        """Bytes are refused with a PolicyError, not a TypeError."""
        with pytest.raises(PolicyError, match="must be str"):
            load_policy_text(b"schema: x")  # type: ignore[arg-type]


class TestFiles:
    def test_a_missing_file(self, tmp_path: Path) -> None:
        """A missing file names its path."""
        path = tmp_path / "ctrlrun.yaml"
        with pytest.raises(PolicyError) as caught:
            load_policy_file(path)
        assert caught.value.path == str(path)
        assert "no policy file" in caught.value.message

    def test_a_directory_is_unreadable(self, tmp_path: Path) -> None:
        """A directory where the file should be cannot be read."""
        with pytest.raises(PolicyError, match="cannot read") as caught:
            load_policy_file(tmp_path)
        assert caught.value.path == str(tmp_path)

    def test_permission_denied(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """An OS refusal to read is a PolicyError naming the reason (simulated: tests may be
        root, who can read anything)."""

        def deny(self: Path) -> bytes:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(Path, "read_bytes", deny)
        with pytest.raises(PolicyError, match="Permission denied") as caught:
            load_policy_file(tmp_path / "ctrlrun.yaml")
        assert caught.value.path == str(tmp_path / "ctrlrun.yaml")

    def test_a_bad_path_value(self) -> None:
        """A path with a NUL byte or of the wrong type is a PolicyError."""
        with pytest.raises(PolicyError, match="cannot read"):
            load_policy_file("ctrl\x00run.yaml")
        with pytest.raises(PolicyError, match=r"str or os\.PathLike"):
            load_policy_file(5)  # type: ignore[arg-type]
        with pytest.raises(PolicyError, match="got bytes"):
            load_policy_file(b"ctrlrun.yaml")  # type: ignore[arg-type]

    def test_a_file_that_is_not_utf8(self, tmp_path: Path) -> None:
        """Bytes that are not UTF-8 are refused with the line they sit on."""
        path = tmp_path / "ctrlrun.yaml"
        path.write_bytes(b"schema: ctrlrun.policy/v1\nactions:\n  a.b: \xff\n")
        with pytest.raises(PolicyError) as caught:
            load_policy_file(path)
        assert (caught.value.path, caught.value.line) == (str(path), 3)
        assert "not UTF-8: byte 0xff" in caught.value.message

    def test_an_empty_file(self, tmp_path: Path) -> None:
        """An empty file is refused, naming the file."""
        path = tmp_path / "ctrlrun.yaml"
        path.write_bytes(b"")
        with pytest.raises(PolicyError, match="empty") as caught:
            load_policy_file(path)
        assert caught.value.path == str(path)

    def test_content_errors_carry_the_file_path(self, tmp_path: Path) -> None:
        """A schema error inside a file names the file, the key and the line."""
        path = tmp_path / "ctrlrun.yaml"
        path.write_text(entry("decision: allow\nmax_attempts: 0\n"), encoding="utf-8")
        with pytest.raises(PolicyError) as caught:
            load_policy_file(path)
        error = caught.value
        assert (error.path, error.key, error.line) == (str(path), "actions.a.b.max_attempts", 5)
        assert error.message.startswith(f"{path}:5: actions.a.b.max_attempts: ")


class TestFromDocument:
    """``Policy.from_document`` validates plain data built in Python, without YAML."""

    @pytest.mark.parametrize(
        ("data", "key"),
        [
            ([], None),
            ({1: "x", "schema": POLICY_SCHEMA, "actions": {}}, None),
            ({"schema": POLICY_SCHEMA, "actions": {"a": {"decision": "allow", 2: 3}}}, "actions.a"),
            (
                {"schema": POLICY_SCHEMA, "actions": {"a": {"rules": ({"decision": 1.5},)}}},
                "actions.a.rules[0].decision",
            ),
            (
                {"schema": POLICY_SCHEMA, "actions": {"a": {"decision": ["allow"]}}},
                "actions.a.decision",
            ),
            (
                {
                    "schema": POLICY_SCHEMA,
                    "actions": {"a": {"rules": [{"decision": "allow", "when": {"x_lte": 1.5}}]}},
                },
                "actions.a.rules[0].when.x_lte",
            ),
        ],
    )
    def test_only_policy_error_escapes(self, data: Any, key: str | None) -> None:
        """Wrong types anywhere raise PolicyError naming the key; lines are absent."""
        with pytest.raises(PolicyError) as caught:
            Policy.from_document(data)
        assert caught.value.key == key
        assert caught.value.line is None

    def test_lines_fall_back_to_the_nearest_recorded_ancestor(self) -> None:
        """An error at a path with no recorded line reports its parent's line."""
        data = {"schema": POLICY_SCHEMA, "actions": {"a": {"decision": "maybe"}}}
        with pytest.raises(PolicyError) as caught:
            Policy.from_document(data, lines={(): 1, ("actions", "a"): 7}, source="x.yaml")
        assert (caught.value.key, caught.value.line, caught.value.path) == (
            "actions.a.decision",
            7,
            "x.yaml",
        )
        assert caught.value.message.startswith("x.yaml:7: actions.a.decision: ")
