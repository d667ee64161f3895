// ctrlrun console: the inbox's live updates. No build step, no dependencies.
// Polls the waiting request ids; when they change, reloads the page unless the person is in
// the middle of typing (then a notice offers the reload instead, so nothing typed is lost).
"use strict";
(function () {
  const inbox = document.getElementById("inbox");
  if (!inbox) return;
  const shown = inbox.dataset.pending || "";
  const busy = () =>
    Array.from(document.querySelectorAll("#inbox input[name=reason]")).some(
      (field) => field.value !== "" || field === document.activeElement
    );
  async function poll() {
    try {
      const answer = await fetch("/inbox/pending.json", { credentials: "same-origin" });
      if (answer.ok) {
        const now = (await answer.json()).pending.join(" ");
        if (now !== shown) {
          if (busy()) document.getElementById("live").hidden = false;
          else { window.location.reload(); return; }
        }
      }
    } catch (e) { /* offline: try again on the next tick */ }
    window.setTimeout(poll, 1000);
  }
  window.setTimeout(poll, 1000);
})();
