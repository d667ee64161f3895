"""The document editor in a real browser against the real `ctrlrun console` process: two tabs
edit one document, one gets the conflict, keeps its draft through a reload and resolves it by
merge, keep mine or take theirs; offline work is kept and saved when the network is back; the
documents API behind the console refuses what a page of another origin could send."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from ctrlrun.documents import DocumentStore
from support.console import screenshot

RUNBOOK = {"title": "Deploy", "owner": "ada", "steps": ["build", "ship"]}


@pytest.fixture
def docs(agents):
    return DocumentStore(agents.store)


@pytest.fixture
def runbook(docs):
    return docs.create("runbook", RUNBOOK, kind="json-object", writer="seed")


def open_editor(tab, doc_id="runbook", state="idle"):
    tab.goto(f"/documents/{doc_id}")
    wait_for(tab, state)


def wait_for(tab, state):
    tab.locator(f"#doc-state[data-state={state}]").wait_for()


def edit(tab, content):
    tab.fill("#doc-text", content if isinstance(content, str) else _pretty(content))


def _pretty(value):
    return json.dumps(value, indent=2)


def shown_base(tab):
    return int(tab.inner_text("#doc-base"))


def two_tabs(page):
    other = page.context.new_page()
    open_editor(page)
    open_editor(other)
    return page, other


def test_two_tabs_one_conflict_kept_through_a_reload_then_merged(page, docs, runbook, tmp_path):
    first, second = two_tabs(page)
    edit(first, {**RUNBOOK, "title": "Deploy v2"})
    wait_for(first, "idle")
    assert shown_base(first) == 2
    edit(second, {**RUNBOOK, "owner": "grace"})
    wait_for(second, "conflict")
    assert second.inner_text("#theirs-version") == "2"
    assert second.inner_text("#theirs-writer").startswith("ada (tab ")
    assert "Deploy v2" in second.inner_text("#theirs-text")
    screenshot(second, "document-conflict", tmp_path)
    assert docs.get("runbook").content["owner"] == "ada"  # nothing last-write-wins

    second.reload()
    wait_for(second, "conflict")  # the draft and the version it was based on survived
    assert '"grace"' in second.input_value("#doc-text")
    assert shown_base(second) == 1

    second.click("#merge")
    wait_for(second, "idle")
    stored = docs.get("runbook")
    merged = {**RUNBOOK, "title": "Deploy v2", "owner": "grace"}
    assert (stored.version, stored.content) == (3, merged)
    writers = [v.writer for v in docs.history("runbook")]
    assert writers[0] == "seed" and all(w.startswith("ada (tab ") for w in writers[1:])
    assert writers[1] != writers[2]  # each tab is its own writer
    second.reload()
    wait_for(second, "idle")  # the draft is gone once its work was saved
    assert shown_base(second) == 3


def test_keep_mine_and_take_theirs(page, docs, runbook):
    first, second = two_tabs(page)
    edit(first, {**RUNBOOK, "title": "from the first tab"})
    wait_for(first, "idle")
    edit(second, {**RUNBOOK, "title": "from the second tab"})
    wait_for(second, "conflict")
    second.click("#keep-mine")
    wait_for(second, "idle")
    assert docs.get("runbook").content["title"] == "from the second tab"
    assert docs.get("runbook").version == 3

    edit(first, {**RUNBOOK, "title": "the first tab again"})  # still based on version 2
    wait_for(first, "conflict")
    first.click("#take-theirs")
    wait_for(first, "idle")
    assert '"from the second tab"' in first.input_value("#doc-text")
    assert first.inner_text("#set-aside-count") == "1"  # the first tab's text is set aside
    assert "the first tab again" in first.text_content("#set-aside-list")  # folded away
    assert docs.get("runbook").version == 3


def test_a_key_both_tabs_changed_differently_does_not_merge(page, docs, runbook):
    first, second = two_tabs(page)
    edit(first, {**RUNBOOK, "owner": "grace"})
    wait_for(first, "idle")
    edit(second, {**RUNBOOK, "owner": "linus", "title": "Deploy now"})
    wait_for(second, "conflict")
    second.click("#merge")
    failed = second.locator("#merge-failed")
    failed.wait_for()
    assert failed.get_attribute("data-keys") == "owner"
    assert second.get_attribute("#doc-state", "data-state") == "conflict"
    assert docs.get("runbook").content["owner"] == "grace"


def test_a_kind_without_a_merge_offers_only_mine_or_theirs(page, docs):
    docs.create("notes", ["one"], writer="seed")
    first, second = page, page.context.new_page()
    open_editor(first, "notes")
    open_editor(second, "notes")
    edit(first, ["one", "two"])
    wait_for(first, "idle")
    edit(second, ["one", "three"])
    wait_for(second, "conflict")
    assert second.is_disabled("#merge")


def test_offline_edits_are_kept_and_saved_when_the_network_is_back(page, docs, runbook):
    open_editor(page)
    page.context.set_offline(True)
    edit(page, {**RUNBOOK, "steps": ["build", "test", "ship"]})
    wait_for(page, "offline")
    assert docs.get("runbook").version == 1
    page.context.set_offline(False)
    wait_for(page, "idle")
    assert docs.get("runbook").content["steps"] == ["build", "test", "ship"]


def test_a_closed_tabs_draft_is_found_by_the_next_tab(page, docs, runbook):
    open_editor(page)
    page.context.set_offline(True)
    edit(page, {**RUNBOOK, "owner": "offline edit"})
    wait_for(page, "offline")
    context = page.context
    page.close()  # the tab is gone; its draft is still in this browser
    context.set_offline(False)
    later = context.new_page()
    open_editor(later)
    drafts = later.locator("#other-drafts-list li")
    later.click("#other-drafts summary")
    assert "offline edit" in drafts.inner_text()
    drafts.locator("button").click()
    expect(later.locator("#doc-base")).to_have_text("2")
    wait_for(later, "idle")
    assert docs.get("runbook").content["owner"] == "offline edit"


def test_text_that_is_not_json_is_kept_but_never_sent(page, docs, runbook):
    open_editor(page)
    edit(page, '{"title": "half typed",')
    wait_for(page, "invalid")
    page.reload()
    wait_for(page, "invalid")
    assert page.input_value("#doc-text") == '{"title": "half typed",'
    edit(page, '{"title": 1.5}')  # a float the store refuses is refused here first
    wait_for(page, "invalid")
    assert docs.get("runbook").version == 1


def test_hostile_content_and_writers_render_inert(page, docs):
    hostile = "<img src=x onerror=\"document.title='pwned'\">\u202e\U000e0041"
    docs.create("hostile", {"note": hostile}, writer="<script>document.title='pwned'</script>")
    dialogs = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    page.goto("/documents")
    assert "<script>" in page.inner_text("#doc-hostile")
    open_editor(page, "hostile")
    text = page.input_value("#doc-text")
    assert "\\u202e\\udb40\\udc41" in text  # shown as escapes, never obeyed
    assert "\u202e" not in text and "\U000e0041" not in text
    assert json.loads(text) == {"note": hostile}  # and it parses back to the stored content
    assert page.title() != "pwned" and not dialogs
    assert page.locator("img").count() == 0


def test_a_document_is_created_from_the_listing(page, docs, tmp_path):
    docs.create("older", {"a": 1}, writer="seed")
    page.goto("/documents")
    page.fill("#new-document input[name=doc_id]", "checklist")
    page.select_option("#new-document select[name=kind]", "json-object")
    page.fill("#new-document textarea[name=content]", '{"done": []}')
    page.click("#new-document button")
    wait_for(page, "idle")
    assert page.url.endswith("/documents/checklist")
    created = docs.get("checklist")
    assert (created.kind, created.content) == ("json-object", {"done": []})
    assert created.updated_by == "ada"
    page.goto("/documents")
    assert page.locator("table.documents tbody tr").first.get_attribute("id") == "doc-checklist"
    screenshot(page, "documents", tmp_path)
    page.fill("#new-document input[name=doc_id]", "checklist")
    page.click("#new-document button")
    assert "already exists" in page.inner_text("[role=alert]")


def test_the_api_behind_the_console_needs_the_session_and_its_token(page, console, runbook):
    api = page.context.request
    body = {"content": {"title": "forged"}, "expectedVersion": 1}
    refused = api.put("/api/documents/runbook", data=body)
    assert refused.status == 403  # signed in, but no CSRF token: another origin's request
    csrf = page.goto("/documents/runbook") and page.get_attribute("#editor", "data-csrf")
    bad_tab = api.put(
        "/api/documents/runbook",
        data=body,
        headers={"X-Ctrlrun-Csrf": csrf, "X-Ctrlrun-Writer": "Robert'); DROP"},
    )
    assert bad_tab.status == 400
    import urllib.request
    from urllib.error import HTTPError

    with pytest.raises(HTTPError) as anonymous:  # nobody signed in: refused, not redirected
        urllib.request.urlopen(console.url + "/api/documents/runbook")
    assert anonymous.value.code == 403
    assert api.get("/api/documents/runbook").json()["version"] == 1


def test_a_name_outside_latin_1_is_recorded_as_it_is(browser, console, docs, runbook):
    from support.console import sign_in

    context = browser.new_context(base_url=console.url)
    context.set_default_timeout(10_000)
    try:
        tab = context.new_page()
        sign_in(tab, "zoë")
        open_editor(tab)
        edit(tab, {**RUNBOOK, "owner": "zoë"})
        wait_for(tab, "idle")
        assert docs.get("runbook").updated_by.startswith("zoë (tab ")  # never "zoÃ«"
    finally:
        context.close()
