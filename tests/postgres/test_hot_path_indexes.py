"""The hot tables keep only the indexes a write needs (decision 0010).

The operator's reads those indexes served still answer, by scanning; the indexes are gone, so
a protected call no longer maintains them.
"""

from __future__ import annotations

import pytest

from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.store.protocol import FinishRequest, StartRequest

pytestmark = pytest.mark.postgres


def test_the_reads_the_dropped_indexes_served_still_answer(direct, pg_schema):
    for n in range(3):
        draft = {"receipt_id": f"rcp_{n}", "action_id": f"act_{n}", "result": "denied"}
        direct.record((EventDraft(EventType.ACTION_DENIED, f"act_{n}"),), draft)
    direct.start_action(StartRequest(action_id="act_9", effect_key="k"))
    direct.finish_action(
        FinishRequest(
            action_id="act_9",
            receipt={"receipt_id": "rcp_9", "action_id": "act_9", "result": "ambiguous"},
            effect_key="k",
            attempt=1,
            outcome=EffectState.AMBIGUOUS,
            error="TimeoutError",
        )
    )
    assert [e.action_id for e in direct.events("act_1")] == ["act_1"]
    assert [r.receipt_id for r in direct.receipts("act_2")] == ["rcp_2"]
    assert [r.effect_key for r in direct.list_effects(EffectState.AMBIGUOUS)] == ["k"]
    assert direct.list_effects(EffectState.COMMITTED) == ()
    with pg_schema.connect() as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s", [pg_schema.schema]
        ).fetchall()
    indexes = {row[0] for row in rows}
    assert not {"events_by_action", "receipts_by_action", "effects_by_state"} & indexes
    assert {"effects_pkey", "receipts_pkey", "receipts_by_id", "events_pkey"} <= indexes
