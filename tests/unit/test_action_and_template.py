"""Actions, principals and effect-key templates."""

from __future__ import annotations

import pytest

from ctrlrun.errors import DenyReason, EffectKeyError, InvalidArgument
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.template import Template

ALICE = Principal("support-bot", "alice")


class TestPrincipal:
    @pytest.mark.parametrize(
        ("agent", "user"), [("", None), ("a", ""), ("  ", None), ("a\nb", None)]
    )
    def test_empty_or_multiline_names_are_refused(self, agent, user):
        with pytest.raises(InvalidArgument):
            Principal(agent, user)


class TestAction:
    def test_hash_covers_content_but_not_the_id(self):
        one = Action("stripe.refund", {"amount": 500}, ALICE)
        two = Action("stripe.refund", {"amount": 500}, ALICE)
        assert one.action_id != two.action_id
        assert one.action_hash == two.action_hash
        assert one != two

    @pytest.mark.parametrize(
        "change",
        [
            {"name": "stripe.refund2"},
            {"arguments": {"amount": 501}},
            {"principal": Principal("support-bot", "bob")},
            {"principal": Principal("other-bot", "alice")},
            {"resource": "payment:1"},
            {"environment": "staging"},
        ],
    )
    def test_every_field_of_the_content_changes_the_hash(self, change):
        base = {"name": "stripe.refund", "arguments": {"amount": 500}, "principal": ALICE}
        original = Action(**base)
        changed = Action(**{**base, **change})
        assert changed.action_hash != original.action_hash

    def test_arguments_are_copied_so_the_caller_cannot_mutate_them(self):
        arguments = {"items": [1, 2]}
        action = Action("a.b", arguments, ALICE)
        arguments["items"].append(3)
        action.arguments["items"].append(4)
        assert action.arguments == {"items": [1, 2]}

    def test_any_mapping_of_arguments_hashes_as_the_equal_dict(self):
        from types import MappingProxyType

        flat = {"b": 2, "a": "x"}
        as_proxy = Action("a.b", MappingProxyType(flat), ALICE)  # not a dict: the general path
        as_dict = Action("a.b", dict(flat), ALICE)
        assert as_proxy.action_hash == as_dict.action_hash
        assert as_proxy.arguments == as_dict.arguments == flat

    def test_round_trip_keeps_id_and_hash(self):
        action = Action("a.b", {"x": [1, {"y": None}]}, ALICE, resource="r:1")
        again = Action.from_dict(action.to_dict())
        assert (again.action_id, again.action_hash) == (action.action_id, action.action_hash)

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"name": ""},
            {"name": "a..b"},
            {"name": "1abc"},
            {"arguments": {"amount": 1.5}},
            {"arguments": []},
            {"principal": "alice"},
            {"resource": ""},
            {"environment": ""},
            {"action_id": "has space"},
        ],
    )
    def test_bad_input_is_refused(self, kwargs):
        base = {"name": "a.b", "arguments": {}, "principal": ALICE}
        with pytest.raises(InvalidArgument):
            Action(**{**base, **kwargs})


class TestTemplate:
    def test_renders_arguments_and_the_resource(self):
        template = Template.parse("refund:{payment_id:int}@{resource}")
        assert template.placeholders == ("payment_id", "resource")
        assert template.render({"payment_id": 7}, "acct:1") == "refund:7@acct:1"
        assert template.shape == "refund:{payment_id}@{resource}"

    @pytest.mark.parametrize("source", ["", "a{", "a}", "{1x}", "{a.b}", "{{a}}", "{a:>3}", "{}"])
    def test_malformed_templates_are_refused_at_parse(self, source):
        with pytest.raises(InvalidArgument):
            Template.parse(source)

    @pytest.mark.parametrize("value", [None, "", True, False, [1], {"a": 1}])
    def test_unusable_values_refuse_the_action(self, value):
        with pytest.raises(EffectKeyError) as caught:
            Template.parse("k:{v}").render({"v": value})
        assert caught.value.reason is DenyReason.EFFECT_KEY_ERROR
        assert caught.value.placeholder == "v"

    def test_a_missing_argument_refuses_the_action(self):
        with pytest.raises(EffectKeyError, match="no argument"):
            Template.parse("k:{v}").render({})

    def test_resource_placeholder_needs_a_resource(self):
        with pytest.raises(EffectKeyError):
            Template.parse("k:{resource}").render({}, None)

    def test_resource_placeholder_is_ambiguous_beside_a_resource_argument(self):
        with pytest.raises(EffectKeyError, match="ambiguous"):
            Template.parse("k:{resource}").render({"resource": "x"}, "y")
