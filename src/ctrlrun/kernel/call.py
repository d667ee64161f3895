"""Pure decisions about one protected call that come before the store is asked to write.

``refusal_before_asking``: a call the policy sends to a person is first checked against its
effect key's record, so that nobody is asked about something that already ran, is running,
or whose outcome is unknown (issue 27: "never ask a person about what already ran").
"""

from __future__ import annotations

from datetime import datetime

from ctrlrun.errors import AlreadyCommitted, InProgress, Refused
from ctrlrun.kernel.effect import EffectRecord, EffectState, ambiguous_refusal


def refusal_before_asking(
    record: EffectRecord | None, *, now: datetime, reconcilable: bool = False
) -> Refused | None:
    """The refusal for an approval-gated call whose effect key holds ``record``, decided
    before any approval request is made; None when a person may be asked.

    COMMITTED → ``AlreadyCommitted`` carrying the stored result (the receipt id is the
    caller's to fill in); a live reservation → ``InProgress``; AMBIGUOUS → ``AmbiguousEffect``,
    unless ``reconcilable`` (the call brings a reconcile hook, which may settle it when the
    granted call reserves: a person is asked as before). FAILED or no record: ask. A
    reservation whose lease lapsed is asked about too: only a reservation writes it AMBIGUOUS
    (a read cannot), and refusing here would leave it unresolvable for ever; the granted call's
    reservation then marks it AMBIGUOUS and is refused.
    """
    if record is None or record.state is EffectState.FAILED:
        return None
    if record.state is EffectState.COMMITTED:
        return AlreadyCommitted(
            f"effect {record.effect_key!r} already committed (attempt {record.attempt});"
            " no approval was requested",
            effect_key=record.effect_key,
            result=record.result,
        )
    if record.lease_is_live(now):
        return InProgress(
            f"effect {record.effect_key!r} is in progress (attempt {record.attempt},"
            f" {record.action_id}); no approval was requested",
            effect_key=record.effect_key,
        )
    if record.state is EffectState.AMBIGUOUS and not reconcilable:
        return ambiguous_refusal(record)
    return None
