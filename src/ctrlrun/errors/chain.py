"""Errors of the receipt chain's checkpoints and retention (``ctrlrun.checkpoints``)."""

from __future__ import annotations

from enum import StrEnum

from ctrlrun.errors.core import InvalidArgument, Refused


class CheckpointReason(StrEnum):
    """Why a checkpoint statement (or a file of them) was refused."""

    MALFORMED = "malformed"
    """Not a ``ctrlrun.checkpoint/v1`` statement as docs/checkpoints.md writes it."""
    UNSIGNED = "unsigned"
    """No signature line by the key the verifier was given (signed by another key, or none)."""
    BAD_SIGNATURE = "bad_signature"
    """A signature line names the key but does not verify: the statement was edited, or the
    signature forged."""
    MIXED_ORIGINS = "mixed_origins"
    """The file holds statements of several origins and no origin was chosen."""
    NO_KEY = "no_key"
    """Checkpoints were given without the public key that proves them (or the reverse)."""


class CheckpointInvalid(InvalidArgument):
    """A checkpoint statement cannot be trusted: verification is refused, not judged.

    ``line`` is the 1-based line of the file where the statement starts (None when the text
    is not from a file); ``reason`` says why."""

    _model_text = "Refused: a receipt-chain checkpoint cannot be trusted: {message}"

    reason: CheckpointReason
    line: int | None

    def __init__(self, message: str, *, reason: CheckpointReason, line: int | None = None) -> None:
        super().__init__(message, reason=reason, line=line)


class ChainRefusal(StrEnum):
    """Why ``checkpoint`` or ``prune`` did nothing (or, for a sink, did not finish)."""

    NO_CHECKPOINT = "no_checkpoint"
    """``prune``: no checkpoint made before the date covers receipts the store still holds."""
    CHAIN_BROKEN = "chain_broken"
    """The chain does not verify against the earlier checkpoints: signing its head would
    endorse the break, and pruning would destroy the proof of it."""
    SINK_FAILED = "sink_failed"
    """``checkpoint``: a place outside the store did not take the statement; the store was
    not written."""


class ChainRefused(Refused):
    """``checkpoint`` or ``prune`` (``operation``) refused; ``reason`` says why and the message
    names what to do."""

    reason: ChainRefusal
    operation: str

    def __init__(self, message: str, *, reason: ChainRefusal, operation: str) -> None:
        super().__init__(message, reason=reason, operation=operation)
