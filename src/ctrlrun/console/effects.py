"""Effects: the AMBIGUOUS ones and those stuck in progress first, each with its history, and
a resolve behind a confirmation page that restates what the verdict will cause."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ctrlrun._time import utc_now
from ctrlrun.console.auth import Gate
from ctrlrun.console.render import page
from ctrlrun.errors import CtrlrunError
from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.kernel.policy import Policy
from ctrlrun.runtime.request_facts import effect_facts

CONSEQUENCE = {
    "committed": "the action is recorded as having happened: any retry of it stays refused as a"
    " duplicate and it will not run again",
    "failed": "the action is recorded as not having happened: the next identical call runs it"
    " again, as a new attempt. If it did happen, it will happen twice",
}


def needs_a_person(record: EffectRecord, now: Any) -> bool:
    """AMBIGUOUS, or reserved/executing with a lapsed lease (stuck in progress)."""
    return record.state is EffectState.AMBIGUOUS or record.lease_expired(now)


def routes(store: Any, gate: Gate, policy: Policy | None = None) -> list[Route]:
    """The effects pages over ``store`` (arguments shown as ``policy`` says, when given)."""

    async def listing(request: Request) -> Response:
        records = await run_in_threadpool(store.list_effects)
        now = utc_now()
        urgent = [r for r in records if needs_a_person(r, now)]
        rest = [r for r in records if not needs_a_person(r, now)]
        return page(request, "effects.html", urgent=urgent, rest=rest, now=now)

    async def detail(request: Request) -> Response:
        key = request.query_params.get("key", "")
        record = await run_in_threadpool(store.get_effect, key)
        if record is None:
            return page(request, "refused.html", 404, message=f"no effect {key}")
        events = await run_in_threadpool(store.events)
        history = [e for e in events if e.effect_key == key]
        facts = await run_in_threadpool(effect_facts, store, record, policy)
        return page(
            request, "effect.html", record=record, history=history, facts=facts, now=utc_now()
        )

    async def resolve(request: Request) -> Response:
        person, form = await gate.checked_form(request)
        key, outcome = str(form.get("key", "")), str(form.get("outcome", ""))
        reason = str(form.get("reason", "")).strip() or None
        if outcome not in CONSEQUENCE:
            return page(request, "refused.html", 400, message="outcome is committed or failed")
        if form.get("confirmed") != "yes":
            return page(
                request,
                "confirm.html",
                key=key,
                outcome=outcome,
                consequence=CONSEQUENCE[outcome],
                reason=reason or "",
            )
        target = EffectState(outcome)
        try:
            await run_in_threadpool(
                lambda: store.resolve_effect(key, target, person.name, reason=reason)
            )
        except CtrlrunError as exc:
            return page(request, "refused.html", 409, message=exc.message)
        return RedirectResponse(request.url_for("effect").include_query_params(key=key), 303)

    return [
        Route("/effects", listing),
        Route("/effect", detail, name="effect"),
        Route("/effect/resolve", resolve, methods=["POST"]),
    ]
