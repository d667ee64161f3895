"""Receipts: the chain, searchable by action, agent and effect key, verified in place with
every break marked at its seq."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ctrlrun.console.render import page
from ctrlrun.kernel.receipt import place

FIELDS = ("action", "agent", "effect_key")


def row(receipt: Any) -> dict[str, Any]:
    """What one row shows; an unreadable (altered) row is still shown, with why."""
    try:
        document: Any = receipt.document
    except ValueError as exc:
        document = f"unreadable: {exc}"
    seq = _place(receipt.partition, receipt.seq)
    if not isinstance(document, dict):
        return {"seq": seq, "receipt_id": receipt.receipt_id, "unreadable": document}
    principal = document.get("principal")
    agent = principal.get("agent") if isinstance(principal, dict) else principal
    return {
        "seq": seq,
        "receipt_id": receipt.receipt_id,
        "action": document.get("action"),
        "agent": agent,
        "effect_key": document.get("effect_key"),
        "result": document.get("result"),
        "approver": document.get("approver"),
        "finished_at": document.get("finished_at"),
        "arguments": document.get("arguments"),
        "unreadable": None,
    }


def _place(partition: int, seq: int | None) -> str | None:
    """``kernel.receipt.place``, None for an unchained row (as the page always showed it)."""
    return None if seq is None else place(partition, seq)


def matches(shown: dict[str, Any], field: str, query: str) -> bool:
    """Whether ``query`` occurs in the row's ``field`` (any field when ``field`` is empty)."""
    if not query:
        return True
    fields = (field,) if field in FIELDS else FIELDS
    return any(query in str(shown.get(name) or "") for name in fields)


def routes(store: Any) -> list[Route]:
    """The receipts page over ``store``."""

    async def listing(request: Request) -> Response:
        query = request.query_params.get("q", "")
        field = request.query_params.get("field", "")
        receipts = await run_in_threadpool(store.receipts)
        report = await run_in_threadpool(store.verify_chain)
        broken = {_place(b.partition, b.seq) for b in report.breaks}
        rows = [r for r in (row(x) for x in receipts) if matches(r, field, query)]
        return page(
            request,
            "receipts.html",
            rows=rows,
            report=report,
            broken=broken,
            q=query,
            field=field,
            fields=FIELDS,
        )

    return [Route("/receipts", listing)]
