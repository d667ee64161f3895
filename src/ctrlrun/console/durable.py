"""Plans, parked outbox messages and operations whose start is unknown: the durable work that
waits for a person.

A plan is shown whole (every step's arguments, escaped, and the hash an approval binds to) and
approved or rejected as the signed-in person; the approval posts back the hash the person saw
and is refused unless the stored plan still hashes to it. An outbox message parked AMBIGUOUS
(its delivery outcome unknown) or DEAD (out of attempts) is settled behind a confirmation
that restates what the verdict will cause. An operation whose start's outcome is unknown is
reconciled as found (under the remote id the person looked up) or never started, likewise
behind a confirmation; it is never started again from here.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ctrlrun.console.auth import Gate
from ctrlrun.console.render import done_notice, page
from ctrlrun.errors import CtrlrunError

PARKED: Final = ("ambiguous", "dead")
SETTLE: Final = {
    "sent": "the message is recorded as delivered: it is never sent again",
    "failed": "the message is recorded as not delivered, and it is never sent",
    "pending": "the message is sent again by the next worker: if it was delivered, it will be"
    " delivered twice (receivers that deduplicate on its token will drop the second)",
}


RECONCILE: Final = {
    True: "the operation is recorded as started under that remote id and is polled from now on;"
    " it is never started again",
    False: "the operation is recorded as never started (FAILED): nothing polls it, and a new"
    " operation must be submitted to do the work",
}


def routes(store: Any, gate: Gate) -> list[Route]:
    """The plans and outbox pages over ``store``."""
    from ctrlrun.durable import Operations, Outbox, Plans

    plans, outbox, operations = Plans(store), Outbox(store), Operations(store)

    async def listing(request: Request) -> Response:
        pending = await run_in_threadpool(plans.list, "pending", heal=False)
        parked = [m for status in PARKED for m in await run_in_threadpool(outbox.list, status)]
        flagged = [o for o in await run_in_threadpool(operations.list) if o.reconcile]
        done = done_notice(request)
        return page(
            request, "durable.html", plans=pending, parked=parked, flagged=flagged, done=done
        )

    async def answer_plan(request: Request) -> Response:
        person, form = await gate.checked_form(request)
        plan_id, verb = request.path_params["plan_id"], request.path_params["verb"]
        shown = str(form.get("plan_hash", ""))
        try:
            if verb == "approve":
                await run_in_threadpool(
                    lambda: plans.approve(plan_id, plan_hash=shown, approver=person.name)
                )
            elif verb == "reject":
                await run_in_threadpool(
                    lambda: plans.reject(plan_id, plan_hash=shown, approver=person.name)
                )
            else:
                return page(request, "refused.html", 404, message=f"no such answer {verb}")
        except CtrlrunError as exc:
            return page(request, "refused.html", 409, message=exc.message)
        return RedirectResponse(f"/durable?done={verb}d+{plan_id}", status_code=303)

    async def settle(request: Request) -> Response:
        person, form = await gate.checked_form(request)
        message_id, verdict = str(form.get("message_id", "")), str(form.get("verdict", ""))
        if verdict not in SETTLE:
            return page(
                request, "refused.html", 400, message="the verdict is sent, failed or pending"
            )
        if form.get("confirmed") != "yes":
            return page(
                request,
                "settle.html",
                message_id=message_id,
                verdict=verdict,
                consequence=SETTLE[verdict],
            )
        try:
            await run_in_threadpool(
                lambda: outbox.resolve(message_id, verdict, resolver=person.name)
            )
        except CtrlrunError as exc:
            return page(request, "refused.html", 409, message=exc.message)
        return RedirectResponse(f"/durable?done=settled+{message_id}", status_code=303)

    async def reconcile(request: Request) -> Response:
        person, form = await gate.checked_form(request)
        operation_id = str(form.get("operation_id", ""))
        remote_id = str(form.get("remote_id", "")).strip() or None
        if form.get("confirmed") != "yes":
            return page(
                request,
                "reconcile.html",
                operation_id=operation_id,
                remote_id=remote_id,
                consequence=RECONCILE[remote_id is not None],
            )
        try:
            await run_in_threadpool(
                lambda: operations.resolve_start(
                    operation_id, resolver=person.name, remote_id=remote_id
                )
            )
        except CtrlrunError as exc:
            return page(request, "refused.html", 409, message=exc.message)
        return RedirectResponse(f"/durable?done=reconciled+{operation_id}", status_code=303)

    return [
        Route("/durable", listing),
        Route("/operations/reconcile", reconcile, methods=["POST"]),
        Route("/plans/{plan_id}/{verb}", answer_plan, methods=["POST"]),
        Route("/outbox/settle", settle, methods=["POST"]),
    ]
