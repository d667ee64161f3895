"""Rendering pages: one Jinja2 environment with autoescape on for every template, so every
value reaches HTML escaped unless a template says otherwise (none does)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Final

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ctrlrun._time import display_instant
from ctrlrun.canonical import canonical_text
from ctrlrun.display import escape_text

SECURITY_HEADERS = {
    # no inline script may run: the console's own JS is one static file
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer makes Chromium post Origin: null
    "Cache-Control": "no-store",
}


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The templates in this package, autoescaped, undefined names an error."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ctrlrun.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    # shown text: control, bidi and format characters as visible escapes, then HTML-escaped
    env.filters["shown"] = lambda value: escape_text(str(value))
    # a JSON value as its canonical text (what hashes cover), shown the same way
    env.filters["canon"] = canon
    env.filters["instant"] = lambda value: display_instant(value) if value else ""
    return env


def canon(value: Any) -> str:
    """``value`` as canonical JSON with unsafe characters escaped; a value that is not
    canonical JSON (an altered row) as its plain JSON instead, never an error page."""
    try:
        return escape_text(canonical_text(value))
    except (ValueError, TypeError):
        return escape_text(json.dumps(value, default=str, ensure_ascii=False))


def page(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    """``template`` rendered with ``values``, the signed-in person and their CSRF token."""
    person = request.scope.get("console.person")
    html = (
        environment()
        .get_template(template)
        .render(
            person=person.name if person else None,
            csrf=person.csrf if person else "",
            path=request.url.path,
            **values,
        )
    )
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


# What ``?done=`` may show: the console's own messages, by id, each naming one record by an id
# of the form ``new_id`` mints. Anything else in the link is shown as nothing, so a link made
# elsewhere cannot put its own words on a console page.
DONE_MESSAGES: Final = frozenset(
    {"granted", "denied", "approved", "rejected", "settled", "reconciled"}
)
_RECORD_ID: Final = re.compile(r"[a-z]{1,12}_[0-9a-f]{8,64}")


def done_notice(request: Request) -> str:
    """The ``?done=<message> <record id>`` notice of ``request`` (the redirect after an
    answer), or "" when the link names no message of the console's own or no record id."""
    message, _, record = request.query_params.get("done", "").partition(" ")
    if message not in DONE_MESSAGES or not _RECORD_ID.fullmatch(record):
        return ""
    return f"{message} {record}"
