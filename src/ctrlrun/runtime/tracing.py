"""A tracer sees each protected call from before its decision to after its outcome, with the
call's context current throughout (so spans the executor makes nest under the call's).

``Control(tracer=…)`` takes any ``CallTracer``; ``ctrlrun.integrations.otel`` is the
OpenTelemetry one. A tracer that is also a ``Sink`` (has ``receipt``) is given every receipt
too, before the call ends. A tracer can never fail a call: its exceptions are logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from ctrlrun.kernel.action import Action

log = logging.getLogger("ctrlrun")


class CallTrace(Protocol):
    """One call being traced."""

    def end(self, error: BaseException | None) -> None:
        """The call returned (``error`` None) or raised ``error`` (a refusal, or the
        executor's own exception after its outcome was recorded)."""
        ...


class CallTracer(Protocol):
    """Starts a ``CallTrace`` for each protected call."""

    def begin(self, action: Action) -> CallTrace:
        """The call of ``action`` starts (before the policy decides)."""
        ...


@contextmanager
def traced(tracer: CallTracer | None, action: Action) -> Iterator[None]:
    """Run the body as ``action``'s traced call (nothing without a tracer)."""
    if tracer is None:
        yield
        return
    try:
        trace: CallTrace | None = tracer.begin(action)
    except Exception:
        log.exception("ctrlrun: the tracer failed; the call is unaffected")
        trace = None
    try:
        yield
    except BaseException as exc:
        _end(trace, exc)
        raise
    _end(trace, None)


def _end(trace: CallTrace | None, error: BaseException | None) -> None:
    if trace is None:
        return
    try:
        trace.end(error)
    except Exception:
        log.exception("ctrlrun: the tracer failed; the call is unaffected")
