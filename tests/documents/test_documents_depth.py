"""Content may nest as deep as docs/documents.md says, and no deeper: one limit, the canonical
form's (the docs said 100 levels while the encoder refused the 33rd)."""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path

import pytest

from ctrlrun import canonical
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel import document
from support.http_server import Served

DOCS = Path(__file__).parents[2] / "docs" / "documents.md"


def nested(levels: int) -> object:
    value: object = 1
    for index in range(levels):
        value = {"k": value} if index % 2 else [value]
    return value


def test_the_documented_limit_is_the_one_enforced():
    said = re.search(r"at most (\d+) levels\s+deep", DOCS.read_text())
    assert said, "docs/documents.md no longer states the depth limit"
    assert int(said.group(1)) == document.MAX_DEPTH == canonical.MAX_DEPTH


def test_content_at_the_limit_is_stored_and_one_deeper_is_refused(docs):
    docs.create("deep", nested(document.MAX_DEPTH))
    assert docs.get("deep").content == nested(document.MAX_DEPTH)
    with pytest.raises(InvalidArgument, match=f"deeper than {document.MAX_DEPTH} levels"):
        docs.save("deep", nested(document.MAX_DEPTH + 1), expected_version=1, writer="w")
    assert docs.get("deep").version == 1  # refused input changed nothing


def post(url: str, body: object) -> tuple[int, object]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(
            "POST", "/api/documents", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_over_http_the_limit_is_a_400_naming_it(sqlite_docs):
    served = Served(sqlite_docs)
    try:
        status, _ = post(served.url, {"id": "ok", "content": nested(document.MAX_DEPTH)})
        assert status == 201
        status, body = post(served.url, {"id": "no", "content": nested(document.MAX_DEPTH + 1)})
        assert status == 400 and f"deeper than {document.MAX_DEPTH} levels" in body["message"]
    finally:
        served.stop()
