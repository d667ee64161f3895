"""OpenTelemetry: one span per protected call, in the traces an application already collects.

``Control(policy, store, tracer=OTelTracer())``. Each call is a span named
``execute_tool {action}`` (kind INTERNAL) carrying the GenAI tool attributes
(``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.type``) and ``ctrlrun.*`` ones:
action id and hash, decision, effect key, attempt, result, receipt id, approver (a call that
waits for a person, which has no receipt yet: decision, rule, effect key and the approval
request's id, from its ``ApprovalRequired``). The span is
current from before the decision to after the outcome is recorded, so the provider's own spans
(an HTTP client's) nest under it. Its status is ERROR only when the result is ``failed`` or
``ambiguous``: a refusal is ctrlrun working, not a fault. Arguments are recorded only with
``record_arguments=True`` (``gen_ai.tool.call.arguments``, the canonical JSON). Needs
``opentelemetry-api`` (the ``otel`` extra); exporters are the application's own.
"""

from __future__ import annotations

import threading
from typing import Any, Final

from ctrlrun.errors import ApprovalRequired, MissingDependency, Refused
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.receipt import Receipt

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError as exc:  # pragma: no cover - the extra is installed in the dev env
    raise MissingDependency(module="opentelemetry-api", extra="otel") from exc

ERROR_RESULTS: Final = frozenset({"failed", "ambiguous"})
_RECEIPT_FIELDS: Final = (
    ("decision", "ctrlrun.decision"),
    ("decision_reason", "ctrlrun.decision_reason"),
    ("effect_key", "ctrlrun.effect_key"),
    ("attempt", "ctrlrun.attempt"),
    ("result", "ctrlrun.result"),
    ("receipt_id", "ctrlrun.receipt_id"),
    ("approval_id", "ctrlrun.approval_id"),
    ("approver", "ctrlrun.approver"),
    ("policy_hash", "ctrlrun.policy_hash"),
)


class OTelTracer:
    """A ``CallTracer`` (and ``Sink``) making one span per protected call."""

    def __init__(self, tracer_provider: Any = None, *, record_arguments: bool = False) -> None:
        self._tracer = trace.get_tracer("ctrlrun", tracer_provider=tracer_provider)
        self.record_arguments = record_arguments
        self._open: dict[str, Any] = {}  # action id → its span, until the call ends
        self._lock = threading.Lock()

    def begin(self, action: Action) -> _Trace:
        """Start ``action``'s span and make it current."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": action.name,
            "gen_ai.tool.type": "function",
            "ctrlrun.action_id": action.action_id,
            "ctrlrun.action_hash": action.action_hash,
        }
        if self.record_arguments:
            attributes["gen_ai.tool.call.arguments"] = action.arguments_text
        span = self._tracer.start_span(
            f"execute_tool {action.name}", kind=trace.SpanKind.INTERNAL, attributes=attributes
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._open[action.action_id] = span
        return _Trace(self, action.action_id, span, token)

    def receipt(self, receipt: Receipt) -> None:
        """The call's receipt: its fields become the span's ``ctrlrun.*`` attributes."""
        document = receipt.document
        with self._lock:
            span = self._open.get(str(document.get("action_id")))
        if span is None:
            return
        for field, name in _RECEIPT_FIELDS:
            value = document.get(field)
            if value is not None:
                span.set_attribute(name, value)
        if document.get("result") in ERROR_RESULTS:
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(document.get("error"))))

    def close(self, action_id: str) -> None:
        """Forget ``action_id``'s span (its call ended)."""
        with self._lock:
            self._open.pop(action_id, None)


class _Trace:
    def __init__(self, owner: OTelTracer, action_id: str, span: Any, token: Any) -> None:
        self.owner, self.action_id, self.span, self.token = owner, action_id, span, token

    def end(self, error: BaseException | None) -> None:
        if isinstance(error, ApprovalRequired):  # no receipt yet: the request says it all
            self._waiting(error)
        if isinstance(error, Refused):
            self.span.set_attribute("ctrlrun.refusal", str(error.reason))
            self.span.set_attribute("error.type", type(error).__name__)
        elif error is not None:
            self.span.set_attribute("error.type", type(error).__name__)
        otel_context.detach(self.token)
        self.owner.close(self.action_id)
        self.span.end()

    def _waiting(self, needed: ApprovalRequired) -> None:
        """A call that waits for a person: the decision, the rule, the effect key and the
        request a person answers, as a receipt's fields would be."""
        facts = (
            ("ctrlrun.decision", "approve"),
            ("ctrlrun.decision_reason", needed.rule),
            ("ctrlrun.effect_key", needed.effect_key),
            ("ctrlrun.approval_id", needed.request_id),
        )
        for name, value in facts:
            if value is not None:
                self.span.set_attribute(name, value)
