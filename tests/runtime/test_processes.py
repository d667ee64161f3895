"""Eight OS processes race one effect key behind a barrier: exactly one executes."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

import ctrlrun
from support.policies import POLICY
from support.race import race


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_eight_processes_one_winner(tmp_path: Path):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    db, calls = tmp_path / "state.db", tmp_path / "calls"
    calls.mkdir()
    ctrlrun.SQLiteStateStore(db).close()  # migrate once, so the race is on the key alone
    race(mp.get_context("spawn"), f"sqlite:///{db}", policy, calls)
    store = ctrlrun.SQLiteStateStore(db)
    assert store.get_effect("refund:pay_race").state is ctrlrun.EffectState.COMMITTED
    results_ = [r.document["result"] for r in store.receipts()]
    assert results_.count("committed") == 1 and results_.count("blocked") == 7
    assert store.verify_chain().ok
