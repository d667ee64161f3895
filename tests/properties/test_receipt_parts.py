"""A ``Control``'s receipt draft is prepared in parts around ``seq`` and ``prev_hash``
(``ReceiptDraft``, the receipt's one byte path); for any action, verdict and outcome its linked
text must be exactly the validating encoder's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from ctrlrun.canonical import canonical_text, sha256_hex
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.receipt import ChainHead, ReceiptDraft, ReceiptResult, chain_receipt
from ctrlrun.runtime.receipts import Verdict, receipt_draft

settings.register_profile("ctrlrun", derandomize=True, max_examples=200, deadline=None)
settings.load_profile("ctrlrun")

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
# names a person can read (kernel/text.py): no control, format or separator characters, no
# surrounding whitespace
lines = st.text(
    st.characters(exclude_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), min_size=1, max_size=8
).filter(lambda t: bool(t.strip()) and t == t.strip())
arguments = st.dictionaries(texts, st.none() | st.booleans() | st.integers() | texts, max_size=4)
instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(
    arguments,
    lines,
    st.none() | lines,
    st.none() | lines,
    st.tuples(texts, texts, texts, st.lists(lines, max_size=3)),
    st.sampled_from(list(ReceiptResult)),
    st.tuples(st.none() | texts, st.none() | st.integers(1, 2**40), st.none() | texts),
    st.tuples(st.none() | texts, st.none() | texts),
    st.tuples(instants, instants),
)
def test_a_composed_receipt_links_to_the_encoder_s_bytes(
    args, agent, user, resource, verdict_parts, result, call, approval, times
):
    action = Action("p.q", args, Principal(agent, user), resource=resource)
    decision, reason, policy_hash, controls = verdict_parts
    verdict = Verdict(decision, reason, policy_hash, tuple(sorted(controls)))
    effect_key, attempt, error = call
    draft = receipt_draft(
        action,
        verdict,
        result,
        started_at=times[0],
        finished_at=times[1] + timedelta(microseconds=1),
        effect_key=effect_key,
        attempt=attempt,
        approval_id=approval[0],
        approver=approval[1],
        error=error,
    )
    assert draft.linked_text(8, "sha256:x") is not None  # prepared in parts
    expected = canonical_text({**draft, "seq": 8, "prev_hash": "sha256:x"})
    assert chain_receipt(draft, ChainHead(7, "sha256:x")) == (
        8,
        expected,
        sha256_hex(expected.encode()),
    )
    generic = ReceiptDraft(
        dict(draft),
        {"arguments": action.arguments_text, "principal": action.principal.text},
    )
    assert generic.linked_text(8, "sha256:x") == expected


def test_a_value_of_another_type_is_encoded_by_the_validating_encoder():
    action = Action("p.q", {"n": 1}, Principal("a"))
    verdict = Verdict("allow", "r", "sha256:p")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    draft = receipt_draft(
        action, verdict, ReceiptResult.COMMITTED, started_at=now, finished_at=now, attempt=True
    )
    expected = canonical_text({**draft, "seq": 1, "prev_hash": "h"})
    assert chain_receipt(draft, ChainHead(0, "h"))[1] == expected


@given(arguments, lines, st.none() | lines, st.none() | lines, lines)
def test_the_proposed_event_s_composed_data_is_the_event_encoder_s(
    args, agent, user, resource, env
):
    import json

    from ctrlrun.kernel.evidence_text import event_data_json
    from ctrlrun.runtime.receipts import proposed

    action = Action("p.q", args, Principal(agent, user), resource=resource, environment=env)
    data = proposed(action).data
    expected = json.dumps(dict(data), sort_keys=True, separators=(",", ":"), default=repr)
    assert event_data_json(data) == expected
    assert json.loads(expected) == {"action": action.to_dict(), "action_hash": action.action_hash}


@given(texts, texts, texts, st.lists(lines, max_size=3))
def test_the_evaluated_event_s_data_is_encoded_as_it_was(decision, reason, policy_hash, cited):
    import json

    from ctrlrun.kernel.evidence_text import event_data_json
    from ctrlrun.runtime.receipts import evaluated

    verdict = Verdict(decision, reason, policy_hash, tuple(sorted(cited)))
    action = Action("p.q", {}, Principal("a"))
    for _ in range(2):  # built once, then shared
        data = evaluated(action, verdict, None).data
        plain = {"decision": decision, "reason": reason, "policy_hash": policy_hash}
        if cited:
            plain["controls"] = sorted(cited)
        assert dict(data) == plain
        expected = json.dumps(plain, sort_keys=True, separators=(",", ":"), default=repr)
        assert event_data_json(data) == expected


@given(texts, texts, texts, st.lists(lines, max_size=3))
def test_a_kept_verdict_is_the_verdict_of_its_values(decision, reason, policy_hash, cited):
    from ctrlrun.runtime.receipts import decided

    controls = tuple(sorted(cited))
    kept = decided(decision, reason, policy_hash, controls)
    assert kept == Verdict(decision, reason, policy_hash, controls)
    assert decided(decision, reason, policy_hash, controls) is kept  # built once, then shared
