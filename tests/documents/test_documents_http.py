"""The HTTP API on a real uvicorn server: every status with its body, and no 500 for bad input."""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctrlrun.documents import HttpDocumentClient
from ctrlrun.documents.store import DocumentStore
from ctrlrun.errors import (
    DocumentExists,
    DocumentNotFound,
    DocumentTooLarge,
    InvalidArgument,
    Unreachable,
    VersionConflict,
)
from ctrlrun.store.sqlite import SQLiteStateStore
from support.http_server import Served


def call(url, method, path, body=None, *, headers=None, raw=None):
    """``(status, headers, parsed body)``; ``raw`` bytes are sent as they are."""
    if isinstance(url, Api):
        path = path.replace("/api/documents/doc", f"/api/documents/{url.doc_id}")
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    sent = {"Content-Type": "application/json"} if body is not None or raw is not None else {}
    sent.update(headers or {})
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    try:
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        text = response.read()
        got = dict(response.getheaders())
    finally:
        conn.close()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return response.status, got, parsed


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for this module (a server per test costs its shutdown); every test makes its
    own documents."""
    state = SQLiteStateStore(tmp_path_factory.mktemp("http") / "state.db", durability="normal")
    running = Served(DocumentStore(state, max_content_bytes=4096), max_body_bytes=8192)
    yield running.url
    running.stop()
    state.close()


@pytest.fixture
def api(server, request):
    """The server URL; ``/api/documents/doc`` is this test's own fresh document."""
    doc_id = f"d{abs(hash(request.node.nodeid)):x}"
    status, _, _ = call(server, "POST", "/api/documents", {"id": doc_id, "content": {"a": 1}})
    assert status == 201
    return Api(server, doc_id)


class Api(str):
    """The server URL, rewriting the path ``/api/documents/doc`` to this test's document."""

    def __new__(cls, url, doc_id):
        made = super().__new__(cls, url)
        made.doc_id = doc_id
        return made


def test_create(server):
    url = server
    body = {"id": "plan", "kind": "json-object", "content": {"x": [1, "two", None, True]}}
    status, headers, got = call(
        url, "POST", "/api/documents", body, headers={"X-Ctrlrun-Writer": "alice"}
    )
    assert status == 201
    assert headers["etag"] == '"1"'
    assert headers["location"] == "/api/documents/plan"
    assert got["id"] == "plan" and got["version"] == 1 and got["kind"] == "json-object"
    assert got["content"] == body["content"] and got["updatedBy"] == "alice"
    assert got["contentHash"].startswith("sha256:")
    status, _, again = call(url, "POST", "/api/documents", body)
    assert (status, again["error"], again["currentVersion"]) == (409, "document_exists", 1)
    status, _, default = call(url, "POST", "/api/documents", {"id": "plain", "content": "text"})
    assert (status, default["kind"]) == (201, "json")


def test_get(api):
    status, headers, got = call(api, "GET", "/api/documents/doc")
    assert status == 200 and headers["etag"] == '"1"'
    assert {k: got[k] for k in ("id", "kind", "version", "content")} == {
        "id": api.doc_id,
        "kind": "json",
        "version": 1,
        "content": {"a": 1},
    }
    assert set(got) == {
        "id",
        "kind",
        "version",
        "content",
        "contentHash",
        "createdAt",
        "updatedAt",
        "updatedBy",
    }
    status, _, missing = call(api, "GET", "/api/documents/nope")
    assert (status, missing["error"]) == (404, "not_found")
    status, _, bad = call(api, "GET", "/api/documents/.hidden")
    assert (status, bad["error"]) == (400, "invalid_argument")


def test_put_with_expected_version_or_if_match(api):
    status, headers, got = call(
        api,
        "PUT",
        "/api/documents/doc",
        {"content": {"a": 2}, "expectedVersion": 1},
        headers={"X-Ctrlrun-Writer": "bob"},
    )
    assert (status, headers["etag"], got["version"], got["id"]) == (200, '"2"', 2, api.doc_id)
    status, headers, got = call(
        api, "PUT", "/api/documents/doc", {"content": {"a": 3}}, headers={"If-Match": '"2"'}
    )
    assert (status, headers["etag"], got["version"]) == (200, '"3"', 3)
    both = {"content": {"a": 4}, "expectedVersion": 3}
    status, _, got = call(api, "PUT", "/api/documents/doc", both, headers={"If-Match": '"3"'})
    assert (status, got["version"]) == (200, 4)
    # identical content: a no-op answering the current version, whatever the base
    same = {"content": {"a": 4}, "expectedVersion": 1}
    assert call(api, "PUT", "/api/documents/doc", same)[2]["version"] == 4


def test_conflict_precondition_and_not_found(api):
    call(api, "PUT", "/api/documents/doc", {"content": {"a": 2}, "expectedVersion": 1})
    status, _, got = call(
        api, "PUT", "/api/documents/doc", {"content": {"b": 1}, "expectedVersion": 1}
    )
    assert status == 409
    assert (got["error"], got["currentVersion"], got["expectedVersion"]) == (
        "version_conflict",
        2,
        1,
    )
    assert "message" in got
    status, _, got = call(api, "PUT", "/api/documents/doc", {"content": {"b": 1}})
    assert (status, got["error"]) == (428, "precondition_required")
    status, _, got = call(
        api, "PUT", "/api/documents/doc", {"content": 1}, headers={"If-Match": "*"}
    )
    assert (status, got["error"]) == (428, "precondition_required")
    status, _, got = call(api, "PUT", "/api/documents/nope", {"content": 1, "expectedVersion": 1})
    assert (status, got["error"]) == (404, "not_found")
    assert call(api, "GET", "/api/documents/doc")[2]["content"] == {"a": 2}


def test_history(api):
    call(
        api,
        "PUT",
        "/api/documents/doc",
        {"content": 2, "expectedVersion": 1},
        headers={"X-Ctrlrun-Writer": "carol/tab-1"},
    )
    status, _, got = call(api, "GET", "/api/documents/doc/history")
    assert status == 200 and got["id"] == api.doc_id
    assert [(v["version"], v["writer"]) for v in got["versions"]] == [(1, None), (2, "carol/tab-1")]
    assert all(v["contentHash"].startswith("sha256:") and v["savedAt"] for v in got["versions"])
    status, _, got = call(api, "GET", "/api/documents/nope/history")
    assert (status, got["error"]) == (404, "not_found")


@pytest.mark.parametrize(
    ("raw", "headers", "status", "error"),
    [
        (b'{"content": 1, "expectedVersion": 1', {}, 400, "invalid_json"),
        (b"", {}, 400, "invalid_json"),
        (b'{"content": NaN, "expectedVersion": 1}', {}, 400, "invalid_json"),
        (b'{"content": 1, "content": 2, "expectedVersion": 1}', {}, 400, "invalid_json"),
        (b'{"content": "\xff", "expectedVersion": 1}', {}, 400, "invalid_json"),
        (b'{"content": 1.5, "expectedVersion": 1}', {}, 400, "invalid_argument"),
        (b'{"content": {"p": 1e3}, "expectedVersion": 1}', {}, 400, "invalid_argument"),
        (b'{"content": 1, "expectedVersion": "1"}', {}, 400, "invalid_argument"),
        (b'{"content": 1, "expectedVersion": true}', {}, 400, "invalid_argument"),
        (b'{"content": 1, "expectedVersion": 0}', {}, 400, "invalid_argument"),
        (b'{"content": 1, "expectedVersion": 1.0}', {}, 400, "invalid_argument"),
        (b'{"content": 1, "expectedVersion": 1, "force": true}', {}, 400, "invalid_argument"),
        (b'{"expectedVersion": 1}', {}, 400, "invalid_argument"),
        (b"[1, 2]", {}, 400, "invalid_argument"),
        (b'{"content": 1}', {"If-Match": 'W/"1"'}, 400, "invalid_argument"),
        (b'{"content": 1}', {"If-Match": '"1", "2"'}, 400, "invalid_argument"),
        (b'{"content": 1, "expectedVersion": 2}', {"If-Match": '"1"'}, 400, "invalid_argument"),
        (
            b'{"content": 1, "expectedVersion": 1}',
            {"X-Ctrlrun-Writer": "w" * 201},
            400,
            "invalid_argument",
        ),
        (
            b'{"content": 1, "expectedVersion": 1}',
            {"Content-Type": "text/plain"},
            415,
            "unsupported_media_type",
        ),
        (b"[" * 3000 + b"]" * 3000, {}, 400, "invalid_json"),
        (
            b'{"content": ' + b"[" * 150 + b"]" * 150 + b', "expectedVersion": 1}',
            {},
            400,
            "invalid_argument",
        ),
        (b'{"content": ' + b"9" * 5000 + b', "expectedVersion": 1}', {}, 400, "invalid_json"),
    ],
    ids=lambda v: v[:30] if isinstance(v, bytes) else None,
)
def test_bad_input_is_a_400_never_a_500(api, raw, headers, status, error):
    got_status, _, got = call(api, "PUT", "/api/documents/doc", raw=raw, headers=headers)
    assert (got_status, got["error"]) == (status, error), got
    assert call(api, "GET", "/api/documents/doc")[2]["version"] == 1


def test_too_large_by_header_by_body_and_by_content(api):
    big = json.dumps({"content": "x" * 9000, "expectedVersion": 1}).encode()
    status, _, got = call(api, "PUT", "/api/documents/doc", raw=big)
    assert (status, got["error"], got["limit"]) == (413, "payload_too_large", 8192)
    # no Content-Length: the bytes that arrive are counted
    host, port = api.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    chunks = (big[i : i + 1000] for i in range(0, len(big), 1000))
    conn.request(
        "PUT",
        "/api/documents/doc",
        body=chunks,
        encode_chunked=True,
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
    )
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())["error"]) == (413, "payload_too_large")
    conn.close()
    # under the body limit, over the content limit (4 KiB of canonical JSON)
    status, _, got = call(
        api, "PUT", "/api/documents/doc", {"content": "y" * 5000, "expectedVersion": 1}
    )
    assert (status, got["error"]) == (413, "payload_too_large")
    # a Content-Length that is not a byte count: 400. No body bytes follow the headers, so the
    # server's close after its answer finds nothing unread (unread bytes would make the close
    # a reset, which can destroy the answer before the client reads it)
    bad_length = {"Content-Type": "application/json", "Content-Length": "12x"}
    status, _, got = call(api, "PUT", "/api/documents/doc", headers=bad_length)
    assert status == 400
    assert call(api, "GET", "/api/documents/doc")[2]["version"] == 1


def test_unknown_routes_and_methods_are_not_500(api):
    assert call(api, "DELETE", "/api/documents/doc")[0] == 405
    assert call(api, "GET", "/api/nothing")[0] == 404


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    raw=st.one_of(
        st.binary(max_size=64),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ).map(lambda v: json.dumps({"content": v, "expectedVersion": 1}).encode()),
    )
)
def test_fuzzed_bodies_never_make_a_500(api, raw):
    status, _, _ = call(api, "PUT", "/api/documents/doc", raw=raw)
    assert status in (200, 400, 409, 413, 428), status


def test_a_failing_store_is_a_503_and_nothing_is_half_written(tmp_path):
    state = SQLiteStateStore(tmp_path / "state.db", durability="normal")
    docs = DocumentStore(state)
    docs.create("doc", {"a": 1})
    with sqlite3.connect(tmp_path / "state.db") as raw:  # damage: the history table goes
        raw.execute("DROP TABLE document_versions")
    running = Served(docs)
    try:
        status, _, got = call(
            running.url, "PUT", "/api/documents/doc", {"content": 2, "expectedVersion": 1}
        )
        assert (status, got["error"]) == (503, "store_unavailable")
        assert call(running.url, "GET", "/api/documents/doc")[2]["version"] == 1  # rolled back
    finally:
        running.stop()
        state.close()


def test_the_http_client_raises_what_the_store_raises(server, api):
    client = HttpDocumentClient(server, user="alice")
    with pytest.raises(DocumentExists) as exists:
        client.create(api.doc_id, {})
    assert exists.value.current_version == 1
    with pytest.raises(DocumentNotFound):
        client.fetch("nope")
    with pytest.raises(DocumentNotFound):
        client.history("nope")
    assert client.save(api.doc_id, {"a": 2}, expected_version=1) == 2
    with pytest.raises(VersionConflict) as conflict:
        client.save(api.doc_id, {"a": 3}, expected_version=1)
    assert (conflict.value.current_version, conflict.value.doc_id) == (2, api.doc_id)
    with pytest.raises(DocumentTooLarge):
        client.save(api.doc_id, "z" * 5000, expected_version=2)
    with pytest.raises(InvalidArgument):
        client.save(api.doc_id, {"a": 0.5}, expected_version=2)  # refused before sending
    doc = client.fetch(api.doc_id)
    assert (doc.version, doc.content, doc.updated_by) == (2, {"a": 2}, "alice")


def test_the_http_client_without_a_server_is_unreachable():
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = HttpDocumentClient(f"http://127.0.0.1:{port}", user="alice", timeout=5)
    with pytest.raises(Unreachable) as caught:
        client.save("doc", {}, expected_version=1)
    assert caught.value.status is None
    with pytest.raises(InvalidArgument):
        HttpDocumentClient("file:///etc/passwd", user="alice")
