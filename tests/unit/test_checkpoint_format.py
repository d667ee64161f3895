"""The ``ctrlrun.checkpoint/v1`` statement exactly as docs/checkpoints.md writes it: made, read
back, and every way a file can fail to be trusted refused with its reason and line."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from ctrlrun.canonical import GENESIS_HASH
from ctrlrun.errors import CheckpointInvalid, CheckpointReason, InvalidArgument
from ctrlrun.kernel.checkpoint import (
    PartitionHead,
    checkpoint_body,
    key_id,
    read_statements,
    sign_statement,
    verified,
)
from ctrlrun.kernel.receipt import (
    GENESIS_HEAD,
    BreakKind,
    ChainHead,
    StoredReceipt,
    chain_receipt,
    verify_chain,
)
from ctrlrun.kernel.signing import generate, verify

PEM, KEY = generate()
OTHER_PEM, OTHER_KEY = generate()
T = datetime(2026, 12, 4, 17, 0, 0, 123456, tzinfo=UTC)
H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64


def test_the_body_is_the_documented_text_and_the_signature_covers_exactly_it():
    heads = (PartitionHead(0, 12, H1), PartitionHead(1, 7, H2))
    body = checkpoint_body("shop", heads, T)
    lines = f"0 12 {H1}\n1 7 {H2}\n"
    assert body == (
        f"ctrlrun.checkpoint/v1 shop\n{lines}"
        f"heads sha256:{hashlib.sha256(lines.encode()).hexdigest()}\n"
        "time 2026-12-04T17:00:00.123456Z\n"
    )
    statement = sign_statement(body, PEM)
    head, _, signature_line = statement.partition("\n\n")
    assert head + "\n" == body and signature_line.endswith("\n")
    name, signature = signature_line[len("\u2014 ") : -1].split(" ")
    assert signature_line.startswith("\u2014 ") and name == key_id(KEY) and len(name) == 16
    assert verify(KEY, body.encode(), signature)
    (read,) = read_statements(statement)
    assert read.checkpoint.heads == heads and read.checkpoint.time == T
    assert read.checkpoint.origin == "shop" and read.checkpoint.statement == statement


def file_of(*statements: str) -> str:
    return "".join(s + "\n" for s in statements)


def made(seq: int = 3, origin: str = "shop", pem: bytes = PEM) -> str:
    return sign_statement(checkpoint_body(origin, (PartitionHead(0, seq, H1),), T), pem)


def test_a_file_of_statements_is_read_in_order_with_their_lines():
    text = file_of(made(1), made(2), made(3))
    found = verified(read_statements(text), KEY)
    assert [c.heads[0].seq for c in found] == [1, 2, 3]
    assert [c.line for c in found] == [1, 8, 15]


def test_each_key_proves_its_own_signature_line_and_ignores_the_others():
    statement = made()
    body = read_statements(statement)[0].checkpoint.body
    other_line = sign_statement(body, OTHER_PEM).split("\n\n")[1]
    cosigned = statement + other_line
    assert verified(read_statements(cosigned), KEY)[0].body == body
    assert verified(read_statements(cosigned), OTHER_KEY)[0].body == body
    garbled = statement + other_line.replace(other_line.split(" ")[2][:8], "AAAAAAAA")
    assert verified(read_statements(garbled), KEY)[0].body == body  # not its key: ignored
    with pytest.raises(CheckpointInvalid) as refused:
        verified(read_statements(garbled), OTHER_KEY)
    assert refused.value.reason is CheckpointReason.BAD_SIGNATURE


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda s: s.replace("0 3 ", "0 4 "), CheckpointReason.MALFORMED),  # heads line stale
        (lambda s: s.replace("shop", "shoq"), CheckpointReason.BAD_SIGNATURE),
        (
            lambda s: s.replace("17:00:00.123456Z", "17:00:01.123456Z"),
            CheckpointReason.BAD_SIGNATURE,
        ),
        (lambda s: s.split("\n\n")[0] + "\n", CheckpointReason.MALFORMED),  # no signature line
        (lambda s: s.replace("\u2014 ", "- "), CheckpointReason.MALFORMED),
        (
            lambda s: s.replace("ctrlrun.checkpoint/v1", "ctrlrun.checkpoint/v2"),
            CheckpointReason.MALFORMED,
        ),
        (lambda s: s.replace("time ", "time: "), CheckpointReason.MALFORMED),
        (lambda s: s.replace("0 3 ", "1 3 "), CheckpointReason.MALFORMED),  # partition not 0
        (lambda s: s.replace("0 3 ", "0 03 "), CheckpointReason.MALFORMED),
    ],
)
def test_an_edited_statement_is_refused_with_its_reason_and_line(edit, reason):
    text = file_of(made(1), edit(made(3)))
    with pytest.raises(CheckpointInvalid) as refused:
        verified(read_statements(text), KEY)
    assert refused.value.reason is reason and refused.value.line == 8


def test_a_statement_by_another_key_is_unsigned():
    with pytest.raises(CheckpointInvalid) as refused:
        verified(read_statements(made(pem=OTHER_PEM)), KEY)
    assert refused.value.reason is CheckpointReason.UNSIGNED
    assert key_id(KEY) in refused.value.message


def test_mixed_origins_need_a_choice():
    text = file_of(made(1, "shop"), made(2, "lab"))
    with pytest.raises(CheckpointInvalid) as refused:
        verified(read_statements(text), KEY)
    assert refused.value.reason is CheckpointReason.MIXED_ORIGINS
    assert [c.origin for c in verified(read_statements(text), KEY, "lab")] == ["lab"]


@pytest.mark.parametrize("origin", ["", "a b", "x" * 201, "caf\u00e9", "new\nline"])
def test_an_origin_that_is_not_one_token_is_refused(origin):
    with pytest.raises(InvalidArgument):
        checkpoint_body(origin, (PartitionHead(0, 1, H1),), T)


def chain(count: int) -> list[StoredReceipt]:
    rows, head = [], GENESIS_HEAD
    for index in range(1, count + 1):
        seq, text, digest = chain_receipt({"receipt_id": f"r{index}", "n": index}, head)
        rows.append(StoredReceipt(seq, f"r{index}", text, digest))
        head = ChainHead(seq, digest)
    return rows


def kinds(report) -> list[tuple[str, int | None]]:
    return [(str(b.kind), b.seq) for b in report.breaks]


def test_the_walk_against_checkpoints():
    rows = chain(5)
    heads = [ChainHead(r.seq or 0, r.hash or "") for r in rows]
    at3, at5 = heads[2], heads[4]
    assert verify_chain(rows, at5, checkpoints=[at3, at5]).ok
    assert verify_chain(rows, at5, checkpoints=[]).ok  # no checkpoint yet: the chain alone
    assert kinds(verify_chain(rows[:3], at3, checkpoints=[at5])) == [
        ("tail_cut", 5),
        ("head_rewound", 3),
    ]
    forked = [ChainHead(4, H1)]
    assert kinds(verify_chain(rows, at5, checkpoints=forked)) == [("checkpoint_mismatch", 4)]
    # a checkpoint of the empty chain is genesis
    assert verify_chain([], GENESIS_HEAD, checkpoints=[ChainHead(0, GENESIS_HASH)]).ok


def test_the_walk_from_an_anchor():
    rows = chain(5)
    at2, at5 = ChainHead(2, rows[1].hash or ""), ChainHead(5, rows[4].hash or "")
    kept = rows[2:]
    assert verify_chain(kept, at5, anchor=at2).ok
    assert verify_chain(kept, at5, anchor=at2, checkpoints=[at2]).ok
    assert kinds(verify_chain(kept, at5, anchor=at2, checkpoints=[at5])) == [("anchor_unproven", 2)]
    assert kinds(verify_chain(kept, at5)) == [("missing", 1), ("link_broken", 3)]
    wrong = ChainHead(2, H1)
    assert kinds(verify_chain(kept, at5, anchor=wrong)) == [("link_broken", 3)]
    assert {BreakKind.TAIL_CUT, BreakKind.ANCHOR_UNPROVEN} <= set(BreakKind)


def test_the_edges_of_the_format_are_refused_by_name():
    from ctrlrun.kernel.checkpoint import parse_body, partition_heads

    with pytest.raises(InvalidArgument, match="every partition"):
        checkpoint_body("shop", (PartitionHead(1, 3, H1),), T)
    with pytest.raises(CheckpointInvalid, match="is not a checkpoint body"):
        parse_body("ctrlrun.checkpoint/v1 shop\n")
    body = checkpoint_body("shop", (PartitionHead(0, 12, H1),), T)
    impossible = body.replace(T.strftime("%Y-%m-%d"), "2026-02-30")
    with pytest.raises(CheckpointInvalid, match="impossible time"):
        parse_body(impossible)
    one = parse_body(body)
    assert one.digest == body.split("\n")[2].removeprefix("heads ")
    two = parse_body(checkpoint_body("shop", (PartitionHead(0, 3, H1), PartitionHead(1, 7, H2)), T))
    assert list(partition_heads([one, two], 1)) == [ChainHead(7, H2)]  # `one` names no partition 1


def test_a_signature_that_is_not_base64_is_a_forgery_not_a_crash():
    body = checkpoint_body("shop", (PartitionHead(0, 12, H1),), T)
    statement = sign_statement(body, PEM)
    garbled = statement.rsplit(" ", 1)[0] + " %%%not-base64%%%\n"
    with pytest.raises(CheckpointInvalid) as caught:
        verified(read_statements(garbled), KEY)
    assert caught.value.reason is CheckpointReason.BAD_SIGNATURE
