"""Durable step execution (seed 003): an outbox, approved plans, long-running operations.

Three patterns over the same store and one contract: a status machine whose every transition
is a conditional write; a claim exactly one worker wins; a lease on the store's clock (on
Postgres, the server's) always paired with a fence; receipts committed with the effect; bounded,
spaced retries. ``docs/durable.md`` says, per pattern, whether its external effects are
at-least-once or at-most-once and why.
"""

from ctrlrun.durable.dispatcher import Delivery, Dispatcher
from ctrlrun.durable.operations import Operations
from ctrlrun.durable.outbox import Outbox
from ctrlrun.durable.plans import Plans
from ctrlrun.durable.runner import PlanOutcome, PlanRunner, StepContext, Steps
from ctrlrun.errors import (
    ClaimLost,
    NotifyReason,
    OperationInFlight,
    PlanReason,
    PlanRefused,
    Undeliverable,
)
from ctrlrun.kernel.operation import Operation, OperationStatus, PollResult, PollState
from ctrlrun.kernel.outbox import Backoff, Message, MessageStatus, OnUnknown, Outcome
from ctrlrun.kernel.plan import PlanRecord, PlanStatus, PlanStep, StepRecord, StepResult

__all__ = [
    "Backoff",
    "ClaimLost",
    "Delivery",
    "Dispatcher",
    "Message",
    "MessageStatus",
    "NotifyReason",
    "OnUnknown",
    "Operation",
    "OperationInFlight",
    "OperationStatus",
    "Operations",
    "Outbox",
    "Outcome",
    "PlanOutcome",
    "PlanReason",
    "PlanRecord",
    "PlanRefused",
    "PlanRunner",
    "PlanStatus",
    "PlanStep",
    "Plans",
    "PollResult",
    "PollState",
    "StepContext",
    "StepRecord",
    "StepResult",
    "Steps",
    "Undeliverable",
]
