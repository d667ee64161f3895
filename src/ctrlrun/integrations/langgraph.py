"""LangGraph / LangChain: a tool-call middleware that runs protected tools as the operator's
principal, pauses the graph for a person with ``interrupt()``, and answers every refusal as a
final ``ToolMessage``.

``create_agent(model, tools, middleware=[…, CtrlrunMiddleware(principal=…)], checkpointer=…)``
(put it last: the first middleware is outermost, and a retry middleware outside it then never
sees a refusal as an exception). For a bare ``ToolNode``, pass ``wrap_tool_call=guard.wrap`` and
``awrap_tool_call=guard.awrap``. The tools themselves are ``@ctrlrun.protect``-ed functions:
enforcement stays in them. Around each call the middleware

* sets the principal from ``principal(request)``, an operator-supplied callable (from the
  runtime's context, never from graph state the model writes);
* on ``ctrlrun.ApprovalRequired``, calls ``interrupt()`` (outside the protected function: an
  interrupt inside it would make the effect AMBIGUOUS) with the request id, action, arguments,
  hash, expiry and summary. A person grants it through ctrlrun; the graph resumes with
  ``Command(resume=…)``, the node re-runs, and the identical call finds the grant and runs once
  (the re-run makes no second request: identical calls share one). If ctrlrun still holds it
  for a person (nothing granted), the resumed call is answered with a denial, never run;
* returns any other refusal as a ``ToolMessage`` (``status="error"``, the ``for_model()`` text),
  and an executor error as one saying whether a retry is safe.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import ctrlrun
from ctrlrun._time import encode_instant
from ctrlrun.errors import MissingDependency, NotExecuted

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import ToolMessage
    from langgraph.errors import GraphBubbleUp
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import interrupt
except ImportError as exc:  # pragma: no cover - the extra is installed in the dev env
    raise MissingDependency(module="langgraph", extra="langgraph") from exc

PrincipalFor = Callable[[ToolCallRequest], ctrlrun.Principal]
Handler = Callable[[ToolCallRequest], Any]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[Any]]

NOT_GRANTED = (
    "Denied: the graph was resumed, but no one approved this exact call in ctrlrun. Do not"
    " retry it; tell the user."
)


class CtrlrunMiddleware(AgentMiddleware):
    """The tool-call guard of a LangChain agent (``wrap_tool_call``/``awrap_tool_call``)."""

    def __init__(self, principal: PrincipalFor) -> None:
        super().__init__()
        self.principal = principal

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> Any:
        """Run the tool call under ctrlrun (see the module)."""
        who = self.principal(request)
        try:
            with ctrlrun.context(who.agent, who.user):
                return handler(request)
        except (GraphBubbleUp, KeyboardInterrupt):
            raise
        except BaseException as exc:
            return self._answer(request, exc)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncHandler) -> Any:
        """``wrap_tool_call`` for async graphs."""
        who = self.principal(request)
        try:
            with ctrlrun.context(who.agent, who.user):
                return await handler(request)
        except (GraphBubbleUp, KeyboardInterrupt):
            raise
        except BaseException as exc:
            return self._answer(request, exc)

    wrap = wrap_tool_call
    awrap = awrap_tool_call

    def _answer(self, request: ToolCallRequest, exc: BaseException) -> ToolMessage:
        call_id = request.tool_call["id"]
        if isinstance(exc, ctrlrun.ApprovalRequired):
            interrupt(pause_payload(exc, request))  # raises until resumed; then it was not granted
            return ToolMessage(NOT_GRANTED, tool_call_id=call_id, status="error")
        if isinstance(exc, ctrlrun.Refused):
            return ToolMessage(exc.for_model(), tool_call_id=call_id, status="error")
        if isinstance(exc, NotExecuted):
            text = f"The tool failed and did nothing ({exc}); you may try again."
            return ToolMessage(text, tool_call_id=call_id, status="error")
        if not isinstance(exc, Exception):
            raise exc  # cancellation and the like: the outcome is recorded; let it go on
        text = (
            f"The outcome of this call is unknown ({type(exc).__name__}); it was recorded and"
            " will be checked. Do not retry it."
        )
        return ToolMessage(text, tool_call_id=call_id, status="error")


def pause_payload(needed: ctrlrun.ApprovalRequired, request: ToolCallRequest) -> dict[str, Any]:
    """What the interrupt shows a person: the request and the exact call. ``action`` is the
    ctrlrun action (``stripe.refund``, what ``ctrlrun approvals`` lists and the policy names);
    ``tool`` the name the model called it by."""
    return {
        "ctrlrun_request_id": needed.request_id,
        "action": needed.action or request.tool_call["name"],
        "tool": request.tool_call["name"],
        "arguments": request.tool_call["args"],
        "action_hash": needed.action_hash,
        "expires_at": encode_instant(needed.expires_at) if needed.expires_at else None,
        "summary": needed.summary,
    }
