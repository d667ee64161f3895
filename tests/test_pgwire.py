"""Self-tests of the proxy's frame parser and SQL classifier (no server needed)."""

from __future__ import annotations

import struct

import pytest

from support.pgwire import (
    SSL_REQUEST,
    FrameParser,
    ProtocolError,
    cstrings,
    is_commit,
    message,
    split_statements,
    startup,
)


def _bind(params: list[bytes]) -> bytes:
    body = b"\0\0" + struct.pack("!hh", 0, len(params))
    for p in params:
        body += struct.pack("!i", len(p)) + p
    return message(b"B", body + struct.pack("!h", 0))


STREAM_PARTS: list[tuple[bool, bytes]] = [
    (True, startup(SSL_REQUEST)),
    (True, startup(196608, b"user\0postgres\0database\0postgres\0\0")),
    (False, message(b"Q", b"BEGIN\0")),
    (False, message(b"P", b"\0INSERT INTO t VALUES ($1)\0\0\0")),
    (False, _bind([b"refund:COMMIT-me"])),
    (False, message(b"E", b"\0\0\0\0\0")),
    (False, message(b"S", b"")),
    (False, message(b"Q", b"COMMIT\0")),
    (False, message(b"X", b"")),
]


def test_frames_a_stream_delivered_one_byte_at_a_time() -> None:
    parser = FrameParser()
    stream = b"".join(raw for _, raw in STREAM_PARTS)
    frames = []
    boundaries = []
    expected = iter(STREAM_PARTS)
    untyped, _ = next(expected)
    for pos, byte in enumerate(stream, start=1):
        parser.feed(bytes([byte]))
        frame = parser.next_frame(untyped=untyped)
        if frame is not None:
            frames.append(frame)
            boundaries.append(pos)
            untyped = next(expected, (False, b""))[0]
    assert [f.raw for f in frames] == [raw for _, raw in STREAM_PARTS]
    # each frame is returned exactly when its last byte arrives, never earlier
    ends, acc = [], 0
    for _, raw in STREAM_PARTS:
        acc += len(raw)
        ends.append(acc)
    assert boundaries == ends
    assert [f.type for f in frames] == [b"", b"", b"Q", b"P", b"B", b"E", b"S", b"Q", b"X"]
    assert frames[0].code == SSL_REQUEST
    assert frames[1].code == 196608
    assert cstrings(frames[3].body, 2) == ["", "INSERT INTO t VALUES ($1)"]
    assert parser.buffered == 0


def test_frames_a_stream_delivered_in_one_piece() -> None:
    parser = FrameParser()
    parser.feed(b"".join(raw for untyped, raw in STREAM_PARTS if not untyped))
    types = []
    while (frame := parser.next_frame()) is not None:
        types.append(frame.type)
    assert types == [b"Q", b"P", b"B", b"E", b"S", b"Q", b"X"]


def test_keeps_a_partial_frame_until_complete_and_hands_back_the_rest() -> None:
    parser = FrameParser()
    raw = message(b"Q", b"SELECT 1\0")
    parser.feed(raw[:-1])
    assert parser.next_frame() is None
    assert parser.buffered == len(raw) - 1
    assert parser.take_rest() == raw[:-1]
    assert parser.buffered == 0


def test_rejects_an_impossible_length() -> None:
    parser = FrameParser()
    parser.feed(b"Q" + struct.pack("!i", 3))
    with pytest.raises(ProtocolError):
        parser.next_frame()


@pytest.mark.parametrize(
    "sql",
    [
        "COMMIT",
        "commit",
        "COMMIT;",
        "  Commit  ;  ",
        "COMMIT WORK",
        "COMMIT TRANSACTION",
        "COMMIT AND CHAIN",
        "END",
        "end transaction;",
        "BEGIN; INSERT INTO t VALUES ('a'); COMMIT",
        "/* a comment */ COMMIT",
        "-- a comment\nCOMMIT",
        "COMMIT/* trailing */",
    ],
)
def test_recognises_statements_that_are_commits(sql: str) -> None:
    assert is_commit(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t VALUES ('COMMIT')",
        "INSERT INTO t VALUES ('x;COMMIT')",
        "INSERT INTO t VALUES (E'\\';COMMIT')",
        "SELECT $$;COMMIT$$",
        "SELECT $tag$ ; END $tag$",
        'SELECT 1 AS "COMMIT"',
        'SELECT 1 AS "a;COMMIT"',
        "SELECT 1 -- ; COMMIT",
        "SELECT 1 /* ; COMMIT */",
        "SELECT 1 /* nested /* ; COMMIT */ ; COMMIT */",
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "COMMIT PREPARED 'gid'",
        "ROLLBACK",
        "BEGIN",
        "SELECT committed FROM t",
        "UPDATE t SET v = 1 WHERE k = 'refund:COMMIT-me'",
        "",
    ],
)
def test_ignores_statements_that_only_mention_commit(sql: str) -> None:
    assert not is_commit(sql)


def test_splits_on_top_level_semicolons_only() -> None:
    assert split_statements("SELECT ';'; SELECT $$;$$ ;; SELECT \"a;b\" -- x;y\n") == [
        "SELECT ';'",
        "SELECT $$;$$",
        'SELECT "a;b"',
    ]
