"""``kernel.identity``: the vendored UTS #39 data is Unicode's file as published, the skeleton
follows the standard on its own examples and data lines, and the identity rule folds what the
docs say it folds, and nothing more."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest

from ctrlrun.config import load_policy_text
from ctrlrun.errors import PolicyError
from ctrlrun.kernel.identity import (
    DATA_FILE,
    UNICODE_VERSION,
    identities,
    identity_key,
    is_default_ignorable,
    prototypes,
    same_identity,
    skeleton,
)

# sha256 of confusables.txt 17.0.0 as Unicode publishes it (Public/security/17.0.0/).
CONFUSABLES_SHA256 = "ec88ecebcf89f63f813d460842b0cf8322744b40a0b2c06f88a2cea48c0351ea"


def test_the_data_file_is_unicodes_unmodified():
    data = (resources.files("ctrlrun.kernel") / "data" / DATA_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == CONFUSABLES_SHA256
    assert f"# Version: {UNICODE_VERSION}".encode() in data[:400]
    assert len(prototypes()) == 6565  # every data line, none dropped by the loader


@pytest.mark.parametrize(
    ("source", "prototype"),
    [
        ("\u0430", "a"),  # 0430 ; 0061 ; MA # CYRILLIC SMALL LETTER A
        ("m", "rn"),  # 006D ; 0072 006E ; MA # LATIN SMALL LETTER M
        ("0", "O"),  # 0030 ; 004F ; MA # DIGIT ZERO
        ("1", "l"),  # 0031 ; 006C ; MA # DIGIT ONE
        ("I", "l"),  # 0049 ; 006C ; MA # LATIN CAPITAL LETTER I
        ("\u2013", "-"),  # 2013 ; 002D ; MA # EN DASH
        ("\u0412", "B"),  # 0412 ; 0042 ; MA # CYRILLIC CAPITAL LETTER VE
    ],
    ids=ascii,
)
def test_data_lines_load_as_published(source, prototype):
    assert prototypes()[source] == prototype


def test_the_standards_examples_are_confusable():
    # UTS #39 section 4: X and Y are confusable exactly when skeleton(X) == skeleton(Y)
    assert skeleton("paypal") == skeleton("p\u0430yp\u0430l")  # Cyrillic U+0430
    assert skeleton("rn") == skeleton("m")
    assert skeleton("l") == skeleton("1") == skeleton("I")
    assert skeleton("scope") == skeleton("\u0455\u0441\u043e\u0440\u0435")  # all Cyrillic
    assert skeleton("paypal") != skeleton("paypai")  # control: a different word


def test_the_skeleton_drops_default_ignorables_and_is_case_sensitive():
    assert skeleton("a\u200bb\u00adc\ufe0f") == "abc"
    assert is_default_ignorable("\u2060") and not is_default_ignorable(" ")
    assert skeleton("A") != skeleton("a")  # the standard's skeleton keeps case


@pytest.mark.parametrize(
    "spelling",
    [
        "support-bot",
        "  support-bot ",
        "Support-Bot",
        "SUPPORT-B0T",
        "\u0455u\u0440\u0440\u043ert-b\u043et",
        "\uff53\uff55\uff50\uff50\uff4f\uff52\uff54\uff0d\uff42\uff4f\uff54",
        "support\u200b-bot",
        "support\u2013bot",
    ],
    ids=ascii,
)
def test_every_spelling_is_one_identity(spelling):
    assert identity_key(spelling) == "support-bot"
    assert same_identity(spelling, "support-bot")


@pytest.mark.parametrize(
    ("a", "b"),
    [("alice", "alicia"), ("bob", "rob"), ("support-bot", "support-bots"), ("ops", "ops-2")],
)
def test_different_people_stay_different(a, b):
    assert not same_identity(a, b)


def test_identities_count_look_alikes_once():
    assert len(identities(["Bob", "\u0412\u043eb", " bob", "carol"])) == 2


def test_a_policy_naming_one_identity_twice_is_refused():
    key = "ed25519:" + "A" * 43 + "="
    document = f"""\
schema: ctrlrun.policy/v1
approvers:
  alice: {{key: "{key}"}}
  "\u0430lice": {{key: "{key}"}}
actions:
  k8s.namespace.delete: {{decision: approve}}
"""
    with pytest.raises(PolicyError) as refused:
        load_policy_text(document)
    assert "one identity" in str(refused.value)
