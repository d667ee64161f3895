"""Properties of the pure kernel: canonical form, planner totality, chain locality."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from ctrlrun.canonical import canonical_bytes, canonical_text
from ctrlrun.errors import AmbiguousEffect, DuplicateEffect, InvalidArgument, Refused
from ctrlrun.kernel.effect import EffectRecord, EffectState, PlanKind, plan_reservation
from ctrlrun.kernel.receipt import (
    GENESIS_HEAD,
    ChainHead,
    StoredReceipt,
    chain_receipt,
    verify_chain,
)

settings.register_profile("ctrlrun", derandomize=True, max_examples=200, deadline=None)
settings.load_profile("ctrlrun")

scalars = st.none() | st.booleans() | st.integers() | st.text()
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def as_tuples(value):
    if isinstance(value, list):
        return tuple(as_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: as_tuples(v) for k, v in value.items()}
    return value


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_canonical_form_ignores_key_order_and_tuple_spelling(value):
    reordered = dict(reversed(list(value.items())))
    assert canonical_bytes(value) == canonical_bytes(reordered) == canonical_bytes(as_tuples(value))


@given(json_values)
def test_canonical_form_round_trips_through_json(value):
    text = canonical_text(value)
    assert canonical_text(json.loads(text)) == text


@given(json_values, st.floats(allow_nan=True, allow_infinity=True), st.data())
def test_a_float_anywhere_is_refused(value, number, data):
    path = data.draw(st.lists(st.text(max_size=4), max_size=3))
    nested: object = number
    for key in reversed(path):
        nested = {key: nested}
    container = [value, nested]
    try:
        canonical_bytes(container)
    except InvalidArgument as exc:
        assert "float" in str(exc)
    else:
        raise AssertionError("a float was accepted")


NOW = datetime(2026, 1, 1, tzinfo=UTC)
states = st.sampled_from(list(EffectState))
records = st.none() | st.builds(
    lambda state, attempt, lease_s, same: EffectRecord(
        "k",
        state,
        "act_new" if same else "act_old",
        attempt,
        NOW,
        NOW,
        None if lease_s is None else NOW + timedelta(seconds=lease_s),
    ),
    states,
    st.integers(1, 50),
    st.none() | st.integers(-600, 600),
    st.booleans(),
)


@given(records, st.none() | st.integers(1, 60))
def test_the_planner_is_total_and_decides_exactly_one_thing(record, ceiling):
    plan = plan_reservation(
        record,
        effect_key="k",
        action_id="act_new",
        lease=timedelta(minutes=5),
        now=NOW,
        max_attempts=ceiling,
    )
    assert (plan.reservation is None) != (plan.refusal is None)
    if plan.reservation is not None:
        assert record is None or record.state is EffectState.FAILED
        assert plan.reservation.attempt == (1 if record is None else record.attempt + 1)
        assert plan.kind in (PlanKind.INSERT, PlanKind.RENEW)
    else:
        assert isinstance(plan.refusal, Refused)
        assert plan.ambiguate == (
            record is not None
            and record.state in (EffectState.RESERVED, EffectState.EXECUTING)
            and not record.lease_is_live(NOW)
        )
        if record is not None and record.state is EffectState.AMBIGUOUS:
            assert isinstance(plan.refusal, AmbiguousEffect)
        if record is not None and record.state is EffectState.COMMITTED:
            assert isinstance(plan.refusal, DuplicateEffect)


def chain(n: int) -> tuple[list[StoredReceipt], ChainHead]:
    rows, head = [], GENESIS_HEAD
    for index in range(n):
        seq, text, digest = chain_receipt({"receipt_id": f"r{index}", "v": index, "s": "x"}, head)
        rows.append(StoredReceipt(seq, f"r{index}", text, digest))
        head = ChainHead(seq, digest)
    return rows, head


@given(st.integers(2, 8), st.data())
def test_one_edit_is_reported_once_at_its_seq(n, data):
    rows, head = chain(n)
    index = data.draw(st.integers(0, n - 1))
    field = data.draw(st.sampled_from(["v", "s", "receipt_id", "prev_hash", "seq", "extra"]))
    document = json.loads(rows[index].text)
    document[field] = data.draw(
        st.one_of(st.integers(), st.text(min_size=1)).filter(lambda v: v != document.get(field))
    )
    rows[index] = replace(rows[index], text=canonical_text(document))
    report = verify_chain(rows, head)
    assert [(b.kind.value, b.seq) for b in report.breaks] == [("content_altered", index + 1)]
