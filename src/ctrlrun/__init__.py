"""ctrlrun: the last check before an AI agent does something it cannot undo.

A consequential action happens at most once, exactly as approved, and leaves a hash-chained
receipt; when its outcome is unknown it is AMBIGUOUS, and a blind retry is refused.

    import ctrlrun

    @ctrlrun.protect("stripe.refund", effect="refund:{payment_id}")
    def refund(payment_id: str, amount: int) -> dict:
        return stripe.Refund.create(payment=payment_id, amount=amount,
                                    idempotency_key=ctrlrun.idempotency_token())

    with ctrlrun.context(agent="support-bot", user="alice"):
        refund(payment_id="pay_123", amount=5000)

A ``Control`` of your own (in a test, say) takes a policy from ``ctrlrun.load_policy(path)``
or ``ctrlrun.Policy.from_yaml(text)``.

``import ctrlrun`` imports no optional dependency (no database driver, no HTTP server).
"""

from ctrlrun._version import __version__
from ctrlrun.canonical import canonical_bytes
from ctrlrun.errors import (
    ActionDenied,
    AlreadyCommitted,
    AmbiguityReason,
    AmbiguousEffect,
    AmbiguousWrite,
    ApprovalMismatch,
    ApprovalRequired,
    CtrlrunError,
    DenyReason,
    DuplicateEffect,
    DuplicateState,
    EffectKeyError,
    EffectTemplateChanged,
    InProgress,
    InvalidArgument,
    MismatchReason,
    MissingDependency,
    NotExecuted,
    OutcomeUnrecorded,
    PartitionRefusal,
    PartitionsMismatch,
    PolicyError,
    ProtectionMismatch,
    RefusalLoop,
    Refused,
    SchemaMismatch,
    StoreError,
    StoreNotFound,
    Unreachable,
    WriteFailed,
)
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.effect import EffectRecord, EffectState, idempotency_token_for
from ctrlrun.kernel.event import Event, EventType
from ctrlrun.kernel.held import HeldCheck, HeldStatus
from ctrlrun.kernel.policy import Decision, Policy
from ctrlrun.kernel.receipt import BreakKind, ChainReport, Receipt, ReceiptResult, verify_chain
from ctrlrun.loading import load_policy
from ctrlrun.runtime.context import context, idempotency_token, with_approval
from ctrlrun.runtime.control import Control
from ctrlrun.runtime.held import check_held_receipts
from ctrlrun.runtime.protect import protect, set_default_control
from ctrlrun.runtime.sinks import JSONLSink, Sink
from ctrlrun.store.protocol import StateStore
from ctrlrun.store.sqlite import SQLiteStateStore

__all__ = [
    "Action",
    "ActionDenied",
    "AlreadyCommitted",
    "AmbiguityReason",
    "AmbiguousEffect",
    "AmbiguousWrite",
    "ApprovalMismatch",
    "ApprovalRecord",
    "ApprovalRequired",
    "ApprovalStatus",
    "BreakKind",
    "ChainReport",
    "Control",
    "CtrlrunError",
    "Decision",
    "DenyReason",
    "DuplicateEffect",
    "DuplicateState",
    "EffectKeyError",
    "EffectRecord",
    "EffectState",
    "EffectTemplateChanged",
    "Event",
    "EventType",
    "HeldCheck",
    "HeldStatus",
    "InProgress",
    "InvalidArgument",
    "JSONLSink",
    "MismatchReason",
    "MissingDependency",
    "NotExecuted",
    "OutcomeUnrecorded",
    "PartitionRefusal",
    "PartitionsMismatch",
    "Policy",
    "PolicyError",
    "Principal",
    "ProtectionMismatch",
    "Receipt",
    "ReceiptResult",
    "RefusalLoop",
    "Refused",
    "SQLiteStateStore",
    "SchemaMismatch",
    "Sink",
    "StateStore",
    "StoreError",
    "StoreNotFound",
    "Unreachable",
    "WriteFailed",
    "__version__",
    "canonical_bytes",
    "check_held_receipts",
    "context",
    "idempotency_token",
    "idempotency_token_for",
    "load_policy",
    "protect",
    "set_default_control",
    "verify_chain",
    "with_approval",
]
