"""G9: an altered receipt is detected, by kind and seq, from the stored bytes."""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Final

from ctrlrun.canonical import canonical_text
from ctrlrun.errors import Refused
from ctrlrun.kernel.policy import Decision
from ctrlrun.kernel.receipt import BreakKind

from .lab import Lab, NotApplicable, Passed, Remote
from .synthesis import PREFIX

RECEIPTS: Final = 3
ALTERED: Final = 2


def altered_receipt_detected(lab: Lab) -> Passed:
    """G9. Three receipts are written through the real pipeline (commits, refusals or denials,
    whatever the first action's rule decides). Control: the untouched chain verifies, numbered
    1..3. Then receipt 2's stored document is rewritten behind the store's back (one field
    changed, still canonical JSON); the store's own ``verify_chain`` must report exactly
    ``content_altered`` at seq 2."""
    picked = lab.pick(lambda t: True) or lab.pick(lambda t: True, decisions=(Decision.DENY,))
    if picked is None:
        raise NotApplicable("the policy lists no action")
    vector = picked[1]
    control, remote = lab.control(), Remote()
    for _ in range(RECEIPTS):
        with suppress(Refused):  # a refusal is evidence too: it writes a receipt
            lab.present(control, vector, remote)
    receipts = lab.store.receipts()
    lab.check(len(receipts) >= RECEIPTS, f"control failed: {len(receipts)} receipts written")
    report = lab.store.verify_chain()
    lab.check(
        report.ok and [r.seq for r in receipts] == list(range(1, len(receipts) + 1)),
        f"control failed: the untouched chain does not verify: {report}",
    )
    document = json.loads(receipts[ALTERED - 1].text)
    document["result"] = f"{PREFIX}-altered"
    lab.scratch.tamper_receipt(ALTERED, canonical_text(document))
    found = [(str(b.kind), b.seq) for b in lab.store.verify_chain().breaks]
    lab.check(
        found == [(str(BreakKind.CONTENT_ALTERED), ALTERED)],
        f"after altering receipt {ALTERED} the chain reports {found or 'nothing'}",
    )
    return Passed(
        lab.action,
        f"{len(receipts)} receipts verified; receipt {ALTERED} altered in the store →"
        f" content_altered at seq {ALTERED}",
    )
