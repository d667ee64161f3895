"""``@protect``: turn a function into a guarded action.

Each call binds its arguments (defaults applied) into an ``Action`` for the current principal
and runs it through ``Control``; the function itself is the executor and receives the canonical
arguments, never the caller's objects (except parameters excluded from the action, such as
``self`` or an injected client, which it receives as given). An ``async def`` becomes an
``async def`` whose coroutine is awaited inside the guard (``Control.arun``). Templates and
signatures are checked when the decorator is applied, so a typo fails at import time, not at
the first refund.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from ctrlrun._time import check_positive
from ctrlrun.errors import ActionDenied, DenyReason, InvalidArgument
from ctrlrun.kernel.action import Action, Principal, check_action_name
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.template import RESOURCE, Template
from ctrlrun.runtime.call import CallSpec
from ctrlrun.runtime.context import current_principal
from ctrlrun.runtime.control import Control
from ctrlrun.runtime.normalize import build_action
from ctrlrun.runtime.reconcile import Reconcile

log = logging.getLogger("ctrlrun")

P = ParamSpec("P")
R = TypeVar("R")

_default: Control | None = None
_default_lock = threading.Lock()


def default_control() -> Control:
    """The process-wide ``Control``, built on first use by ``Control.from_file()``."""
    global _default  # noqa: PLW0603 - one lazily built default per process, by design
    with _default_lock:
        if _default is None:
            _default = Control.from_file()
        return _default


def set_default_control(control: Control | None) -> None:
    """Replace (or, with None, forget) the process-wide default ``Control``."""
    global _default  # noqa: PLW0603
    with _default_lock:
        _default = control


def protect(
    name: str,
    *,
    effect: str | None = None,
    resource: str | None = None,
    lease: timedelta | None = None,
    reconcile: Reconcile | None = None,
    control: Control | None = None,
    exclude: Iterable[str] = (),
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Protect a function (plain or ``async def``) as action ``name``.

    ``effect`` is the effect-key template (``"refund:{payment_id}"``; the policy's ``effect``
    applies when omitted), ``resource`` a template for the action's resource, ``lease`` how long
    an attempt may hold the key, ``reconcile`` a hook consulted when the key is AMBIGUOUS (it
    may be ``async def`` for an async function), ``control`` the ``Control`` to use (default:
    ``Control.from_file()``, built lazily), and ``exclude`` parameters that are not part of the
    action (a client, a session): passed to the function as given, never hashed nor recorded.
    A first parameter named ``self`` or ``cls`` is excluded automatically.
    Raises ``InvalidArgument`` at decoration for a bad name, template, lease or signature, for
    a generator function, and for an async reconcile hook on a plain function.
    """
    check_action_name(name)
    effect_t = Template.parse(effect) if effect is not None else None
    resource_t = Template.parse(resource) if resource is not None else None
    if resource_t is not None and RESOURCE in resource_t.placeholders:
        raise InvalidArgument(f"resource template {resource!r} cannot refer to {{resource}}")
    if lease is not None:
        check_positive(lease, "lease")

    excluded = _excluded(name, exclude)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        is_async = _check_kind(name, fn, reconcile)
        signature = _check_signature(name, fn, effect_t, resource_t)
        skip = _skipped(name, fn, signature, excluded, effect_t, resource_t)
        bind = _binder(signature)
        own = frozenset(signature.parameters) - skip  # the action's own parameters
        spec = CallSpec(effect=effect_t, lease=lease, reconcile=reconcile)  # the same per call
        # The Control and policy this function was last found to fit: the same pair is not
        # asked again (Control.check_protection's own memo hashes the templates per call,
        # ~3.5k instructions). Replaced whole, so a thread reads a matching pair or a miss.
        fitted: list[tuple[Control, Policy] | None] = [None]

        def prepare(
            args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[Control, Action, Any, Policy]:
            principal = _principal(name)
            arguments = bind(args, kwargs)
            given = {key: arguments.pop(key) for key in skip if key in arguments}
            ctl = control or default_control()
            policy = ctl.refresh_policy()  # an edited policy file applies from this call on
            fit = fitted[0]
            if fit is None or fit[0] is not ctl or fit[1] is not policy:
                ctl.check_protection(name, own, effect=effect_t, resource=resource_t, policy=policy)
                fitted[0] = (ctl, policy)
            action = build_action(policy, name, arguments, principal, resource=resource_t)
            return ctl, action, functools.partial(fn, **given) if given else fn, policy

        if is_async:

            @functools.wraps(fn)
            async def aprotected(*args: Any, **kwargs: Any) -> Any:
                ctl, action, executor, policy = prepare(args, kwargs)
                value, _ = await ctl.arun(action, executor, spec, policy=policy)
                return value

            aprotected.__ctrlrun_action__ = name  # type: ignore[attr-defined]
            aprotected.__ctrlrun_parameters__ = own  # type: ignore[attr-defined]
            aprotected.__ctrlrun_templates__ = (effect_t, resource_t)  # type: ignore[attr-defined]
            return aprotected  # type: ignore[return-value]

        @functools.wraps(fn)
        def protected(*args: P.args, **kwargs: P.kwargs) -> R:
            ctl, action, executor, policy = prepare(args, kwargs)
            value, _ = ctl.run(action, executor, spec, policy=policy)
            return value  # type: ignore[no-any-return]

        protected.__ctrlrun_action__ = name  # type: ignore[attr-defined]
        protected.__ctrlrun_parameters__ = own  # type: ignore[attr-defined]
        protected.__ctrlrun_templates__ = (effect_t, resource_t)  # type: ignore[attr-defined]
        return protected

    return decorate


def _principal(name: str) -> Principal:
    principal = current_principal()
    if principal is not None:
        return principal
    log.warning("ctrlrun: %s called outside ctrlrun.context(...): denied", name)
    hint = "call it inside ctrlrun.context(agent=...)"
    if threading.current_thread() is not threading.main_thread():
        hint += (
            "; this thread did not inherit the caller's context: start it with"
            " asyncio.to_thread(...) or contextvars.copy_context().run(...)"
        )
    raise ActionDenied(f"{name}: no principal ({hint})", reason=DenyReason.NO_PRINCIPAL)


def _check_kind(name: str, fn: Callable[..., Any], reconcile: Reconcile | None) -> bool:
    """True for an ``async def``; refuses generators, whose body runs after the guard."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise InvalidArgument(
            f"{name}: a generator function cannot be protected (its body runs after the call"
            " returns, outside the guard); protect a function that returns the result"
        )
    is_async = inspect.iscoroutinefunction(fn)
    if reconcile is not None and inspect.iscoroutinefunction(reconcile) and not is_async:
        raise InvalidArgument(f"{name}: an async reconcile hook needs an async protected function")
    return is_async


def _excluded(name: str, exclude: Iterable[str]) -> frozenset[str]:
    if isinstance(exclude, str):
        raise InvalidArgument(f"{name}: exclude takes a tuple of names, got the string {exclude!r}")
    return frozenset(exclude)


def _skipped(
    name: str,
    fn: Callable[..., Any],
    signature: inspect.Signature,
    excluded: frozenset[str],
    *templates: Template | None,
) -> frozenset[str]:
    """The parameters left out of the action: ``exclude`` plus a leading ``self``/``cls``."""
    parameters = list(signature.parameters)
    skip = set(excluded)
    if parameters and parameters[0] in ("self", "cls"):
        skip.add(parameters[0])
    for key in sorted(excluded - set(parameters)):
        raise InvalidArgument(
            f"{name}: exclude names {key!r}, not a parameter of {fn.__qualname__}"
        )
    used = {p for t in templates if t is not None for p in t.placeholders}
    for key in sorted(skip & used):
        raise InvalidArgument(
            f"{name}: {key!r} is excluded from the action, so a template cannot name it"
        )
    return frozenset(skip)


def _check_signature(
    name: str, fn: Callable[..., Any], effect: Template | None, resource: Template | None
) -> inspect.Signature:
    signature = inspect.signature(fn)
    parameters = signature.parameters
    for parameter in parameters.values():
        if parameter.kind in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
            parameter.POSITIONAL_ONLY,
        ):
            raise InvalidArgument(
                f"{name}: protected functions take named parameters only"
                f" ({parameter.name!r} is {parameter.kind.description})"
            )
    for template in (t for t in (effect, resource) if t is not None):
        for placeholder in template.placeholders:
            if placeholder == RESOURCE and template is effect:
                continue  # the action's resource, resolved per call
            if placeholder not in parameters:
                raise InvalidArgument(
                    f"{name}: template {template.source!r} names {placeholder!r}, which is not"
                    f" a parameter of {fn.__qualname__}"
                )
    return signature


def _binder(
    signature: inspect.Signature,
) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """``signature.bind`` with defaults applied, as a plain dict; the common shapes (positional
    then keyword, every name known, nothing missing without a default) without building a
    ``BoundArguments``. Anything else goes to ``signature.bind``, which raises its TypeError."""
    parameters = signature.parameters.values()
    positional = tuple(p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD)
    known = frozenset(signature.parameters)
    defaults = tuple((p.name, p.default) for p in parameters if p.default is not p.empty)
    required = len(known) - len(defaults)

    def slow(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        # Every shape the fast path declines is one bind refuses; if that ever changed, the
        # answer is still bind's.
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()  # pragma: no cover - unreachable while the above holds
        return dict(bound.arguments)  # pragma: no cover

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(positional):
            return slow(args, kwargs)
        arguments = dict(zip(positional, args, strict=False))
        for key, value in kwargs.items():
            if key in arguments or key not in known:
                return slow(args, kwargs)
            arguments[key] = value
        if len(arguments) < required:
            return slow(args, kwargs)  # maybe missing a required one: bind says which
        for key, value in defaults:
            if key not in arguments:
                arguments[key] = value
        return arguments if len(arguments) == len(known) else slow(args, kwargs)

    return bind
