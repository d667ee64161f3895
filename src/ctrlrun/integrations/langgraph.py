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
* returns any other refusal as a ``ToolMessage`` (``status="error"``, the ``for_model()`` text,
  and the tool's ``name``, like a result), and an executor error as one saying whether a retry
  is safe;
* brakes a model that keeps making one refused call: the ``max_refusals``-th identical refused
  call (same tool, same arguments) since the user's last message is answered with a final
  text (``RefusalLoop.for_model()``) and, under ``create_agent``, the run ends there (the
  middleware's ``before_model`` jumps to the end instead of asking the model again). Counted
  from the graph's own messages (each refusal's ``artifact`` carries the call's fingerprint),
  so it holds across checkpoints and processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import ctrlrun
from ctrlrun._time import encode_instant
from ctrlrun.errors import MissingDependency, NotExecuted
from ctrlrun.integrations.brake import DEFAULT_REFUSALS, call_fingerprint, check_limit, loop_error

try:
    from langchain.agents.middleware import AgentMiddleware, hook_config
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

    def __init__(self, principal: PrincipalFor, *, max_refusals: int = DEFAULT_REFUSALS) -> None:
        super().__init__()
        self.principal = principal
        self.max_refusals = check_limit(max_refusals)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """End the run when the tools just answered with the refusal brake's final text."""
        return {"jump_to": "end"} if _braked(state) else None

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """``before_model`` for async graphs."""
        return self.before_model(state, runtime)

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
        call = request.tool_call
        if isinstance(exc, ctrlrun.ApprovalRequired):
            interrupt(pause_payload(exc, request))  # raises until resumed; then it was not granted
            return self._refused(request, NOT_GRANTED)
        if isinstance(exc, ctrlrun.Refused):
            return self._refused(request, exc.for_model())
        if isinstance(exc, NotExecuted):
            text = f"The tool failed and did nothing ({exc}); you may try again."
            return ToolMessage(text, tool_call_id=call["id"], name=call["name"], status="error")
        if not isinstance(exc, Exception):
            raise exc  # cancellation and the like: the outcome is recorded; let it go on
        text = (
            f"The outcome of this call is unknown ({type(exc).__name__}); it was recorded and"
            " will be checked. Do not retry it."
        )
        return ToolMessage(text, tool_call_id=call["id"], name=call["name"], status="error")

    def _refused(self, request: ToolCallRequest, text: str) -> ToolMessage:
        """The refusal's ToolMessage, named; the brake's final text instead when this is the
        ``max_refusals``-th identical refused call since the user's last message."""
        call = request.tool_call
        fingerprint = call_fingerprint(call["name"], call.get("args") or {})
        seen = 1 + _refusals_of(_messages(request.state), fingerprint)
        artifact: dict[str, Any] = {REFUSED: fingerprint}
        if seen >= self.max_refusals:
            text = loop_error(call["name"], seen, text).for_model()
            artifact[BRAKED] = True
        return ToolMessage(
            text, tool_call_id=call["id"], name=call["name"], status="error", artifact=artifact
        )


REFUSED = "ctrlrun_refused"  # a refusal ToolMessage's artifact: the call's fingerprint
BRAKED = "ctrlrun_braked"  # set on the brake's final text


def _messages(state: Any) -> list[Any]:
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", ())
    return list(messages or ())


def _this_run(messages: list[Any]) -> list[Any]:
    """The messages since the user's last message (this run of the agent)."""
    for index in range(len(messages) - 1, -1, -1):
        if getattr(messages[index], "type", None) == "human":
            return messages[index + 1 :]
    return messages


def _refusals_of(messages: list[Any], fingerprint: str) -> int:
    return sum(
        1
        for m in _this_run(messages)
        if isinstance(m, ToolMessage)
        and isinstance(m.artifact, dict)
        and m.artifact.get(REFUSED) == fingerprint
    )


def _braked(state: Any) -> bool:
    """Did the tools' last answers include the brake's final text?"""
    answered = []
    for message in reversed(_messages(state)):
        if not isinstance(message, ToolMessage):
            break
        answered.append(message)
    return any(isinstance(m.artifact, dict) and m.artifact.get(BRAKED) for m in answered)


def pause_payload(needed: ctrlrun.ApprovalRequired, request: ToolCallRequest) -> dict[str, Any]:
    """What the interrupt shows a person: the request and the exact call."""
    return {
        "ctrlrun_request_id": needed.request_id,
        "action": request.tool_call["name"],
        "arguments": request.tool_call["args"],
        "action_hash": needed.action_hash,
        "expires_at": encode_instant(needed.expires_at) if needed.expires_at else None,
        "summary": needed.summary,
    }
