"""``ctrlrun init``: a commented starter policy and the store beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click

from ctrlrun.cli.common import Refusal, say, store_url_option
from ctrlrun.kernel.partition import MAX_PARTITIONS
from ctrlrun.runtime.locate import default_store_path, policy_path
from ctrlrun.store.url import redacted

STARTER_POLICY: Final = """\
# ctrlrun.yaml: what your agents may do. Every action not named here is denied.
# Each rule list is read top to bottom and the first rule that matches decides:
#   allow    the call runs (at most once per effect key)
#   approve  a person must approve this exact call first: `ctrlrun approve <id>`
#   deny     the call is refused and a receipt says why
# Amounts are integers in minor units (cents): 100000 is €1,000.00.
schema: ctrlrun.policy/v1
actions:
  # Reading changes nothing in the world: allowed, and no effect key needed.
  crm.read:
    decision: allow

  # An email goes out at most once per message_id, however often the agent retries.
  email.send:
    decision: allow
    effect: "email:{message_id}"

  # Refunds in bands bounded on both ends: zero, negative or huge amounts match no band.
  stripe.refund:
    effect: "refund:{payment_id}"
    display:                                   # people read 250000 as €2,500.00 (250000)
      amount: {money: EUR, minor: 2}
    rules:
      - when: {amount_gte: 1, amount_lte: 100000}        # €0.01 to €1,000: runs
        decision: allow
      - when: {amount_gte: 100001, amount_lte: 1000000}  # up to €10,000: a person approves
        decision: approve
      - decision: deny                                   # anything else

  # Destructive: a person approves each deletion, and it happens once.
  k8s.namespace.delete:
    decision: approve
    effect: "namespace-delete:{name}"

  # Never: an agent does not make anyone an administrator.
  iam.grant_admin:
    decision: deny
"""


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else absolute."""
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


@click.command()
@store_url_option
@click.option(
    "--partitions",
    type=click.IntRange(1, MAX_PARTITIONS),
    default=None,
    help="Receipt chains a new Postgres store keeps (default 64; fixed once created).",
)
def init(store_url: str | None, partitions: int | None) -> None:
    """Write a commented starter ctrlrun.yaml (or $CTRLRUN_CONFIG) and create the store.

    The store is .ctrlrun/state.db beside the policy unless --store-url (or
    $CTRLRUN_STORE_URL) names another. An existing policy is never overwritten: beside one,
    init creates only the missing store (and says it kept the policy as it is).
    --partitions chooses how many receipt chains a new Postgres store keeps (SQLite keeps
    one); an existing store opened with another count is refused.
    """
    from ctrlrun.store import open_store, parse_store_url
    from ctrlrun.store.sqlite import SQLiteStateStore

    policy = policy_path()
    kept = policy.exists() or policy.is_symlink()
    if kept and not policy.is_file():
        raise Refusal(f"{shown(policy)} exists and is not a policy file; nothing written")
    if store_url:
        parse_store_url(store_url)  # a malformed URL is refused before anything is written
    elif partitions not in (None, 1):
        raise Refusal(
            f"a SQLite store keeps one receipt chain, not {partitions} (its writers take turns"
            " on the file); give --store-url postgresql://… for several; nothing written"
        )
    target = default_store_path(policy)
    existed = target.exists() and not store_url
    chains = 1
    if store_url:
        store = open_store(store_url, partitions=partitions)
        chains = store.partitions
        store.close()
    else:
        target.parent.mkdir(mode=0o700, exist_ok=True)  # private: it holds the evidence
        SQLiteStateStore(target).close()
    if kept:
        say(f"kept {shown(policy)} as it is (init never overwrites a policy)")
    else:
        with policy.open("x", encoding="utf-8") as out:  # "x": lose no race to another writer
            out.write(STARTER_POLICY)
        say(f"wrote {shown(policy)}: 5 actions; anything it does not name is denied")
    where = redacted(store_url) if store_url else shown(target)
    kept_or_made = "kept the existing" if existed else "created"
    say(f"{kept_or_made} store {where}" + (f" ({chains} receipt chains)" if chains > 1 else ""))
    say(
        'next: protect a function with @ctrlrun.protect("stripe.refund"), or run'
        " `ctrlrun demo` to watch the refusals"
    )
