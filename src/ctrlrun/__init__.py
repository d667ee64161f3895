"""ctrlrun: the last check before an AI agent does something it cannot undo."""

from ctrlrun.errors import (
    ActionDenied,
    AmbiguousEffect,
    ApprovalMismatch,
    ApprovalRequired,
    CtrlrunError,
    DuplicateEffect,
    EffectKeyError,
    InvalidArgument,
    MissingDependency,
    NotExecuted,
    PolicyError,
    SchemaMismatch,
)
from ctrlrun.kernel.action import Action, Principal

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionDenied",
    "AmbiguousEffect",
    "ApprovalMismatch",
    "ApprovalRequired",
    "CtrlrunError",
    "DuplicateEffect",
    "EffectKeyError",
    "InvalidArgument",
    "MissingDependency",
    "NotExecuted",
    "PolicyError",
    "Principal",
    "SchemaMismatch",
]
