"""G9: an altered receipt is detected, by kind and seq, from the stored bytes. G12: a cut tail
is detected against a signed checkpoint."""

from __future__ import annotations

import json
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Final

from ctrlrun.canonical import canonical_text
from ctrlrun.checkpoints import checkpoint_heads, load_checkpoints, make_checkpoint
from ctrlrun.errors import CheckpointInvalid, CheckpointReason, MissingDependency, Refused
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


def cut_tail_detected(lab: Lab) -> Passed:
    """G12. Three receipts are written through the real pipeline and a checkpoint of the head
    (seq 3) is signed with a key made for this run into a file outside the store. Control: the
    chain verifies against it. Then receipts 2 and 3 are deleted and the head rewound to
    receipt 1 behind the store's back: the chain alone still verifies (the attack), and against
    the checkpoint the store's ``verify_chain`` must report exactly ``tail_cut`` at seq 3 and
    ``head_rewound`` at seq 1; a checkpoint signed by another key must be refused."""
    picked = lab.pick(lambda t: True) or lab.pick(lambda t: True, decisions=(Decision.DENY,))
    if picked is None:
        raise NotApplicable("the policy lists no action")
    try:
        from ctrlrun.kernel.signing import generate

        pem, public_key = generate()
        other_pem, _ = generate()
    except MissingDependency as exc:
        raise NotApplicable(f"checkpoints need the signing extra ({exc.module})") from exc
    control, remote = lab.control(), Remote()
    for _ in range(RECEIPTS):
        with suppress(Refused):
            lab.present(control, picked[1], remote)
    receipts = lab.store.receipts()
    lab.check(len(receipts) >= RECEIPTS, f"control failed: {len(receipts)} receipts written")
    with tempfile.TemporaryDirectory(prefix="ctrlrun-verify-") as folder:
        file, forged = Path(folder) / "checkpoints", Path(folder) / "forged"
        make_checkpoint(lab.store, pem, origin=PREFIX, file=file, now=lab.clock())
        heads = checkpoint_heads(load_checkpoints(file, public_key))
        report = lab.store.verify_chain(checkpoints=heads)
        lab.check(report.ok, f"control failed: the untouched chain does not verify: {report}")
        make_checkpoint(lab.store, other_pem, origin=PREFIX, file=forged, now=lab.clock())
        lab.expect(
            "a checkpoint by another key",
            lambda: load_checkpoints(forged, public_key),
            CheckpointInvalid,
            reason=CheckpointReason.UNSIGNED,
        )
    lab.scratch.cut_tail(1, receipts[0].hash or "")
    lab.check(lab.store.verify_chain().ok, "the cut chain no longer verifies on its own")
    found = [(str(b.kind), b.seq) for b in lab.store.verify_chain(checkpoints=heads).breaks]
    wanted = [(str(BreakKind.TAIL_CUT), RECEIPTS), (str(BreakKind.HEAD_REWOUND), 1)]
    lab.check(found == wanted, f"after cutting the tail the chain reports {found or 'nothing'}")
    return Passed(
        lab.action,
        f"{RECEIPTS} receipts checkpointed; receipts 2-{RECEIPTS} deleted and the head rewound →"
        f" tail_cut at seq {RECEIPTS}, head_rewound at seq 1; a checkpoint by another key"
        " refused (unsigned)",
    )
