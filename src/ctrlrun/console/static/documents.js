// ctrlrun console: the document editor. The DocumentSession protocol in the browser, against
// the documents API (/api/documents). No build step, no dependencies.
//
// Guarantees (the same as ctrlrun.documents.DocumentSession):
// - every edit is in this writer's draft in localStorage before the input event returns; the
//   draft is removed only when a save of exactly that text succeeded, or the person took
//   their version (then the text is set aside, still in this browser);
// - every save carries the version it was based on; one save is in flight at a time;
// - a 409 is a conflict the person resolves (keep mine / take theirs / merge); nothing is
//   last-write-wins. A 409 is believed only after re-reading: if the stored content is what
//   was sent, the save landed;
// - offline, the draft stays and saving is retried; a reload finds the draft and the version
//   it was based on, and shows the conflict again if someone saved meanwhile.
// A writer is one tab: its id lives in sessionStorage (kept across reloads, new per tab).
"use strict";
(function () {
  const root = document.getElementById("editor");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const docId = root.dataset.docId;
  const person = root.dataset.person;
  const merges = (root.dataset.merges || "").split(" ").filter(Boolean);
  const url = "/api/documents/" + encodeURIComponent(docId);
  const text = $("doc-text");
  const DRAFTS = "ctrlrun.draft ";
  const LABELS = {
    loading: "loading", idle: "saved", dirty: "unsaved changes", saving: "saving…",
    conflict: "conflict: choose below", offline: "offline: kept in this browser, retrying",
    rejected: "refused by the server", invalid: "not valid JSON: kept in this browser",
  };

  const tab = tabId();
  const draftKey = DRAFTS + JSON.stringify([person, docId, tab]);
  const asideKey = "ctrlrun.aside " + JSON.stringify([person, docId]);
  let base = null; // {version, content}: what the server confirmed this text is based on
  let kind = null;
  let generation = 0; // grows with every edit
  let inFlight = null; // {generation, content}: the one save on the wire
  let theirs = null; // {version, content}: the stored version while in conflict
  let timer = null;
  let backoff = 1000;

  function tabId() {
    let id = sessionStorage.getItem("ctrlrun.tab");
    if (!id || !/^[a-z0-9]{1,16}$/.test(id)) {
      const bytes = crypto.getRandomValues(new Uint8Array(6));
      id = Array.from(bytes, (b) => (b % 36).toString(36)).join("");
      sessionStorage.setItem("ctrlrun.tab", id);
    }
    return id;
  }

  // --- JSON as the server sees it ---------------------------------------------------------
  function strictParse(source) {
    // Numbers the browser cannot hold exactly (floats, integers past 2^53) are refused rather
    // than silently rounded into the document.
    return JSON.parse(source, (key, value) => {
      if (typeof value === "number" && !Number.isSafeInteger(value)) {
        throw new SyntaxError("numbers must be integers within ±2^53 here, not " + value);
      }
      return value;
    });
  }
  function parse(source) {
    try { return { ok: true, value: strictParse(source) }; }
    catch (e) { return { ok: false, error: e.message }; }
  }
  function canonical(v) {
    if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
    if (v !== null && typeof v === "object") {
      return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
    }
    return JSON.stringify(v);
  }
  const same = (a, b) => canonical(a) === canonical(b);
  // Control, format (bidi) and separator characters are shown as JSON escapes: the text reads
  // as it parses, and parsing it back gives the same content.
  const INVISIBLE = /(?!\n)[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu; // "\n" is the layout's own
  const escapeInvisible = (s) => s.replace(INVISIBLE, (c) =>
    Array.from({ length: c.length }, (_, i) => "\\u" + c.charCodeAt(i).toString(16).padStart(4, "0")).join(""));
  const pretty = (v) => escapeInvisible(JSON.stringify(v, null, 2));

  // Key by key, like ctrlrun.documents.merge_json_objects: a key only one side changed takes
  // that side; a key both changed differently is a conflict, and nothing is merged.
  function mergeObjects(was, mine, other) {
    const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
    if (![was, mine, other].every(isObject)) throw { keys: [], message: "only JSON objects merge" };
    const merged = {}, conflicts = [];
    const keys = new Set([...Object.keys(was), ...Object.keys(mine), ...Object.keys(other)]);
    for (const key of Array.from(keys).sort()) {
      const at = (side) => (Object.prototype.hasOwnProperty.call(side, key) ? canonical(side[key]) : undefined);
      const w = at(was), m = at(mine), o = at(other);
      let from;
      if (m === o || m === w) from = other;
      else if (o === w) from = mine;
      else { conflicts.push(key); continue; }
      if (Object.prototype.hasOwnProperty.call(from, key)) merged[key] = from[key];
    }
    if (conflicts.length) throw { keys: conflicts, message: "both sides changed " + conflicts.join(", ") + " differently" };
    return merged;
  }

  // --- the server -------------------------------------------------------------------------
  async function call(method, body) {
    const headers = { "X-Ctrlrun-Writer": tab, "X-Ctrlrun-Csrf": root.dataset.csrf };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const answer = await fetch(url, {
      method, headers, credentials: "same-origin", cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    }); // a network failure throws: the outcome is unknown
    let data = null;
    try { data = JSON.parse(await answer.text()); } catch (e) { data = null; }
    return { status: answer.status, body: data || {} };
  }
  async function fetchStored() {
    const answer = await call("GET");
    if (answer.status !== 200) throw { status: answer.status, message: answer.body.message || "HTTP " + answer.status };
    kind = answer.body.kind;
    return { version: answer.body.version, content: answer.body.content, by: answer.body.updatedBy };
  }

  // --- drafts -----------------------------------------------------------------------------
  function readDraft(key) {
    try { return JSON.parse(localStorage.getItem(key)); } catch (e) { return null; }
  }
  function writeDraft() {
    try {
      localStorage.setItem(draftKey, JSON.stringify({ text: text.value, base, at: new Date().toISOString() }));
    } catch (e) {
      show("this browser could not keep the draft (" + e.name + "): save before leaving");
    }
  }
  const clearDraft = () => localStorage.removeItem(draftKey);
  function setAside(value) {
    const kept = readDraft(asideKey) || [];
    kept.push({ text: value, version: base ? base.version : null, at: new Date().toISOString() });
    localStorage.setItem(asideKey, JSON.stringify(kept));
    showSetAside();
  }

  // --- what the person sees ---------------------------------------------------------------
  function state(name, message) {
    const el = $("doc-state");
    el.dataset.state = name;
    el.textContent = LABELS[name];
    show(message || "");
  }
  function show(message) {
    const box = $("doc-message");
    box.hidden = !message;
    box.textContent = message;
  }
  function showBase() {
    $("doc-base").textContent = base ? String(base.version) : "?";
    $("doc-kind").textContent = kind || "?";
  }
  function showConflict() {
    const panel = $("doc-conflict");
    panel.hidden = !theirs;
    $("merge-failed").hidden = true;
    if (!theirs) return;
    $("theirs-version").textContent = String(theirs.version);
    $("theirs-writer").textContent = theirs.by || "someone";
    $("theirs-text").textContent = pretty(theirs.content);
    $("merge").disabled = !merges.includes(kind);
    $("merge").title = $("merge").disabled ? "documents of kind " + kind + " do not merge" : "";
  }
  function listItem(list, lines, button) {
    const item = document.createElement("li");
    const pre = document.createElement("pre");
    pre.textContent = lines.text;
    const note = document.createElement("span");
    note.className = "muted";
    note.textContent = lines.note;
    item.append(note, pre);
    if (button) item.append(button);
    list.append(item);
  }
  function showSetAside() {
    const kept = readDraft(asideKey) || [];
    const list = $("set-aside-list");
    list.replaceChildren();
    kept.forEach((entry) => listItem(list, { text: entry.text, note: "set aside " + entry.at + " (based on version " + entry.version + ")" }));
    $("set-aside-count").textContent = String(kept.length);
    $("set-aside").hidden = kept.length === 0;
  }
  function showOtherDrafts() {
    const list = $("other-drafts-list");
    list.replaceChildren();
    for (let i = 0; i < localStorage.length; i++) {
      const key = localStorage.key(i);
      if (!key || !key.startsWith(DRAFTS) || key === draftKey) continue;
      let owner;
      try { owner = JSON.parse(key.slice(DRAFTS.length)); } catch (e) { continue; }
      if (!Array.isArray(owner) || owner[0] !== person || owner[1] !== docId) continue;
      const draft = readDraft(key);
      if (!draft || typeof draft.text !== "string") continue;
      const adopt = document.createElement("button");
      adopt.type = "button";
      adopt.textContent = "Continue this draft here";
      adopt.addEventListener("click", () => adoptDraft(key, draft));
      const note = "tab " + owner[2] + ", " + draft.at + ", based on version " + (draft.base ? draft.base.version : "?");
      listItem(list, { text: draft.text, note }, adopt);
    }
    $("other-drafts").hidden = list.children.length === 0;
  }

  // --- the protocol -----------------------------------------------------------------------
  function schedule(delay) {
    window.clearTimeout(timer);
    timer = window.setTimeout(save, delay === undefined ? 600 : delay);
  }
  function retryLater(work) {
    window.clearTimeout(timer);
    timer = window.setTimeout(work, backoff);
    backoff = Math.min(backoff * 2, 15000);
  }

  async function load() {
    const draft = readDraft(draftKey);
    let stored;
    try {
      stored = await fetchStored();
    } catch (e) {
      if (e.status) { state("rejected", e.message); return; }
      if (draft) { base = draft.base; text.value = draft.text; text.disabled = false; showBase(); }
      state("offline");
      retryLater(load);
      return;
    }
    backoff = 1000;
    text.disabled = false;
    showOtherDrafts();
    showSetAside();
    if (!draft || !draft.base) {
      base = stored;
      text.value = pretty(stored.content);
      showBase();
      state("idle");
      return;
    }
    base = draft.base;
    text.value = draft.text;
    showBase();
    settleAgainst(stored);
  }

  // The draft against what is stored now: unchanged, ahead of the same version, or behind.
  function settleAgainst(stored) {
    const mine = parse(text.value);
    if (mine.ok && same(mine.value, base.content)) {
      base = stored; // no local change left: show what is stored
      text.value = pretty(stored.content);
      clearDraft(); showBase(); state("idle");
    } else if (stored.version === base.version) {
      state("dirty");
      schedule(0);
    } else if (mine.ok && same(mine.value, stored.content)) {
      base = stored; // this text is what is stored: an earlier save landed
      clearDraft(); showBase(); state("idle");
    } else {
      enterConflict(stored);
    }
  }

  async function save() {
    window.clearTimeout(timer);
    if (inFlight || theirs || !base) return;
    const mine = parse(text.value);
    if (!mine.ok) { state("invalid", mine.error); return; }
    if (same(mine.value, base.content)) { clearDraft(); state("idle"); return; }
    const attempt = { generation, content: mine.value };
    inFlight = attempt;
    state("saving");
    let answer;
    try {
      answer = await call("PUT", { content: attempt.content, expectedVersion: base.version });
    } catch (e) {
      inFlight = null;
      state("offline");
      retryLater(save);
      return;
    }
    inFlight = null;
    if (answer.status === 200) saved(attempt, answer.body.version);
    else if (answer.status === 409 && answer.body.error === "version_conflict") await conflicted(attempt);
    else if (answer.status >= 500) { state("offline", answer.body.message); retryLater(save); }
    else state("rejected", answer.body.message || "HTTP " + answer.status);
  }

  function saved(attempt, version) {
    backoff = 1000;
    base = { version, content: attempt.content };
    showBase();
    if (attempt.generation === generation) { clearDraft(); state("idle"); }
    else { writeDraft(); state("dirty"); schedule(); } // edits made while it was on the wire
  }

  async function conflicted(attempt) {
    let stored;
    try { stored = await fetchStored(); }
    catch (e) { state("offline"); retryLater(save); return; }
    if (same(stored.content, attempt.content)) saved(attempt, stored.version);
    else enterConflict(stored);
  }

  function enterConflict(stored) {
    theirs = stored;
    writeDraft();
    showConflict();
    state("conflict");
  }

  function keepMine() {
    base = theirs; // mine, saved over the version the person has now seen
    theirs = null;
    writeDraft(); showConflict(); showBase();
    save();
  }

  function takeTheirs() {
    setAside(text.value);
    base = theirs;
    theirs = null;
    text.value = pretty(base.content);
    generation++;
    clearDraft(); showConflict(); showBase(); state("idle");
  }

  function merge() {
    const mine = parse(text.value);
    let merged;
    try {
      if (!mine.ok) throw { keys: [], message: "your text is not valid JSON: " + mine.error };
      merged = mergeObjects(base.content, mine.value, theirs.content);
    } catch (e) {
      const failed = $("merge-failed");
      failed.hidden = false;
      failed.textContent = e.message + ". Edit your text, or keep mine / take theirs.";
      failed.dataset.keys = (e.keys || []).join(" ");
      return;
    }
    base = theirs;
    theirs = null;
    text.value = pretty(merged);
    generation++;
    writeDraft(); showConflict(); showBase();
    save();
  }

  function adoptDraft(key, draft) {
    if (readDraft(draftKey)) setAside(text.value); // this tab's own work is kept too
    localStorage.setItem(draftKey, JSON.stringify(draft));
    localStorage.removeItem(key);
    theirs = null;
    showConflict();
    load();
  }

  text.addEventListener("input", () => {
    generation++;
    writeDraft();
    if (theirs || !base) return; // a conflict waits for a choice; the draft is kept meanwhile
    if (!inFlight) state("dirty");
    schedule();
  });
  $("doc-save").addEventListener("click", () => schedule(0));
  $("keep-mine").addEventListener("click", keepMine);
  $("take-theirs").addEventListener("click", takeTheirs);
  $("merge").addEventListener("click", merge);
  window.addEventListener("online", () => { backoff = 1000; if (base) schedule(0); else load(); });
  $("doc-writer").textContent = person + " (tab " + tab + ")";
  load();
})();
