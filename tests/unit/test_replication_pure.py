"""The pure parts of replication and held receipts: the durability options and their URL
parameters, the replication reading's verdicts, the split-brain timeline memory, and the
judgement of one held receipt copy."""

from __future__ import annotations

import pickle

import pytest

from ctrlrun.canonical import canonical_text, sha256_hex
from ctrlrun.errors import InvalidArgument, ReplicationReason, StaleTimeline
from ctrlrun.kernel.held import HeldStatus, StoredIndex, check_held
from ctrlrun.kernel.receipt import StoredReceipt
from ctrlrun.store.postgres.durability import Durability, Replication
from ctrlrun.store.url import parse_store_url


def seen(**changes: object) -> Replication:
    fields: dict[str, object] = {
        "synchronous_commit": "on",
        "synchronous_standby_names": "*",
        "standbys": 1,
        "sync_standbys": 1,
        "system_identifier": "7",
        "timeline": 2,
    }
    fields.update(changes)
    return Replication(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("bound", [0, -1, 86_400, float("nan"), "5", True])
def test_a_commit_timeout_outside_its_range_is_refused(bound):
    with pytest.raises(InvalidArgument, match="commit_timeout"):
        Durability(commit_timeout=bound)  # type: ignore[arg-type]


def test_the_url_parameters_are_peeled_off_and_parsed():
    parsed = parse_store_url(
        "postgresql://h/db?ctrlrun_commit_timeout=2.5&sslmode=require&ctrlrun_require_sync=TRUE"
    )
    assert (parsed.target, parsed.commit_timeout, parsed.require_sync) == (
        "postgresql://h/db?sslmode=require",
        2.5,
        True,
    )
    plain = parse_store_url("postgresql://h/db")
    assert (plain.commit_timeout, plain.require_sync) == (None, False)
    with pytest.raises(InvalidArgument, match="given 2 times"):
        parse_store_url("postgresql://h/db?ctrlrun_require_sync=1&ctrlrun_require_sync=0")


@pytest.mark.parametrize(
    ("changes", "waits"),
    [
        ({}, True),
        ({"synchronous_commit": "remote_apply"}, True),
        ({"synchronous_commit": "local"}, False),
        ({"synchronous_commit": "off"}, False),
        ({"synchronous_standby_names": " "}, False),
    ],
)
def test_what_a_commit_waits_for(changes, waits):
    reading = seen(**changes)
    assert reading.waits_for_standby is waits
    assert reading.describe().startswith("synchronous" if waits else "NOT synchronous")
    assert reading.to_dict()["waits_for_standby"] is waits


def test_required_sync_names_each_shortfall():
    from ctrlrun.errors import ReplicationRefused
    from ctrlrun.store.postgres.replication import check_required

    required = Durability(require_sync=True)
    check_required(seen(), required, "db")
    check_required(seen(synchronous_commit="off"), Durability(), "db")  # not required
    check_required(seen(timeline=None), required, "db")  # a standby: refused elsewhere
    check_required(seen(sync_standbys=None), required, "db")  # cannot see: settings suffice
    for changes, reason in [
        ({"synchronous_commit": "local"}, ReplicationReason.NOT_SYNCHRONOUS),
        ({"sync_standbys": 0}, ReplicationReason.NO_STANDBY),
        ({"standbys": 0, "sync_standbys": None}, ReplicationReason.NO_STANDBY),
    ]:
        with pytest.raises(ReplicationRefused) as caught:
            check_required(seen(**changes), required, "db")
        assert caught.value.reason is reason


def test_an_older_timeline_of_a_cluster_written_newer_is_refused():
    from ctrlrun.store.postgres.replication import Timelines

    timelines = Timelines()
    timelines.admit(seen(timeline=2), "db")
    timelines.admit(seen(timeline=2, system_identifier="8"), "db")  # another cluster
    timelines.admit(seen(timeline=None), "db")  # a standby: nothing to compare
    timelines.admit(seen(timeline=3), "db")
    with pytest.raises(StaleTimeline) as caught:
        timelines.admit(seen(timeline=2), "db")
    refused = caught.value
    assert (refused.reason, refused.timeline, refused.highest) == (
        ReplicationReason.STALE_TIMELINE,
        2,
        3,
    )
    again = pickle.loads(pickle.dumps(refused))
    assert (type(again), again.timeline, again.highest) == (StaleTimeline, 2, 3)


def copy_of(document: dict[str, object]) -> dict[str, object]:
    return {**document, "hash": sha256_hex(canonical_text(document).encode("utf-8"))}


def stored(document: dict[str, object]) -> StoredReceipt:
    text = canonical_text(document)
    return StoredReceipt(
        document["seq"],  # type: ignore[arg-type]
        str(document["receipt_id"]),
        text,
        sha256_hex(text.encode("utf-8")),
    )


DOC = {"receipt_id": "rcp_a", "seq": 1, "result": "committed"}


@pytest.mark.parametrize(
    ("store", "held", "status", "found"),
    [
        ([DOC], copy_of(DOC), HeldStatus.PRESENT, None),
        ([], copy_of(DOC), HeldStatus.MISSING, None),
        ([{**DOC, "receipt_id": "rcp_b"}], copy_of(DOC), HeldStatus.REPLACED, "rcp_b"),
        ([{**DOC, "result": "failed"}], copy_of(DOC), HeldStatus.REPLACED, "rcp_a"),
        ([DOC], {**copy_of(DOC), "result": "failed"}, HeldStatus.NOT_A_RECEIPT, None),
        ([DOC], {**DOC}, HeldStatus.NOT_A_RECEIPT, None),
        ([DOC], {"seq": 1, "hash": "x"}, HeldStatus.NOT_A_RECEIPT, None),
        ([DOC], {**DOC, "hash": "x", "n": 1.5}, HeldStatus.NOT_A_RECEIPT, None),
        ([DOC], ["not", "an", "object"], HeldStatus.NOT_A_RECEIPT, None),
    ],
)
def test_one_held_copy_is_judged(store, held, status, found):
    check = check_held(held, StoredIndex(stored(d) for d in store))
    assert (check.status, check.found) == (status, found)
    assert check.ok is (status is HeldStatus.PRESENT)
    assert check.to_dict()["status"] == str(status)
