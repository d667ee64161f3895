"""The one way a call becomes an ``Action``.

``@protect`` (sync and async), ``Control.run``/``arun`` and the plan runner all pass through
``build_action`` / ``normalized``, so the same call has the same action hash whichever way it
enters: same name, canonical arguments, principal, and the resource rendered from the explicit
template or, failing that, the policy entry's.
"""

from __future__ import annotations

from typing import Any

from ctrlrun.errors import EffectKeyError, InvalidArgument
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.template import Template


def build_action(
    policy: Policy,
    name: str,
    arguments: dict[str, Any],
    principal: Principal,
    *,
    resource: Template | None = None,
) -> Action:
    """The action for ``name(**arguments)`` by ``principal``. ``resource`` (a template) wins
    over the policy entry's. Raises ``InvalidArgument`` for arguments that cannot be
    canonicalised or a resource template they cannot fill."""
    entry = policy.entry(name)
    template = resource or (entry.resource if entry is not None else None)
    return Action(name, arguments, principal, resource=render_resource(template, arguments))


def normalized(policy: Policy, action: Action) -> Action:
    """``action`` with the policy's resource template applied when it names none (an action
    built by hand gets the resource a protected function would have); otherwise unchanged."""
    if action.resource is not None:
        return action
    entry = policy.entry(action.name)
    if entry is None or entry.resource is None:
        return action
    return Action(
        action.name,
        action.plain_arguments,
        action.principal,
        resource=render_resource(entry.resource, action.plain_arguments),
        environment=action.environment,
        action_id=action.action_id,
    )


def render_resource(template: Template | None, arguments: dict[str, Any]) -> str | None:
    """``template`` filled from ``arguments``; None without a template."""
    if template is None:
        return None
    try:
        return template.render(arguments)
    except EffectKeyError as exc:
        raise InvalidArgument(f"resource: {exc}") from exc
