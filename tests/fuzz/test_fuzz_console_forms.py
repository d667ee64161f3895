"""The console's forms on a real ``ctrlrun console``, fuzzed: sign-in, grant, deny, resolve,
plan answers, outbox settling and document creation with arbitrary fields (the session's own
CSRF token, a wrong one, none). Never a 500 or a traceback in the page or the log, and a
refused form leaves the store exactly as it was."""

from __future__ import annotations

import http.client
import re
import sqlite3
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.console import PASSWORD, Agents, Console
from support.fuzzing import budget


class Session:
    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.cookie = ""
        self.csrf = ""

    def post(self, path: str, fields: dict[str, str], *, raw: bytes | None = None):
        body = raw if raw is not None else urllib.parse.urlencode(fields).encode()
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": f"http://{self.host}:{self.port}",
        }
        if self.cookie:
            headers["Cookie"] = self.cookie
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read(), response.getheader("Set-Cookie") or ""
        finally:
            conn.close()

    def get(self, path: str) -> bytes:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request("GET", path, headers={"Cookie": self.cookie})
            return conn.getresponse().read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def signed_in(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-fuzz")
    agents = Agents(root)
    pending = agents.refund("pay_big", 500_000)  # an approval request to aim forms at
    agents.fail_with.append(TimeoutError("lost"))
    agents.refund("pay_amb", 5)  # an AMBIGUOUS effect
    console = Console(root, agents.path)
    session = Session(console.url)
    status, _, cookie = session.post("/sign-in", {"name": "ada", "password": PASSWORD})
    assert status == 303
    session.cookie = cookie.split(";", 1)[0]
    found = re.search(rb'name="csrf" value="([^"]+)"', session.get("/"))
    assert found
    session.csrf = found.group(1).decode()
    yield session, agents, getattr(pending, "request_id", "apr_none")
    console.proc.terminate()
    log = console.proc.communicate(timeout=10)[1]
    agents.store.close()
    assert "Traceback" not in log, log


def dump(agents: Agents) -> list:
    with sqlite3.connect(agents.path) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = [sorted(map(repr, db.execute(f'SELECT * FROM "{n}"'))) for n in names]
    db.close()
    return rows


TEXT = st.text(max_size=12) | st.sampled_from(["", "\u202e", "\x00", "a" * 500, "refund:pay_amb"])
PATHS = st.sampled_from(
    ["/sign-in", "/approvals/{pending}/grant", "/approvals/{pending}/deny", "/approvals/x/grant",
     "/effect/resolve", "/plans/p/approve", "/plans/p/x", "/outbox/settle", "/documents",
     "/operations/reconcile", "/sign-out-not"]
)  # fmt: skip
FIELDS = st.dictionaries(
    st.sampled_from(["name", "password", "reason", "key", "outcome", "note", "id", "content",
                     "as", "message_id", "result", "x"]),
    TEXT,
    max_size=4,
)  # fmt: skip


@budget(40)
@given(PATHS, FIELDS, st.sampled_from(["own", "wrong", "none"]), st.none() | st.binary(max_size=40))
def test_a_form_is_answered_without_a_500_and_a_refusal_changes_nothing(
    signed_in, path, fields, token, raw
):
    session, agents, pending = signed_in
    path = path.format(pending=pending)
    if path.startswith("/approvals/"):
        fields.pop("reason", None)  # a grant with a valid token would be a real decision
        token = "wrong" if token == "own" else token
    if token != "none":
        fields["csrf"] = session.csrf if token == "own" else "forged"
    before = dump(agents)
    status, page, _ = session.post(path, fields, raw=raw)
    assert status != 500 and b"Traceback" not in page, (status, page[:300])
    if status >= 400:
        assert dump(agents) == before, (path, fields, status)
