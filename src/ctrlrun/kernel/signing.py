"""Ed25519 signatures of approval grants: who approved, provably.

A policy that names ``approvers`` (each with a public key, ``ed25519:<base64>``) accepts only
grants signed by one of them over ``grant_message``: the approval id, the action hash, the
policy hash, the request's expiry and the approver's name, as canonical JSON. A grant row
written by anyone without the private key (an agent with write access to the store, an edited
database) fails verification where it is consumed. ``cryptography`` is imported on first use
(the ``signing`` extra); nothing here touches a file or the network.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from ctrlrun._time import encode_instant
from ctrlrun.canonical import canonical_bytes
from ctrlrun.errors import (
    ApprovalMismatch,
    InvalidArgument,
    MismatchReason,
    MissingDependency,
    Refused,
)
from ctrlrun.kernel.approval import ApprovalRecord, Grant
from ctrlrun.kernel.request_check import checked_hash

KEY_PREFIX: Final = "ed25519:"
SIGNING_SCHEMA: Final = "ctrlrun.approval-grant/v1"
PLAN_SIGNING_SCHEMA: Final = "ctrlrun.plan-approval/v1"
DENIAL_SIGNING_SCHEMA: Final = "ctrlrun.approval-denial/v1"


def grant_message(
    *, approval_id: str, action_hash: str, policy_hash: str, expires_at: datetime, approver: str
) -> bytes:
    """The bytes an approver signs to grant ``approval_id``."""
    return canonical_bytes(
        {
            "schema": SIGNING_SCHEMA,
            "approval_id": approval_id,
            "action_hash": action_hash,
            "policy_hash": policy_hash,
            "expires_at": encode_instant(expires_at),
            "approver": approver,
        }
    )


def plan_grant_message(*, plan_id: str, plan_hash: str, approver: str) -> bytes:
    """The bytes an approver signs to approve plan ``plan_id`` whose steps hash to
    ``plan_hash``."""
    return canonical_bytes(
        {
            "schema": PLAN_SIGNING_SCHEMA,
            "plan_id": plan_id,
            "plan_hash": plan_hash,
            "approver": approver,
        }
    )


def record_message(record: ApprovalRecord, approver: str) -> bytes:
    """``grant_message`` for ``approver`` granting ``record``."""
    return grant_message(
        approval_id=record.approval_id,
        action_hash=record.action_hash,
        policy_hash=record.policy_hash,
        expires_at=record.expires_at,
        approver=approver,
    )


def answer_message(record: ApprovalRecord, approver: str, *, grant: bool) -> bytes:
    """What ``approver`` signs to answer ``record``: over the hash recomputed from the
    stored action (what the person was shown), never the stored hash alone; raises the
    ``tampered`` refusal when the two differ. A denial is signed under its own schema, so
    a grant's signature can never be replayed as a denial or the other way round."""
    action_hash = checked_hash(record)
    if grant:
        return record_message(record, approver)
    return canonical_bytes(
        {
            "schema": DENIAL_SIGNING_SCHEMA,
            "approval_id": record.approval_id,
            "action_hash": action_hash,
            "policy_hash": record.policy_hash,
            "expires_at": encode_instant(record.expires_at),
            "approver": approver,
        }
    )


def plan_signed(
    record: ApprovalRecord, grants: Sequence[Grant], keys: Mapping[str, str]
) -> tuple[Refused | None, tuple[tuple[str, str], ...]]:
    """Under a policy naming approver ``keys``: the grants of ``record`` whose approver is
    named and whose signature verifies, as ``(approver, signature)``; a refusal
    (``unsigned``) when none does. Grants that fail are left out, never counted."""
    valid = tuple(
        (g.approver, g.signature)
        for g in grants
        if g.signature is not None
        and g.approver in keys
        and verify(keys[g.approver], record_message(record, g.approver), g.signature)
    )
    if valid:
        return None, valid
    detail = "has no grant signed by an approver the policy names"
    refusal = ApprovalMismatch(
        f"approval {record.approval_id} {detail}",
        reason=MismatchReason.UNSIGNED,
        approval_id=record.approval_id,
    )
    return refusal, ()


def check_public_key(text: object) -> str:
    """``text`` if it is ``ed25519:`` and the base64 of 32 bytes; ``InvalidArgument`` else."""
    if not isinstance(text, str) or not text.startswith(KEY_PREFIX):
        raise InvalidArgument(f"an approver key is ed25519:<base64 of 32 bytes>, got {text!r}")
    if len(_b64(text[len(KEY_PREFIX) :], "approver key")) != 32:
        raise InvalidArgument(f"an Ed25519 public key is 32 bytes, got {text!r}")
    return text


def verify(public_key: str, message: bytes, signature: str | None) -> bool:
    """True only if ``signature`` (base64) is ``public_key``'s valid signature of
    ``message``; a missing or malformed signature is False, never an exception."""
    if not signature:
        return False
    ed25519, exceptions = _crypto()
    key = ed25519.Ed25519PublicKey.from_public_bytes(_b64(public_key[len(KEY_PREFIX) :], "key"))
    try:
        key.verify(_b64(signature, "signature"), message)
    except (exceptions.InvalidSignature, InvalidArgument):
        return False
    return True


def sign(private_key_pem: bytes, message: bytes) -> str:
    """``message`` signed with an Ed25519 private key in PEM (``generate``), as base64."""
    key = _load_private(private_key_pem)
    return base64.b64encode(key.sign(message)).decode("ascii")


def generate() -> tuple[bytes, str]:
    """A new key pair: the private key as unencrypted PKCS#8 PEM (keep it 0600) and the
    public key as the policy writes it (``ed25519:<base64>``)."""
    ed25519, _ = _crypto()
    from cryptography.hazmat.primitives import serialization

    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, public_key_text(pem)


def public_key_text(private_key_pem: bytes) -> str:
    """The ``ed25519:<base64>`` public key of a PEM private key."""
    from cryptography.hazmat.primitives import serialization

    raw = (
        _load_private(private_key_pem)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return KEY_PREFIX + base64.b64encode(raw).decode("ascii")


def _load_private(pem: bytes) -> Any:
    ed25519, _ = _crypto()
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InvalidArgument("the private key is not an Ed25519 key")
    return key


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidArgument(f"the {what} is not valid base64") from exc


def _crypto() -> tuple[Any, Any]:
    try:
        from cryptography import exceptions
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise MissingDependency(module="cryptography", extra="signing") from exc
    return ed25519, exceptions
