"""``Control.from_file`` and the process-wide default used by ``@protect``."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun.runtime.protect import default_control


@pytest.fixture
def project(tmp_path, monkeypatch, policy_file):
    monkeypatch.chdir(policy_file.parent)
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    ctrlrun.set_default_control(None)
    yield policy_file.parent
    ctrlrun.set_default_control(None)


def test_from_file_finds_the_policy_and_puts_the_store_beside_it(project):
    control = ctrlrun.Control.from_file()
    assert control.store.path == project / ".ctrlrun" / "state.db"
    assert control.policy.entry("stripe.refund") is not None


def test_protect_builds_the_default_lazily_once(project):
    @ctrlrun.protect("crm.read")
    def read(customer: str):
        return customer

    with ctrlrun.context("bot"):
        assert read("c") == "c"
    assert default_control() is default_control()
    assert len(default_control().store.receipts()) == 1


def test_a_missing_policy_is_a_policy_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
    with pytest.raises(ctrlrun.PolicyError):
        ctrlrun.Control.from_file()


def test_with_approval_needs_an_id():
    with pytest.raises(ctrlrun.InvalidArgument), ctrlrun.with_approval(""):
        pass


def test_a_reconcile_answer_on_a_record_that_moved_is_not_an_error(control, store, remote):
    from ctrlrun.kernel.effect import EffectState

    def hook(key):
        store.resolve_effect(key, EffectState.FAILED, "cli:local")  # a person got there first
        return "committed"

    @ctrlrun.protect("stripe.refund", control=control, reconcile=hook)
    def refund(payment_id: str, amount: int):
        return remote(payment_id=payment_id)

    remote.fail_with.append(TimeoutError())
    with ctrlrun.context("bot"):
        with pytest.raises(TimeoutError):
            refund("p", 1)
        refund("p", 1)
    record = store.get_effect("refund:p")
    assert (record.state, record.attempt) == (EffectState.COMMITTED, 2)
