"""pydantic-ai: a toolset that runs protected tools as the operator's principal, pauses for a
person with pydantic-ai's own approval flow, and answers every refusal as a final tool result.

``CtrlrunToolset(toolset, principal=lambda ctx: ctrlrun.Principal("support-bot", ctx.deps.user))``
wraps any toolset whose tools are ``@ctrlrun.protect``-ed functions (sync or async): enforcement
stays in them. Around each call the wrapper

* sets the principal from ``principal(ctx)``, an operator-supplied callable (never from the
  model's output);
* turns ``ctrlrun.ApprovalRequired`` into ``pydantic_ai.ApprovalRequired`` (metadata: request
  id, action hash, expiry, summary), so the run ends with ``DeferredToolRequests``. A person
  grants the request through ctrlrun (``control.approvals.grant`` or ``ctrlrun approve``), and
  the app resumes with ``DeferredToolResults(approvals={call_id: True})``: the identical call
  then finds the grant and runs once. pydantic-ai's own yes is not a ctrlrun approval: a resumed
  call that ctrlrun still holds for a person (no grant, or arguments an approver edited with
  ``ToolApproved(override_args=…)``) is answered with a denial, never run and never a crash;
* returns any other refusal as the tool's result (``for_model()`` text; a person's denial
  carries their reason), which pydantic-ai does not retry, and an executor error as a result
  saying whether a retry is safe (FAILED) or not (AMBIGUOUS: ctrlrun refuses the retry anyway);
* brakes a model that repeats a refused call: the ``max_refusals``-th identical refused call
  (same tool, same arguments) in one run (told apart by the run's usage object) raises
  ``ctrlrun.RefusalLoop`` out of ``agent.run`` instead of answering.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ctrlrun
from ctrlrun._time import encode_instant
from ctrlrun.errors import MissingDependency, NotExecuted
from ctrlrun.integrations.brake import DEFAULT_REFUSALS, RefusalBrake

try:
    from pydantic_ai import ApprovalRequired as PydanticApprovalRequired
    from pydantic_ai import RunContext
    from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as exc:  # pragma: no cover - the extra is installed in the dev env
    raise MissingDependency(module="pydantic-ai-slim", extra="pydantic-ai") from exc

PrincipalFor = Callable[[RunContext[Any]], ctrlrun.Principal]

EDITED = (
    "Denied: this call was not approved as it stands (a person approved other arguments, or"
    " nothing was approved in ctrlrun). Do not retry it; tell the user."
)


@dataclass
class CtrlrunToolset(WrapperToolset[Any]):
    """``wrapped``'s tools, called as ``principal(ctx)`` under ctrlrun's answers."""

    principal: PrincipalFor | None = None
    max_refusals: int = DEFAULT_REFUSALS
    brake: RefusalBrake = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.brake = RefusalBrake(self.max_refusals)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if self.principal is None:
            raise ctrlrun.InvalidArgument("CtrlrunToolset needs principal=callable(ctx)")
        who = self.principal(ctx)
        try:
            with ctrlrun.context(who.agent, who.user):
                return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except ctrlrun.ApprovalRequired as needed:
            if ctx.tool_call_approved:
                return self._refused(ctx, name, tool_args, EDITED)
            raise PydanticApprovalRequired(metadata=_metadata(needed)) from needed
        except ctrlrun.Refused as refused:
            return self._refused(ctx, name, tool_args, refused.for_model())
        except NotExecuted as failed:
            return f"The tool failed and did nothing ({failed}); you may try again."
        except Exception as error:  # the executor's own: its outcome is recorded AMBIGUOUS
            if type(error).__module__.startswith("pydantic_ai"):
                raise  # the framework's own signals (ModelRetry, …) are its to handle
            return (
                f"The outcome of this call is unknown ({type(error).__name__}); it was recorded"
                " and will be checked. Do not retry it."
            )

    def _refused(self, ctx: RunContext[Any], name: str, args: dict[str, Any], text: str) -> str:
        """``text``, counted by the brake for this run (``RefusalLoop`` at the limit)."""
        self.brake.refused(ctx.usage, name, args, text)
        return text


def _metadata(needed: ctrlrun.ApprovalRequired) -> dict[str, Any]:
    return {
        "ctrlrun_request_id": needed.request_id,
        "action_hash": needed.action_hash,
        "expires_at": encode_instant(needed.expires_at) if needed.expires_at else None,
        "summary": needed.summary,
    }


def guard(toolset: AbstractToolset[Any], principal: PrincipalFor) -> CtrlrunToolset:
    """``toolset`` guarded: ``CtrlrunToolset(toolset, principal=principal)``."""
    return CtrlrunToolset(toolset, principal=principal)
