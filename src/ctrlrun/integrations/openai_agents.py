"""The OpenAI Agents SDK: a function tool whose approval pause is ctrlrun's request, and whose
every refusal is a final tool result the model reads.

``guarded_tool(refund, control=control, principal=lambda ctx: ctrlrun.Principal(...))`` takes an
``@ctrlrun.protect``-ed function (sync or async) and returns a ``FunctionTool`` (public SDK API
only: ``function_tool`` and ``dataclasses.replace``). Enforcement stays in the function:

* ``needs_approval`` asks the policy (``control.evaluate``, arguments with the function's
  defaults applied, as the call will have them): ``approve`` with no usable grant pauses the
  run (unless the effect key already committed, is in progress or is AMBIGUOUS: then nobody
  is asked and the call answers the refusal, ``AlreadyCommitted`` with the stored result),
  and the pause makes the hash-bound request (``control.request_approval``), the same one
  every identical call shares. A person grants it through ctrlrun, the app approves the SDK's
  interruption (``state.approve(item)``) and resumes; the identical call finds the grant and runs
  once.
* ctrlrun re-checks the hash whatever the SDK's approval state says: an "always approve", a
  forged run state or arguments changed on the way are refused, answered with a denial.
* The principal comes from ``principal(ctx)``, the operator's callable over the run context,
  never from the model's output. Refusals are results (``for_model()`` text), not errors the
  SDK's error function would hide or a retry would repeat; a person's denial carries their
  reason, and a standing denial is not asked about again.
* A model that repeats a refused call is braked: the ``max_refusals``-th identical refused call
  (same tool, same arguments) in one run (one ``Runner.run``, told apart by the run's usage
  object) raises ``ctrlrun.RefusalLoop`` out of ``Runner.run`` instead of answering.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Callable
from typing import Any

import ctrlrun
from ctrlrun.errors import CtrlrunError, MissingDependency, NotExecuted
from ctrlrun.integrations.brake import DEFAULT_REFUSALS, RefusalBrake
from ctrlrun.kernel.approval import ApprovalStatus
from ctrlrun.kernel.policy import Decision

try:
    from agents import FunctionTool, RunContextWrapper, function_tool
    from agents.exceptions import AgentsException
except ImportError as exc:  # pragma: no cover - the extra is installed in the dev env
    raise MissingDependency(module="openai-agents", extra="openai-agents") from exc

PrincipalFor = Callable[[RunContextWrapper[Any]], ctrlrun.Principal]

NOT_GRANTED = (
    "Denied: this exact call was not approved in ctrlrun (nothing granted, or its arguments"
    " differ from what was approved). Do not retry it; tell the user."
)


def guarded_tool(
    fn: Callable[..., Any],
    *,
    control: ctrlrun.Control,
    principal: PrincipalFor,
    name: str | None = None,
    description: str | None = None,
    max_refusals: int = DEFAULT_REFUSALS,
) -> FunctionTool:
    """``fn`` (protected with ``@ctrlrun.protect``) as an Agents SDK tool under ``control``.
    The ``max_refusals``-th identical refused call in one run raises ``ctrlrun.RefusalLoop``,
    which ends the run (``Runner.run`` raises it)."""
    action = getattr(fn, "__ctrlrun_action__", None)
    if action is None:
        raise ctrlrun.InvalidArgument("guarded_tool takes a function protected with @protect")
    arguments_of = _binder(fn)
    brake = RefusalBrake(max_refusals, kind=RunBraked)

    async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], _: str) -> bool:
        who = principal(ctx)

        def decide() -> bool:
            answer = control.evaluate(action, arguments_of(params), who)
            if answer.decision is not Decision.APPROVE or answer.approved or answer.refusal:
                return False  # decided (and enforced) inside the call: nobody is asked
            if answer.approval and answer.approval.status is ApprovalStatus.DENIED:
                return False  # a person said no to exactly this: the call says so, and why
            control.request_approval(answer.action)
            return True

        try:
            return await asyncio.to_thread(decide)
        except CtrlrunError:
            return False  # bad arguments: the call itself refuses them, with a receipt

    base = function_tool(
        fn,
        name_override=name,
        description_override=description,
        failure_error_function=None,
        needs_approval=needs_approval,
    )

    async def invoke(ctx: Any, input_json: str) -> Any:
        who = principal(ctx)
        try:
            with ctrlrun.context(who.agent, who.user):
                return await base.on_invoke_tool(ctx, input_json)
        except Exception as exc:
            cause = _cause(exc)
            text = answer_for(cause)
            if isinstance(cause, ctrlrun.Refused):  # the tool did not run: count it
                brake.refused(getattr(ctx, "usage", ctx), base.name, _parsed(input_json), text)
            return text

    return dataclasses.replace(base, on_invoke_tool=invoke)


class RunBraked(ctrlrun.RefusalLoop, AgentsException):
    """``ctrlrun.RefusalLoop`` as the SDK lets it through: the SDK wraps a tool's other
    exceptions in its own ``UserError``, but re-raises its own kind as it is."""


def answer_for(error: BaseException) -> str:
    """The tool result a model reads for ``error``."""
    if isinstance(error, ctrlrun.ApprovalRequired):
        return NOT_GRANTED
    if isinstance(error, ctrlrun.Refused):
        return error.for_model()
    if isinstance(error, NotExecuted):
        return f"The tool failed and did nothing ({error}); you may try again."
    return (
        f"The outcome of this call is unknown ({type(error).__name__}); it was recorded and will"
        " be checked. Do not retry it."
    )


def _parsed(input_json: str) -> dict[str, Any]:
    try:
        value = json.loads(input_json or "{}")
    except ValueError:
        return {"raw": input_json}
    return value if isinstance(value, dict) else {"value": value}


def _cause(error: BaseException) -> BaseException:
    """The SDK's ``UserError`` carries the tool's own exception as its cause."""
    seen = error
    while not isinstance(seen, CtrlrunError) and seen.__cause__ is not None:
        seen = seen.__cause__
    return seen if isinstance(seen, CtrlrunError) else (error.__cause__ or error)


def _binder(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The model's raw arguments as the protected call will see them: defaults applied, the
    excluded parameters left out."""
    signature = inspect.signature(fn)
    own = getattr(fn, "__ctrlrun_parameters__", frozenset(signature.parameters))

    def bind(params: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = signature.bind_partial(**params)
        except TypeError as exc:
            raise ctrlrun.InvalidArgument(str(exc)) from exc
        bound.apply_defaults()
        return {k: v for k, v in bound.arguments.items() if k in own}

    return bind
