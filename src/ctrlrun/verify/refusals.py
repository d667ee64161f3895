"""G6 and G7: there is no default-allow — an action the policy does not name is denied, and
a protected call with no principal is denied before anything is recorded."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

from ctrlrun.canonical import sha256_hex
from ctrlrun.errors import ActionDenied, ApprovalRequired, DenyReason
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.event import EventType
from ctrlrun.runtime.context import context, with_approval
from ctrlrun.runtime.protect import protect

from .lab import APPROVER, Lab, NotApplicable, Passed, Remote, nothing_admitted
from .synthesis import AGENT, PREFIX, PRINCIPAL, Vector


def _unknown_name(lab: Lab) -> str:
    digest = sha256_hex(lab.policy.policy_hash.encode())[7:15]
    name = f"{PREFIX}.absent_{digest}"
    while name in lab.policy.actions:
        name += "_x"
    return name


def unknown_action_denied(lab: Lab) -> Passed:
    """G6. An action name the policy does not list (``ctrlrun-verify.absent_<hash>``, with the
    arguments of an admitted action) is denied ``ActionDenied(reason=unknown_action)``: executor
    0 calls, a ``denied`` receipt, an ``ACTION_DENIED`` event. Control: the admitted action
    with the same arguments and executor runs."""
    picked = lab.pick(lambda t: True)
    if picked is None:
        raise NotApplicable(nothing_admitted(lab.policy))
    vector = picked[1]
    control, remote = lab.control(), Remote()
    name = _unknown_name(lab)
    unknown = Action(name, dict(vector.arguments), PRINCIPAL, resource=vector.resource)
    lab.expect(
        f"call {name}",
        partial(control.execute, unknown, remote),
        ActionDenied,
        reason=DenyReason.UNKNOWN_ACTION,
    )
    lab.check(remote.calls == 0, f"the executor ran {remote.calls} times for an unknown action")
    receipts = lab.store.receipts(unknown.action_id)
    lab.check(
        [(r.document["result"], r.document["decision_reason"]) for r in receipts]
        == [("denied", "unknown_action")],
        f"the unknown action's receipts: {[r.document for r in receipts]}",
    )
    kinds = [e.type for e in lab.store.events(unknown.action_id)]
    lab.check(EventType.ACTION_DENIED in kinds, f"no ACTION_DENIED event: {kinds}")
    lab.control_ok("the listed action", partial(lab.present, control, vector, remote))
    lab.check(remote.calls == 1, f"control: the listed action ran {remote.calls} times")
    return Passed(
        lab.action,
        f"{name} denied (unknown_action), executor 0 calls, denied receipt; control: listed"
        " action ran",
    )


def _protected(lab: Lab, vector: Vector, remote: Remote) -> Callable[..., Any]:
    """A real ``@protect``-decorated fake whose signature is the vector's argument names."""

    def body(**arguments: Any) -> Any:
        return remote(**arguments)

    parameters = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in vector.arguments]
    body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    entry = vector.target.entry
    literal = vector.resource if entry.resource is None and vector.resource else None
    return protect(entry.name, resource=literal, control=lab.control())(body)


def no_principal_denied(lab: Lab) -> Passed:
    """G7. A real ``@protect``-decorated function called outside ``ctrlrun.context`` is
    denied ``ActionDenied(reason=no_principal)``: executor 0 calls, and nothing recorded (no
    receipt, no event). Control: the identical call inside ``context(...)`` runs (approving
    it first when its rule says approve)."""
    picked = lab.pick(lambda t: True, fits=lambda v: all(n.isidentifier() for n in v.arguments))
    if picked is None:
        if lab.pick(lambda t: True) is None:
            raise NotApplicable(nothing_admitted(lab.policy))
        raise NotApplicable("no admitted action's argument names are Python identifiers")
    vector = picked[1]
    remote = Remote()
    fn = _protected(lab, vector, remote)
    arguments = dict(vector.arguments)
    lab.expect(
        "call outside any context",
        partial(fn, **arguments),
        ActionDenied,
        reason=DenyReason.NO_PRINCIPAL,
    )
    lab.check(remote.calls == 0, f"the executor ran {remote.calls} times without a principal")
    lab.check(not lab.store.receipts(), "a call without a principal left a receipt")
    lab.check(not lab.store.events(), "a call without a principal left an event")
    lab.control_ok("the same call inside context()", partial(_inside_context, lab, fn, arguments))
    lab.check(remote.calls == 1, f"control: the call in context ran {remote.calls} times")
    return Passed(
        lab.action,
        "denied (no_principal) outside context, executor 0 calls, no receipt or event;"
        " control: ran inside context",
    )


def _inside_context(lab: Lab, fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    with context(agent=AGENT, user=PRINCIPAL.user):
        try:
            return fn(**arguments)
        except ApprovalRequired as required:
            lab.store.grant_approval(required.request_id, APPROVER)
            with with_approval(required.request_id):
                return fn(**arguments)
