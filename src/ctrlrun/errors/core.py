"""The core of the exception hierarchy: the root, refusals of a protected call, the
executor's signal and faults. ``ctrlrun.errors`` re-exports every class."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any


class DenyReason(StrEnum):
    """Why an action was denied."""

    UNKNOWN_ACTION = "unknown_action"
    NO_PRINCIPAL = "no_principal"
    POLICY = "policy"
    NO_MATCHING_RULE = "no_matching_rule"
    CONDITION_UNEVALUABLE = "condition_unevaluable"
    EFFECT_KEY_ERROR = "effect_key_error"
    APPROVAL_DENIED = "approval_denied"
    ATTEMPT_CEILING = "attempt_ceiling"
    POLICY_UNLOADABLE = "policy_unloadable"
    EFFECT_TEMPLATE_CHANGED = "effect_template_changed"
    OVER_BUDGET = "over_budget"
    BUDGET_UNEVALUABLE = "budget_unevaluable"


class MismatchReason(StrEnum):
    """Why a presented approval does not authorise this action."""

    UNKNOWN = "unknown"
    MISMATCH = "mismatch"
    CONSUMED = "consumed"
    EXPIRED = "expired"
    PENDING = "pending"
    ANSWERED = "answered"
    POLICY_CHANGED = "policy_changed"
    REQUESTER = "requester"
    UNSIGNED = "unsigned"
    TAMPERED = "tampered"  # the stored request does not hash to the action it binds


class DuplicateState(StrEnum):
    """What a duplicate reservation ran into."""

    COMMITTED = "committed"
    IN_PROGRESS = "in_progress"


class CtrlrunError(Exception):
    """Root of every exception ctrlrun raises on purpose.

    Subclasses declare their keyword fields; ``__reduce__`` rebuilds them after pickling.
    """

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self._fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.fields()))

    def fields(self) -> dict[str, Any]:
        """The keyword fields as they stand now (a field may be filled in after raising)."""
        return {name: getattr(self, name, value) for name, value in self._fields.items()}

    def for_model(self) -> str:
        """One short text for a model to read as a tool result: what happened and, where a
        retry cannot help, "do not retry". Built from this error's own fields."""
        values = {**self.fields(), "message": _clip(self.message)}
        try:
            return self._model_text.format_map(values)
        except (KeyError, IndexError, ValueError):  # a subclass's fields differ: say the message
            return CtrlrunError._model_text.format_map(values)

    _model_text = "Error: {message}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description: the class name, the message and every field."""
        out: dict[str, Any] = {"error": type(self).__name__, "message": self.message}
        out.update({k: _plain(v) for k, v in self.fields().items()})
        return out


def evidence_name(exc: BaseException) -> str:
    """The class name stored in evidence (receipts, reports). Subclasses added after receipts
    existed (``AlreadyCommitted``, ``InProgress``) keep their base's name, so stored bytes and
    reports stay comparable."""
    return getattr(exc, "_evidence_name", None) or type(exc).__name__


def _plain(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return str(value)
    if isinstance(value, datetime):
        from ctrlrun._time import encode_instant  # _time imports the errors: not at load

        return encode_instant(value)
    return value


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _rebuild(cls: type[CtrlrunError], message: str, fields: dict[str, Any]) -> CtrlrunError:
    err = cls.__new__(cls)
    CtrlrunError.__init__(err, message, **fields)
    return err


# --- refusals ----------------------------------------------------------------------------


class Refused(CtrlrunError):
    """An expected, fail-closed refusal. ``reason`` is machine-readable."""

    reason: str


class ActionDenied(Refused):
    """The action may not run. ``reason`` is a ``DenyReason``; ``rule`` the deciding rule index;
    ``approver_reason`` what the person who denied exactly this call wrote, if anything."""

    _model_text = "Not allowed: the action was refused ({reason}). Do not retry it."

    reason: DenyReason
    action_id: str | None
    rule: int | None
    approver_reason: str | None

    def __init__(
        self,
        message: str,
        *,
        reason: DenyReason,
        action_id: str | None = None,
        rule: int | None = None,
        approver_reason: str | None = None,
    ) -> None:
        fields: dict[str, Any] = {"action_id": action_id, "rule": rule}
        if approver_reason is not None:  # the field exists only where a person gave one
            fields["approver_reason"] = approver_reason
        super().__init__(message, reason=reason, **fields)

    def for_model(self) -> str:
        """The refusal; a person's denial carries what they wrote, so the model can say why."""
        why = self.fields().get("approver_reason")
        if why is None:
            return super().for_model()
        return (
            f"Not allowed: a person denied this exact call. Their reason: {_clip(str(why))}"
            " Do not retry it; tell the user."
        )


class EffectKeyError(ActionDenied):
    """The effect-key template could not be resolved from the action; the action is denied."""

    placeholder: str | None

    def __init__(
        self, message: str, *, placeholder: str | None = None, action_id: str | None = None
    ) -> None:
        CtrlrunError.__init__(
            self,
            message,
            reason=DenyReason.EFFECT_KEY_ERROR,
            action_id=action_id,
            rule=None,
            placeholder=placeholder,
        )


class EffectTemplateChanged(ActionDenied):
    """The store reserved ``action``'s keys under the ``remembered`` effect-key template and
    this call renders its key from ``presented``: a different key could run the same effect
    twice, so the call is refused until an operator accepts the change
    (``ctrlrun policy accept``)."""

    action: str
    remembered: str
    presented: str
    _model_text = (
        "Not allowed: this tool's configuration changed and awaits an operator. Do not retry."
    )

    def __init__(self, message: str, *, action: str, remembered: str, presented: str) -> None:
        CtrlrunError.__init__(
            self,
            message,
            reason=DenyReason.EFFECT_TEMPLATE_CHANGED,
            action_id=None,
            rule=None,
            action=action,
            remembered=remembered,
            presented=presented,
        )


class ApprovalRequired(Refused):
    """The action needs a human. ``request_id`` is the request a person answers (the same one
    for every identical call while it is pending); once granted, the identical call runs
    (no need to present it), or present it with ``with_approval(request_id)``.
    ``action_hash`` is what the request binds, ``expires_at`` when it lapses, ``summary`` a
    one-line description for a person (name, arguments, principal), ``action`` the ctrlrun
    action's name (``stripe.refund``; a framework's tool may be called otherwise), ``rule``
    what decided it (``rule[1]``, ``decision``) and ``effect_key`` the key it would reserve."""

    _model_text = (
        "Waiting for a person to approve this exact call (approval request {request_id})."
        " Do not retry it now: tell the user it awaits approval."
    )

    request_id: str
    action_id: str | None
    action_hash: str | None
    expires_at: datetime | None
    summary: str | None
    action: str | None
    rule: str | None
    effect_key: str | None

    def __init__(
        self,
        message: str,
        *,
        request_id: str,
        action_id: str | None = None,
        action_hash: str | None = None,
        expires_at: datetime | None = None,
        summary: str | None = None,
        action: str | None = None,
        rule: str | None = None,
        effect_key: str | None = None,
    ) -> None:
        super().__init__(
            message,
            reason="approval_required",
            request_id=request_id,
            action_id=action_id,
            action_hash=action_hash,
            expires_at=expires_at,
            summary=summary,
            action=action,
            rule=rule,
            effect_key=effect_key,
        )


class ProtectionMismatch(Refused):
    """A protected function and the policy disagree: a template or a rule names an argument
    the function does not take, so the call could never be decided as the policy is written.
    ``findings`` lists every disagreement (``ctrlrun check`` shows the same list)."""

    findings: tuple[str, ...]
    _model_text = "Refused: this tool is misconfigured against its policy. Do not retry."

    def __init__(self, message: str, *, findings: tuple[str, ...]) -> None:
        super().__init__(message, reason="protection_mismatch", findings=tuple(findings))


class ApprovalMismatch(Refused):
    """The presented approval does not authorise this exact action now."""

    _model_text = (
        "Refused: the approval presented does not authorise this exact call ({reason})."
        " Do not retry with it."
    )

    reason: MismatchReason
    approval_id: str

    def __init__(self, message: str, *, reason: MismatchReason, approval_id: str) -> None:
        super().__init__(message, reason=reason, approval_id=approval_id)


class DuplicateEffect(Refused):
    """The effect already committed (``AlreadyCommitted``), or another attempt holds a live
    reservation (``InProgress``). Catch this base to handle both."""

    state: DuplicateState
    effect_key: str
    _model_text = "This effect was already done or is in progress. Do not retry it."

    def __init__(
        self, message: str, *, state: DuplicateState, effect_key: str, **fields: Any
    ) -> None:
        super().__init__(message, reason="duplicate", state=state, effect_key=effect_key, **fields)


class AlreadyCommitted(DuplicateEffect):
    """The effect committed earlier: an idempotent replay. ``result`` is the stored result and
    ``receipt_id`` the receipt of the committed attempt (None when the store cannot say)."""

    result: Any
    receipt_id: str | None
    _evidence_name = "DuplicateEffect"  # receipts written before the split read the same
    _model_text = (
        "Already done: this exact effect was carried out before (receipt {receipt_id}); its"
        " result was {stored}. Do not repeat it."
    )

    def for_model(self) -> str:
        """The duplicate's text, with the stored result (JSON, clipped): what the model would
        have been told the first time."""
        stored = _clip(json.dumps(self.fields().get("result"), default=str, ensure_ascii=False))
        receipt_id = self.fields().get("receipt_id")
        return self._model_text.format(receipt_id=receipt_id, stored=stored)

    def __init__(
        self, message: str, *, effect_key: str, result: Any = None, receipt_id: str | None = None
    ) -> None:
        super().__init__(
            message,
            state=DuplicateState.COMMITTED,
            effect_key=effect_key,
            result=result,
            receipt_id=receipt_id,
        )


class InProgress(DuplicateEffect):
    """Another attempt holds a live reservation of the effect key."""

    _evidence_name = "DuplicateEffect"
    _model_text = (
        "Another attempt at this exact effect is in progress. Do not retry it now; check its"
        " outcome later."
    )

    def __init__(self, message: str, *, effect_key: str) -> None:
        super().__init__(message, state=DuplicateState.IN_PROGRESS, effect_key=effect_key)


class AmbiguousEffect(Refused):
    """The effect's outcome is unknown; a retry is refused until a human or a hook resolves it."""

    _model_text = (
        "Outcome unknown: an earlier attempt at this effect may or may not have happened."
        " A person must check and resolve it. Do not retry."
    )

    effect_key: str
    action_id: str | None

    def __init__(self, message: str, *, effect_key: str, action_id: str | None = None) -> None:
        super().__init__(message, reason="ambiguous", effect_key=effect_key, action_id=action_id)


class RefusalLoop(Refused):
    """A model kept making one refused call: after ``refusals`` identical refused calls of
    ``tool`` in one run, a framework adapter's brake ends the run (``reason`` is
    ``"refusal_loop"``; ``last`` is the last refusal's text for the model)."""

    tool: str
    refusals: int
    last: str
    _model_text = (
        "Stopped: this exact call was refused {refusals} times in this run, so the run is"
        " ended. Do not retry it; tell the user why it was refused: {last}"
    )

    def __init__(self, message: str, *, tool: str, refusals: int, last: str) -> None:
        super().__init__(
            message, reason="refusal_loop", tool=tool, refusals=refusals, last=_clip(last)
        )


# --- the executor's signal ---------------------------------------------------------------


class NotExecuted(CtrlrunError):
    """Raised by an executor to assert that the remote did nothing. The effect becomes FAILED.

    Raise it only when non-execution is proven (e.g. the connection was never opened). Any
    other exception makes the effect AMBIGUOUS.
    """

    _model_text = "The action did not run: {message}"

    def __init__(self, message: str = "the executor did not execute", **fields: Any) -> None:
        super().__init__(message, **fields)


# --- faults ------------------------------------------------------------------------------


class InvalidArgument(CtrlrunError, ValueError):
    """An input cannot be accepted (not canonicalisable, wrong type, impossible transition)."""

    _model_text = "Invalid input, nothing was done: {message}"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message, **fields)


class PolicyError(CtrlrunError):
    """The policy file is missing, unreadable or malformed. Names the key and the line."""

    _model_text = "Refused: the action policy cannot be read. Do not retry; tell the user."

    key: str | None
    line: int | None
    path: str | None

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        line: int | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message, key=key, line=line, path=path)


class StoreError(CtrlrunError):
    """The state store could not do what was asked. Never a proof that an effect did not run."""

    _model_text = (
        "The control store failed; whether the action happened is unknown. Do not retry;"
        " tell the user."
    )

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message, **fields)


class PartitionRefusal(StrEnum):
    """Why a store refused the receipt-partition count it was given."""

    COUNT_DIFFERS = "count_differs"
    """The store keeps another number of chains: the count is fixed when a store is created."""
    NOT_SUPPORTED = "not_supported"
    """The store keeps one chain only (SQLite: its writers take turns on the file anyway)."""


class PartitionsMismatch(StoreError):
    """The receipt-partition count given to an open is not the store's; nothing was written.
    ``stored`` is the store's count, ``given`` the count asked for, ``reason`` why."""

    _model_text = "Refused: the control store was opened with the wrong setup: {message}"

    reason: PartitionRefusal
    stored: int | None
    given: int

    def __init__(
        self, message: str, *, reason: PartitionRefusal, stored: int | None, given: int
    ) -> None:
        super().__init__(message, reason=reason, stored=stored, given=given)


class Unreachable(StoreError):
    """The document server could not be reached, failed, or its answer was lost on the way.

    Like every ``StoreError`` this is never a proof that a save did not land: the outcome of the
    request is unknown. ``status`` is the HTTP status when one arrived (a 5xx), else None.
    """

    url: str
    status: int | None

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message, url=url, status=status)


class SchemaMismatch(StoreError):
    """The store's schema is missing, behind or ahead of this binary; nothing was read or written.

    ``applied`` is what the database records, ``known`` what this binary knows.
    """

    applied: tuple[str, ...]
    known: tuple[str, ...]
    running: str

    def __init__(
        self,
        message: str,
        *,
        applied: tuple[str, ...] = (),
        known: tuple[str, ...] = (),
        running: str = "",
    ) -> None:
        super().__init__(message, applied=tuple(applied), known=tuple(known), running=running)


class StoreNotFound(SchemaMismatch):
    """There is no ctrlrun store where one was expected (a missing or empty SQLite file, a
    Postgres schema without ctrlrun's tables), and this open may not create one. Only
    ``ctrlrun init`` and an explicit ``create=True`` create a store: a store that silently
    reappeared empty would let a call run again what already ran. ``location`` says where."""

    location: str

    def __init__(self, message: str, *, location: str) -> None:
        CtrlrunError.__init__(self, message, applied=(), known=(), running="", location=location)


class WriteFailed(StoreError):
    """A store write failed before its COMMIT could take effect: nothing was committed.

    Raised for an error before ``COMMIT`` was executed (a connect failure, a statement error, a
    constraint violation, a statement timeout) and for the server's in-band aborts
    (serialization failure ``40001``, deadlock ``40P01``). The write may be retried at once.
    ``sqlstate`` is the server's code when it sent one; ``operation`` names the store call.
    """

    sqlstate: str | None
    operation: str

    def __init__(self, message: str, *, sqlstate: str | None = None, operation: str = "") -> None:
        super().__init__(message, sqlstate=sqlstate, operation=operation)


class OutcomeUnrecorded(StoreError):
    """The executor ran, but the store could not record its outcome (the second write failed).

    Whatever the store's own error says, this is not "nothing happened": the effect may well
    have taken place. The key stays held by this attempt and is AMBIGUOUS once its lease
    expires, so no retry can run it again blindly. ``intended`` is the outcome that was not
    recorded (``committed``, ``failed`` or ``ambiguous``); the store's error is the cause.
    """

    effect_key: str | None
    intended: str
    _model_text = (
        "The action ran, but its outcome could not be recorded; whether it took effect must"
        " be checked by a person. Do not retry."
    )

    def __init__(self, message: str, *, effect_key: str | None, intended: str) -> None:
        super().__init__(message, effect_key=effect_key, intended=intended)


class AmbiguityReason(StrEnum):
    """Why a store write whose COMMIT went unanswered could not be settled."""

    NO_WITNESS = "no_witness"  # the write left no row a re-read can recognise
    REREAD_FAILED = "reread_failed"  # the re-read itself failed
    REISSUE_UNKNOWN = "reissue_unknown"  # the one re-issue was lost at COMMIT too
    UNRECOGNISED = "unrecognised"  # the re-read found a row that is neither ours nor before
    UNREPLICATED = "unreplicated"  # it committed on the primary; its replication is unconfirmed


class AmbiguousWrite(StoreError):
    """A store write's COMMIT may or may not have taken effect, and the store could not settle
    which. Fail closed: it is never a success and never a proof that nothing happened. A
    protected call that meets it is not executed (at reservation) or leaves its outcome to the
    record's lease (at recording). ``reason`` is an ``AmbiguityReason``.
    """

    reason: AmbiguityReason
    operation: str
    effect_key: str | None

    def __init__(
        self,
        message: str,
        *,
        reason: AmbiguityReason,
        operation: str = "",
        effect_key: str | None = None,
    ) -> None:
        super().__init__(message, reason=reason, operation=operation, effect_key=effect_key)


class MissingDependency(CtrlrunError, ImportError):
    """An optional extra is not installed. The message names the exact install line (from a
    checkout: the name ``ctrlrun`` on a package index is another project)."""

    module: str
    extra: str

    def __init__(self, *, module: str, extra: str) -> None:
        message = (
            f"{module} is not installed: ctrlrun's {extra!r} extra provides it; in the ctrlrun"
            f" checkout run pip install '.[{extra}]'"
        )
        super().__init__(message, module=module, extra=extra)
