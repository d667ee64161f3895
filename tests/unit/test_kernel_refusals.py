"""The pure kernel's validators refuse what Python callers (not only the YAML loader) can hand
them, each with ``InvalidArgument`` naming the problem; and the rules round-trip."""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest

from ctrlrun.errors import ApprovalMismatch, InvalidArgument, MismatchReason, MissingDependency
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.approval import Grant, check_reason, plan_quorum
from ctrlrun.kernel.approval_rules import (
    DEFAULT_RULES,
    ApprovalRules,
    parse_duration,
    render_duration,
)
from ctrlrun.kernel.notify import BodyFormat, NotifyKind, NotifyTarget, parse_targets
from ctrlrun.kernel.policy_model import ActionPolicy
from ctrlrun.kernel.signing import check_public_key, generate, public_key_text

TARGET = {"name": "ops", "url": "https://hooks.example/ops", "secret_env": "OPS_SECRET"}


def test_an_environment_is_one_line():
    with pytest.raises(InvalidArgument, match="environment must be one line"):
        Action("a.b", {}, Principal("bot"), environment="prod\nstaging")


class TestApprovals:
    def test_a_grant_by_the_requester_is_refused_as_requester(self):
        grants = [Grant("alice", None), Grant("bot", None)]
        refused = plan_quorum("apr_1", grants, required=2, excluded=("bot",))
        assert isinstance(refused, ApprovalMismatch)
        assert refused.reason is MismatchReason.REQUESTER and "bot" in str(refused)

    def test_a_reason_has_a_length_limit(self):
        assert check_reason("x" * 2000) == "x" * 2000
        with pytest.raises(InvalidArgument, match="at most 2000 characters"):
            check_reason("x" * 2001)


class TestApprovalRules:
    def test_a_duration_is_a_number_and_a_unit_or_already_a_timedelta(self):
        assert parse_duration(timedelta(minutes=5)) == timedelta(minutes=5)
        for bad in ("15", "1w", "0m", 15, None):
            with pytest.raises(InvalidArgument, match="a duration is a whole number"):
                parse_duration(bad)

    @pytest.mark.parametrize(
        ("value", "text"),
        [(timedelta(days=2), "2d"), (timedelta(hours=3), "3h"), (timedelta(minutes=90), "90m")],
    )
    def test_render_is_the_shortest_text_and_parses_back(self, value, text):
        assert render_duration(value) == text and parse_duration(text) == value
        assert render_duration(timedelta(seconds=61)) == "61s"

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"ttl": timedelta(days=31)}, "whole seconds from 1s to 30d"),
            ({"ttl": timedelta(seconds=1, microseconds=5)}, "whole seconds from 1s to 30d"),
            ({"ttl": "15m"}, "whole seconds from 1s to 30d"),
            ({"count": True}, "count must be an integer"),
            ({"count": 17}, "count must be between 1 and 16"),
            ({"distinct_from_requester": "yes"}, "must be true or false"),
        ],
    )
    def test_rules_refuse_what_the_loader_would(self, fields, message):
        with pytest.raises(InvalidArgument, match=message):
            ApprovalRules(**fields)

    def test_rules_parse_over_a_base_and_round_trip(self):
        rules = ApprovalRules.parse({"ttl": "1h", "count": 2, "distinct_from_requester": True})
        assert rules.to_document() == {"ttl": "1h", "count": 2, "distinct_from_requester": True}
        assert ApprovalRules.parse(rules.to_document()) == rules
        assert ApprovalRules.parse({"count": 3}, rules).ttl == timedelta(hours=1)
        assert DEFAULT_RULES.to_document() == {}

    def test_an_action_policy_takes_only_rules(self):
        with pytest.raises(InvalidArgument, match="approval must be ApprovalRules"):
            ActionPolicy("a.b", decision="approve", approval={"count": 2})  # type: ignore[arg-type]


class TestNotifyTargets:
    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"name": "has space"}, "notify target name"),
            ({"url": "ftp://hooks.example/x"}, "notify url is http"),
            ({"url": "https:///no-host"}, "notify url is http"),
            ({"secret_env": "lower"}, "secret_env names an environment variable"),
        ],
    )
    def test_a_target_refuses_bad_fields(self, fields, message):
        with pytest.raises(InvalidArgument, match=message):
            NotifyTarget(**{**TARGET, **fields})

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ({"name": "ops"}, "notify is a list"),
            ([{"name": "ops", "url": "https://h/x"}], "needs name, url and secret_env"),
            ([{**TARGET, "retries": 3}], "unknown notify key"),
            ([{**TARGET, "format": "teams"}], "format is standard or slack"),
            ([TARGET, TARGET], "names must be unique"),
            ([{**TARGET, "events": ["approved"]}], "events is a list of approval, ambiguous"),
            ([{**TARGET, "events": "ambiguous"}], "events is a list of"),
            ([{**TARGET, "events": []}], "at least one event"),
        ],
    )
    def test_the_policy_list_refuses_bad_entries(self, value, message):
        with pytest.raises(InvalidArgument, match=message):
            parse_targets(value)

    def test_a_good_list_parses_with_its_format(self):
        (target,) = parse_targets([{**TARGET, "format": "slack"}])
        assert target.format is BodyFormat.SLACK and target.to_dict()["format"] == "slack"
        assert target.events == (NotifyKind.APPROVAL,)  # the default: approvals only
        (both,) = parse_targets([{**TARGET, "events": ["ambiguous", "approval", "ambiguous"]}])
        assert both.events == (NotifyKind.AMBIGUOUS, NotifyKind.APPROVAL)


class TestSigningKeys:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("rsa:AAAA", "ed25519:<base64 of 32 bytes>"),
            ("ed25519:AAAA", "32 bytes"),
            ("ed25519:not base64!", "not valid base64"),
        ],
    )
    def test_a_public_key_is_refused_unless_it_is_32_bytes_of_base64(self, text, message):
        with pytest.raises(InvalidArgument, match=message):
            check_public_key(text)

    def test_a_private_key_must_be_an_unencrypted_ed25519_pem(self):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        with pytest.raises(InvalidArgument, match="not an unencrypted PEM private key"):
            public_key_text(b"-----BEGIN PRIVATE KEY-----\nnot a key\n")
        other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        with pytest.raises(InvalidArgument, match="not an Ed25519 key"):
            public_key_text(other)
        pem, public = generate()
        assert public_key_text(pem) == public

    def test_without_cryptography_signing_names_the_extra(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "cryptography", None)  # as if it were not installed
        with pytest.raises(MissingDependency) as missing:
            generate()
        assert missing.value.extra == "signing"
