"""A protected refund whose reply is lost: AMBIGUOUS, and the blind retry is refused.

Run with `make demo`. Offline; writes only a temporary directory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import ctrlrun

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 100000}
        decision: allow
      - decision: deny
"""

remote_calls = 0


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="ctrlrun-quickstart-"))
    (workdir / "ctrlrun.yaml").write_text(POLICY)
    control = ctrlrun.Control(
        ctrlrun.Policy.from_file(workdir / "ctrlrun.yaml"),
        ctrlrun.SQLiteStateStore(workdir / "state.db"),
    )

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> None:
        global remote_calls
        remote_calls += 1  # the provider refunds the money ...
        raise TimeoutError("... and the reply is lost on the way back")

    with ctrlrun.context(agent="support-bot", user="alice"):
        try:
            refund("pay_123", 50000)
        except TimeoutError:
            print("refund €500 → provider commits → reply lost → effect AMBIGUOUS")
        try:
            refund("pay_123", 50000)
            raise SystemExit("FAIL: the blind retry went through")
        except ctrlrun.AmbiguousEffect:
            print("the agent retries the same refund → BLOCKED (it may already have happened)")
    print(f"remote calls: {remote_calls}")
    assert remote_calls == 1, "the library let a second refund through"
    for receipt in control.store.receipts():
        print(f"receipt {receipt.seq}: {receipt['action']} {receipt['result']}")
    print(f"chain verified: {control.store.verify_chain().ok}")


if __name__ == "__main__":
    main()
