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
    ctrlrun.Control.from_file(create=True).store.close()  # what `ctrlrun init` does
    control = ctrlrun.Control.from_file()
    assert control.store.path == project / ".ctrlrun" / "state.db"
    assert control.policy.entry("stripe.refund") is not None


def test_protect_builds_the_default_lazily_once(project):
    ctrlrun.Control.from_file(create=True).store.close()

    @ctrlrun.protect("crm.read")
    def read(customer: str):
        return customer

    with ctrlrun.context("bot"):
        assert read("c") == "c"
    assert default_control() is default_control()
    assert len(default_control().store.receipts()) == 1


class TestNoImplicitStore:
    def test_the_lazy_default_never_creates_a_store(self, project):
        with pytest.raises(ctrlrun.StoreNotFound, match="ctrlrun init") as caught:
            ctrlrun.Control.from_file()
        assert caught.value.location == str(project / ".ctrlrun" / "state.db")
        assert not (project / ".ctrlrun").exists()

    def test_nor_does_a_protected_call(self, project):
        @ctrlrun.protect("crm.read")
        def read(customer: str):
            return customer

        with ctrlrun.context("bot"), pytest.raises(ctrlrun.StoreNotFound):
            read("c")
        assert not (project / ".ctrlrun").exists()

    def test_an_empty_store_file_is_refused(self, project):
        (project / ".ctrlrun").mkdir()
        (project / ".ctrlrun" / "state.db").write_bytes(b"")
        with pytest.raises(ctrlrun.StoreNotFound, match="is empty"):
            ctrlrun.Control.from_file()

    def test_a_deleted_store_cannot_rerun_what_already_ran(self, project):
        ctrlrun.Control.from_file(create=True).store.close()
        runs = []

        @ctrlrun.protect("stripe.refund")
        def refund(payment_id: str, amount: int):
            runs.append(payment_id)

        with ctrlrun.context("bot"):
            refund("pay_1", 5)
            ctrlrun.set_default_control(None)
            for name in ("state.db", "state.db-wal", "state.db-shm"):
                (project / ".ctrlrun" / name).unlink(missing_ok=True)
            with pytest.raises(ctrlrun.StoreNotFound):
                refund("pay_1", 5)
        assert runs == ["pay_1"]

    @pytest.mark.postgres
    def test_an_empty_postgres_schema_is_refused_and_created_only_on_request(
        self, project, pg_server, monkeypatch
    ):
        from ctrlrun.postgres import PostgresStateStore

        schema = "t_lazy_" + __import__("os").urandom(4).hex()
        PostgresStateStore.create_schema(pg_server.url, schema)
        monkeypatch.setenv("CTRLRUN_STORE_URL", f"{pg_server.url}&ctrlrun_schema={schema}")
        with pytest.raises(ctrlrun.StoreNotFound, match="ctrlrun init"):
            ctrlrun.Control.from_file()
        ctrlrun.Control.from_file(create=True).store.close()
        control = ctrlrun.Control.from_file()
        assert control.store.receipts() == ()
        control.store.close()


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
