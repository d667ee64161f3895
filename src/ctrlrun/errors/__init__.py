"""The whole exception hierarchy of ctrlrun.

Three branches under one root:

* ``Refused`` — the expected, fail-closed answers a caller handles (``ActionDenied``,
  ``ApprovalRequired``, ``ApprovalMismatch``, ``DuplicateEffect``, ``AmbiguousEffect``, and for
  documents ``VersionConflict``, ``DocumentNotFound``, ``DocumentExists``, ``MergeConflict``).
  Each carries a machine-readable ``reason``.
* faults — configuration, argument and store problems (``PolicyError``, ``InvalidArgument``,
  ``DocumentTooLarge``, ``StoreError`` and its children such as ``Unreachable``,
  ``MissingDependency``).
* the executor's signal ``NotExecuted``: the only exception that means "the remote did nothing".

Every field is keyword-only and survives pickling, so refusals cross process boundaries intact.
"""

from __future__ import annotations

from ctrlrun.errors.chain import (
    ChainRefusal,
    ChainRefused,
    CheckpointInvalid,
    CheckpointReason,
)
from ctrlrun.errors.core import (
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
    evidence_name,
)
from ctrlrun.errors.documents import (
    DocumentExists,
    DocumentNotFound,
    DocumentTooLarge,
    MergeConflict,
    PreconditionRequired,
    VersionConflict,
)
from ctrlrun.errors.durable import (
    ClaimLost,
    NotifyReason,
    OperationInFlight,
    PlanReason,
    PlanRefused,
    Undeliverable,
)
from ctrlrun.errors.replication import ReplicationReason, ReplicationRefused, StaleTimeline

__all__ = [
    "ActionDenied",
    "AlreadyCommitted",
    "AmbiguityReason",
    "AmbiguousEffect",
    "AmbiguousWrite",
    "ApprovalMismatch",
    "ApprovalRequired",
    "ChainRefusal",
    "ChainRefused",
    "CheckpointInvalid",
    "CheckpointReason",
    "ClaimLost",
    "CtrlrunError",
    "DenyReason",
    "DocumentExists",
    "DocumentNotFound",
    "DocumentTooLarge",
    "DuplicateEffect",
    "DuplicateState",
    "EffectKeyError",
    "EffectTemplateChanged",
    "InProgress",
    "InvalidArgument",
    "MergeConflict",
    "MismatchReason",
    "MissingDependency",
    "NotExecuted",
    "NotifyReason",
    "OperationInFlight",
    "OutcomeUnrecorded",
    "PartitionRefusal",
    "PartitionsMismatch",
    "PlanReason",
    "PlanRefused",
    "PolicyError",
    "PreconditionRequired",
    "ProtectionMismatch",
    "RefusalLoop",
    "Refused",
    "ReplicationReason",
    "ReplicationRefused",
    "SchemaMismatch",
    "StaleTimeline",
    "StoreError",
    "StoreNotFound",
    "Undeliverable",
    "Unreachable",
    "VersionConflict",
    "WriteFailed",
    "evidence_name",
]
