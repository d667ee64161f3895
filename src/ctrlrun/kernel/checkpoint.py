"""Signed checkpoints: the end of the receipt chain, stated by a key the agents do not hold.

A checkpoint statement (``ctrlrun.checkpoint/v1``, docs/checkpoints.md) is a small text in the
spirit of a transparency log's signed note: a body of lines, a blank line, then one or more
signature lines. The body, every line ending in ``\\n``::

    ctrlrun.checkpoint/v1 <origin>
    <partition> <seq> <head hash>        one line per partition, 0, 1, … in order
    heads sha256:<hex>                   SHA-256 of the partition lines' bytes, in order
    time <YYYY-MM-DDTHH:MM:SS.ffffffZ>

and each signature line is ``— <key id> <base64 Ed25519 signature over the body's bytes>``
(an em dash and a space first; the key id is ``key_id`` of the signer's public key). A file of
checkpoints is such statements one after another, each followed by a blank line.

Pure: nothing here reads a file or the store. Signing and verifying call ``signing`` (the
``cryptography`` package, imported on first use).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from ctrlrun._time import decode_instant, encode_instant
from ctrlrun.canonical import sha256_hex
from ctrlrun.errors import CheckpointInvalid, CheckpointReason, InvalidArgument
from ctrlrun.kernel import signing
from ctrlrun.kernel.receipt import ChainHead

CHECKPOINT_SCHEMA: Final = "ctrlrun.checkpoint/v1"
SIGNATURE_MARK: Final = "\u2014 "  # an em dash and a space, as signed notes begin theirs
DEFAULT_ORIGIN: Final = "ctrlrun"

_ORIGIN: Final = re.compile(r"[A-Za-z0-9._:/@#+=-]{1,200}")
_HASH: Final = re.compile(r"sha256:[0-9a-f]{64}")
_NUMBER: Final = re.compile(r"0|[1-9][0-9]{0,18}")
_INSTANT: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


@dataclass(frozen=True, slots=True)
class PartitionHead:
    """One partition's chain head as a checkpoint states it."""

    partition: int
    seq: int
    hash: str

    @property
    def head(self) -> ChainHead:
        """As the store's head row reads: ``(seq, hash)``."""
        return ChainHead(self.seq, self.hash)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint statement's body, parsed. ``body`` is the exact signed text; ``line`` the
    1-based line of the file it starts at (None when not read from a file)."""

    origin: str
    heads: tuple[PartitionHead, ...]
    time: datetime
    body: str
    line: int | None = None
    statement: str = ""
    """The whole signed statement (body, blank line, signature lines), once read or made."""

    def head(self, partition: int) -> PartitionHead | None:
        """The head this checkpoint states for ``partition``, if it names it."""
        return self.heads[partition] if 0 <= partition < len(self.heads) else None

    @property
    def digest(self) -> str:
        """The ``heads`` line's value: one hash committing every partition's head."""
        return heads_digest(self.heads)


def check_origin(origin: str) -> str:
    """``origin`` if it is 1 to 200 of ``A-Z a-z 0-9 . _ : / @ # + = -``; ``InvalidArgument``
    else (it is one token of a line that is signed)."""
    if not isinstance(origin, str) or not _ORIGIN.fullmatch(origin):
        raise InvalidArgument(
            f"a checkpoint origin is 1-200 of A-Z a-z 0-9 . _ : / @ # + = -, got {origin!r}"
        )
    return origin


def key_id(public_key: str) -> str:
    """The name a signature line gives its key: the first 16 hex digits of the SHA-256 of the
    raw public key (``ed25519:<base64>``)."""
    raw = base64.b64decode(signing.check_public_key(public_key)[len(signing.KEY_PREFIX) :])
    return hashlib.sha256(raw).hexdigest()[:16]


def heads_digest(heads: Sequence[PartitionHead]) -> str:
    """SHA-256 of the partition lines, in order, each ending in ``\\n``."""
    return sha256_hex("".join(_head_line(h) for h in heads).encode("ascii"))


def checkpoint_body(origin: str, heads: Sequence[PartitionHead], time: datetime) -> str:
    """The text a checkpoint signs. ``heads`` must be partitions 0, 1, … in order."""
    check_origin(origin)
    if not heads or [h.partition for h in heads] != list(range(len(heads))):
        raise InvalidArgument("a checkpoint names every partition, 0, 1, … in order")
    return (
        f"{CHECKPOINT_SCHEMA} {origin}\n"
        + "".join(_head_line(h) for h in heads)
        + f"heads {heads_digest(heads)}\ntime {encode_instant(time)}\n"
    )


def sign_statement(body: str, private_key_pem: bytes) -> str:
    """The whole statement: ``body``, a blank line, and its signature line by the key."""
    signature = signing.sign(private_key_pem, body.encode("utf-8"))
    signer = key_id(signing.public_key_text(private_key_pem))
    return f"{body}\n{SIGNATURE_MARK}{signer} {signature}\n"


def _head_line(head: PartitionHead) -> str:
    return f"{head.partition} {head.seq} {head.hash}\n"


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement as read: its body and its signature lines as ``(key id, signature)``."""

    checkpoint: Checkpoint
    signatures: tuple[tuple[str, str], ...]
    text: str


def read_statements(text: str) -> tuple[Statement, ...]:
    """Every statement of a checkpoint file's ``text``, in order. A line out of place, a body
    that does not parse or a statement without signature lines is ``CheckpointInvalid``
    (``malformed``) naming its line. Signatures are not checked here (``verified``)."""
    lines = text.split("\n")
    found: list[Statement] = []
    index = 0
    while index < len(lines):
        if lines[index] == "":
            index += 1
            continue
        start = index
        while index < len(lines) and lines[index] != "":
            index += 1
        body_lines = lines[start:index]
        index += 1  # the blank line between body and signatures
        signature_start = index
        while index < len(lines) and lines[index] != "":
            index += 1
        found.append(_statement(body_lines, lines[signature_start:index], start + 1))
    return tuple(found)


def _statement(body_lines: list[str], signature_lines: list[str], line: int) -> Statement:
    body = "".join(f"{entry}\n" for entry in body_lines)
    checkpoint = parse_body(body, line)
    if not signature_lines:
        raise _malformed("has no signature line", line)
    signatures = tuple(_signature(entry, line) for entry in signature_lines)
    text = body + "\n" + "".join(f"{entry}\n" for entry in signature_lines)
    return Statement(replace(checkpoint, statement=text), signatures, text)


def _signature(entry: str, line: int) -> tuple[str, str]:
    parts = entry[len(SIGNATURE_MARK) :].split(" ")
    if not entry.startswith(SIGNATURE_MARK) or len(parts) != 2 or not all(parts):
        raise _malformed("has a line that is neither body nor '— <key id> <signature>'", line)
    return parts[0], parts[1]


def parse_body(body: str, line: int | None = None) -> Checkpoint:
    """The checkpoint a body states; ``CheckpointInvalid`` (``malformed``) unless it is
    exactly what ``checkpoint_body`` writes."""
    rows = body.split("\n")
    if len(rows) < 5 or rows[-1] != "":
        raise _malformed("is not a checkpoint body", line)
    first, *head_rows, digest_row, time_row, _ = rows
    schema, _, origin = first.partition(" ")
    if schema != CHECKPOINT_SCHEMA or not _ORIGIN.fullmatch(origin):
        raise _malformed(f"does not begin '{CHECKPOINT_SCHEMA} <origin>'", line)
    heads = tuple(_parse_head(row, number, line) for number, row in enumerate(head_rows))
    if digest_row != f"heads {heads_digest(heads)}":
        raise _malformed("has a 'heads' line that is not the hash of its partition lines", line)
    stamp = time_row.removeprefix("time ")
    if stamp == time_row or not _INSTANT.fullmatch(stamp):
        raise _malformed("has no 'time YYYY-MM-DDTHH:MM:SS.ffffffZ' line", line)
    try:
        time = decode_instant(stamp[:-1] + "+00:00")
    except ValueError:
        raise _malformed(f"has an impossible time {stamp!r}", line) from None
    return Checkpoint(origin, heads, time, body, line)


def _parse_head(row: str, partition: int, line: int | None) -> PartitionHead:
    parts = row.split(" ")
    if (
        len(parts) != 3
        or parts[0] != str(partition)
        or not _NUMBER.fullmatch(parts[1])
        or not _HASH.fullmatch(parts[2])
    ):
        raise _malformed(f"has no line '{partition} <seq> sha256:<hex>' for partition", line)
    return PartitionHead(partition, int(parts[1]), parts[2])


def _malformed(what: str, line: int | None) -> CheckpointInvalid:
    where = "the checkpoint" if line is None else f"the checkpoint at line {line}"
    return CheckpointInvalid(f"{where} {what}", reason=CheckpointReason.MALFORMED, line=line)


def verified(
    statements: Sequence[Statement], public_key: str, origin: str | None = None
) -> tuple[Checkpoint, ...]:
    """The checkpoints of ``statements`` (of ``origin`` only, when given), each proven by a
    signature of ``public_key`` over its body. Every statement is proven, whatever its origin
    (an edited origin must not hide a checkpoint): one the key did not sign, or whose
    signature does not verify, refuses them all (``CheckpointInvalid``); statements of several
    origins with no ``origin`` chosen are refused too."""
    signer = key_id(public_key)
    proven = [_proven(statement, public_key, signer) for statement in statements]
    chosen = tuple(c for c in proven if origin is None or c.origin == origin)
    origins = sorted({c.origin for c in chosen})
    if len(origins) > 1:
        raise CheckpointInvalid(
            f"the checkpoints are of several origins ({', '.join(origins)}); choose one",
            reason=CheckpointReason.MIXED_ORIGINS,
        )
    return chosen


def _proven(statement: Statement, public_key: str, signer: str) -> Checkpoint:
    checkpoint = statement.checkpoint
    where = "the checkpoint" + ("" if checkpoint.line is None else f" at line {checkpoint.line}")
    mine = [signature for name, signature in statement.signatures if name == signer]
    if not mine:
        raise CheckpointInvalid(
            f"{where} is not signed by key {signer} ({public_key})",
            reason=CheckpointReason.UNSIGNED,
            line=checkpoint.line,
        )
    message = checkpoint.body.encode("utf-8")
    if not all(_verifies(public_key, message, signature) for signature in mine):
        raise CheckpointInvalid(
            f"{where} does not verify under key {signer}: it was altered or forged",
            reason=CheckpointReason.BAD_SIGNATURE,
            line=checkpoint.line,
        )
    return checkpoint


def _verifies(public_key: str, message: bytes, signature: str) -> bool:
    try:
        return signing.verify(public_key, message, signature)
    except (binascii.Error, ValueError):
        return False


def partition_heads(checkpoints: Sequence[Checkpoint], partition: int) -> Iterator[ChainHead]:
    """``(seq, hash)`` of ``partition`` in each checkpoint that names it, in order."""
    for checkpoint in checkpoints:
        head = checkpoint.head(partition)
        if head is not None:
            yield head.head
