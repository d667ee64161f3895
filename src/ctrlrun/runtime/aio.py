"""The async driver of a protected call: the pipeline's steps (``runtime.pipeline``: ``begin``,
the executor, ``finish``), with awaits only around them.

Store work (decide, reserve, record) runs on the Control's own pool of store threads
(``Control(async_workers=N)``, not anyio's shared default), so the event loop never waits on
SQLite or Postgres and the store code exists once. The executor is awaited
on the loop when it is async, and runs on anyio's default worker threads when it is a plain
function. The outcome table is the sync one: a return is COMMITTED, ``NotExecuted`` FAILED,
anything else (a timeout and a cancellation included) AMBIGUOUS. A cancellation that arrives
after the reservation but before the executor was entered records FAILED: the executor
provably never ran. Outcome writes are shielded from cancellation, which then propagates.

anyio is imported here, on the first async call, never by ``import ctrlrun``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel
from anyio import CancelScope, from_thread, to_thread

from ctrlrun.errors import NotExecuted
from ctrlrun.kernel.effect import EffectState
from ctrlrun.runtime.context import hold, release
from ctrlrun.runtime.pipeline import begin, finish

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import ThreadPoolExecutor

    from ctrlrun.kernel.action import Action
    from ctrlrun.kernel.policy import Policy
    from ctrlrun.kernel.receipt import Receipt
    from ctrlrun.runtime.call import CallSpec
    from ctrlrun.runtime.control import Control
    from ctrlrun.runtime.pipeline import InFlight

T = TypeVar("T")


async def run_async(
    control: Control,
    action: Action,
    executor: Callable[..., Any],
    spec: CallSpec,
    policy: Policy | None = None,
) -> tuple[Any, Receipt]:
    """``control.run`` for async callers; see the module docstring for the contract."""
    hooks = _blocking_hooks(spec, anyio.lowlevel.current_token())
    pool = control._store_threads()
    try:
        call = await _offload(pool, begin, control, action, hooks, policy)
        await anyio.lowlevel.checkpoint()
    except _Interrupted as stop:  # cancelled while reserving: the executor never ran
        if stop.done:
            call = stop.value
            await _record(pool, call, EffectState.FAILED, None, stop.cause)
        raise stop.cause from None
    except anyio.get_cancelled_exc_class() as exc:  # cancelled at the checkpoint: likewise
        await _record(pool, call, EffectState.FAILED, None, exc)
        raise
    reservation = call.started.reservation
    token = hold(call.effect_key, reservation.attempt if reservation is not None else None)
    try:
        try:
            value = await _invoke(executor, call.action.canonical_arguments)
        finally:
            release(token)
    except NotExecuted as exc:
        await _record(pool, call, EffectState.FAILED, None, exc)
        raise
    except BaseException as exc:
        await _record(pool, call, EffectState.AMBIGUOUS, None, exc)
        raise
    return value, await _record(pool, call, EffectState.COMMITTED, value, None)


async def _invoke(executor: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(executor):
        value = executor(**arguments)
    else:  # a plain function must not block the loop: anyio's worker threads
        value = await to_thread.run_sync(functools.partial(executor, **arguments))
    if inspect.isawaitable(value):
        value = await value
    return value


async def _record(
    pool: ThreadPoolExecutor,
    call: InFlight,
    outcome: EffectState,
    value: Any,
    exc: BaseException | None,
) -> Receipt:
    """The outcome write (the second transaction: ``pipeline.finish``). It always completes;
    a cancellation that arrived meanwhile is raised after it."""
    try:
        return await _offload(pool, finish, call, outcome, value, exc)
    except _Interrupted as stop:
        raise stop.cause from None


class _Interrupted(Exception):
    """The caller was cancelled while store work ran; the work finished anyway. ``done``: it
    returned ``value`` (else it raised, and the cancellation wins)."""

    def __init__(self, cause: BaseException, done: bool, value: Any) -> None:
        super().__init__("cancelled during store work")
        self.cause, self.done, self.value = cause, done, value


async def _offload(pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on one of the Control's own store threads (``pool``), awaited to the end
    whatever cancels the caller (an anyio scope, ``task.cancel()``, a timeout): the work is
    handed to the thread before the first await, so a write is never skipped nor left unobserved.
    Raises ``_Interrupted`` if the caller was cancelled meanwhile, else what ``fn`` raised."""
    token = anyio.lowlevel.current_token()
    finished = anyio.Event()
    box: list[tuple[bool, Any]] = []

    def work() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as exc:
            box.append((False, exc))
        finally:
            with contextlib.suppress(anyio.RunFinishedError):  # the loop is gone: nobody waits
                from_thread.run_sync(finished.set, token=token)

    pool.submit(contextvars.copy_context().run, work)
    cancelled = anyio.get_cancelled_exc_class()
    cause: BaseException | None = None
    while not finished.is_set():
        try:
            with CancelScope(shield=True):
                await finished.wait()
        except cancelled as exc:  # a native task.cancel() reaches through the shield
            cause = cause or exc
    ok, value = box[0]
    if cause is not None:
        raise _Interrupted(cause, ok, value)
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _blocking_hooks(spec: CallSpec, token: anyio.lowlevel.EventLoopToken) -> CallSpec:
    """An ``async def`` reconcile hook, callable from the worker thread that reserves: it runs
    back on the event loop (``from_thread.run``) while that thread waits for its answer."""
    hook = spec.reconcile
    if hook is None or not inspect.iscoroutinefunction(hook):
        return spec

    @functools.wraps(hook)
    def blocking(effect_key: str, **extras: Any) -> Any:
        return from_thread.run(functools.partial(hook, effect_key, **extras), token=token)

    return replace(spec, reconcile=blocking)
