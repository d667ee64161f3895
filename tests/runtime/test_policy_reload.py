"""A policy file edited while a process runs applies from its next call, no restart; an edit
that no longer loads denies every call (logged) until the file loads again."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

import ctrlrun
from ctrlrun import ActionDenied, DenyReason

ALLOW = """\
schema: ctrlrun.policy/v1
actions:
  crm.read:
    decision: allow
"""

DENY = """\
schema: ctrlrun.policy/v1
actions:
  crm.read:
    decision: deny
    description: "reads are closed for the audit"
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(ALLOW)
    control = ctrlrun.Control.from_file(str(path), create=True)

    @ctrlrun.protect("crm.read", control=control)
    def read(customer: str):
        return customer

    yield path, control, read
    control.store.close()


def edit(path, text):
    """Rewrite the file; bump its mtime so even a same-size edit within one tick is seen."""
    before = os.stat(path).st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def test_an_edit_applies_at_the_next_call(project):
    path, control, read = project
    with ctrlrun.context("bot"):
        assert read("c1") == "c1"
        edit(path, DENY)
        with pytest.raises(ActionDenied) as denied:
            read("c2")
    assert denied.value.reason is DenyReason.POLICY
    hashes = {r["policy_hash"] for r in control.store.receipts()}
    assert len(hashes) == 2  # each receipt names the policy it was decided under


def test_a_broken_edit_denies_every_call_until_fixed(project, caplog):
    path, control, read = project
    caplog.set_level(logging.WARNING, logger="ctrlrun")
    with ctrlrun.context("bot"):
        edit(path, ALLOW + "  this is: [not yaml\n")
        for _ in range(2):
            with pytest.raises(ActionDenied) as denied:
                read("c1")
            assert denied.value.reason is DenyReason.POLICY_UNLOADABLE
            assert str(path) in str(denied.value)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "no longer loads" in errors[0].getMessage()
        edit(path, ALLOW)
        assert read("c1") == "c1"
    assert any("reloaded" in r.getMessage() for r in caplog.records)
    assert [r["result"] for r in control.store.receipts()] == ["committed"]


def test_a_deleted_policy_file_denies_too(project):
    path, _control, read = project
    path.unlink()
    with ctrlrun.context("bot"), pytest.raises(ActionDenied) as denied:
        read("c1")
    assert denied.value.reason is DenyReason.POLICY_UNLOADABLE


def test_the_async_path_reloads_as_well(project):
    import asyncio

    path, control, _read = project

    @ctrlrun.protect("crm.read", control=control)
    async def aread(customer: str):
        return customer

    async def main():
        with ctrlrun.context("bot"):
            assert await aread("c1") == "c1"
            edit(path, DENY)
            with pytest.raises(ActionDenied):
                await aread("c2")
            edit(path, ALLOW + "  broken: [\n")
            with pytest.raises(ActionDenied) as denied:
                await aread("c3")
            return denied.value.reason

    assert asyncio.run(main()) is DenyReason.POLICY_UNLOADABLE


class EditsMidCall(ctrlrun.Control):
    """Rewrites the policy file right after ``protect`` has read it for a call (in the
    protection check, between building the action and deciding it): the edit must apply
    from the next call, never halfway through this one."""

    path = None

    def check_protection(self, *args, **kwargs):
        super().check_protection(*args, **kwargs)
        if self.path is not None:
            edit(self.path, DENY)
            self.path = None


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_one_policy_decides_the_whole_call(tmp_path, monkeypatch, kind):
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(ALLOW)
    control = EditsMidCall.from_file(str(path), create=True)
    allow_hash = control.policy.policy_hash

    if kind == "sync":

        @ctrlrun.protect("crm.read", control=control)
        def read(customer: str):
            return customer

        call = read
    else:

        @ctrlrun.protect("crm.read", control=control)
        async def aread(customer: str):
            return customer

        def call(customer):
            return asyncio.run(aread(customer))

    control.path = path
    with ctrlrun.context("bot"):
        assert call("c1") == "c1"  # decided by the policy the action was built under
        with pytest.raises(ActionDenied):
            call("c2")  # the edit applies from the next call
    receipts = control.store.receipts()
    assert receipts[0]["policy_hash"] == allow_hash
    assert receipts[1]["policy_hash"] != allow_hash
    control.store.close()


BROKEN_NOTIFY = (
    ALLOW
    + """\
notify:
  - name: ops
    url: "http://["
    secret_env: OPS_SECRET
"""
)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_reload_the_url_parser_chokes_on_denies_every_call(project, kind):
    """A fuzzing find: ``http://[`` made ``urlsplit`` raise a bare ``ValueError`` that escaped
    the reload into every protected call."""
    path, control, read = project

    @ctrlrun.protect("crm.read", control=control)
    async def aread(customer: str):
        return customer

    def call(customer):
        return read(customer) if kind == "sync" else asyncio.run(aread(customer))

    with ctrlrun.context("bot"):
        assert call("c1") == "c1"
        edit(path, BROKEN_NOTIFY)
        for customer in ("c2", "c3"):
            with pytest.raises(ActionDenied) as denied:
                call(customer)
            assert denied.value.reason is DenyReason.POLICY_UNLOADABLE
            assert f"{path}:5" in str(denied.value)
        edit(path, ALLOW)
        assert call("c4") == "c4"


def test_a_loader_bug_denies_instead_of_escaping(project, monkeypatch):
    """Whatever the loader raises, a policy that did not load denies: fail closed."""
    import ctrlrun.config

    path, _control, read = project

    def broken(_path):
        raise KeyError("a bug")

    monkeypatch.setattr(ctrlrun.config, "load_policy_file", broken)
    edit(path, DENY)
    with ctrlrun.context("bot"), pytest.raises(ActionDenied) as denied:
        read("c1")
    assert denied.value.reason is DenyReason.POLICY_UNLOADABLE
    assert "KeyError" in str(denied.value) and str(path) in str(denied.value)
