"""Fixtures for the Postgres store's own tests: stores on a private schema (direct, or through
the fault proxy), the branch names the store logs, and a counting executor."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

import ctrlrun
from ctrlrun import Control
from ctrlrun.config import load_policy_text
from ctrlrun.postgres import PostgresStateStore
from support.pg import PgServer
from support.pg_fixtures import PgSchema
from support.pg_sql import wait_for_lock_waiter
from support.pgbouncer import PgBouncer, start_pgbouncer
from support.pgproxy import PgProxy
from support.policies import POLICY

from .roles_support import roles  # noqa: F401  (the three-roles fixture)

KEY = "refund:pay_1"
__all__ = ["KEY", "in_thread", "left_ambiguous", "wait_for_lock_waiter"]


@pytest.fixture
def open_store(pg_schema: PgSchema) -> Iterator[Callable[..., PostgresStateStore]]:
    """``open_store(url=None, **kwargs)``: a store on the test's schema (closed at teardown)."""
    opened: list[PostgresStateStore] = []

    def _open(url: str | None = None, **kwargs: Any) -> PostgresStateStore:
        store = PostgresStateStore(url or pg_schema.url, schema=pg_schema.schema, **kwargs)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def direct(open_store: Callable[..., PostgresStateStore]) -> PostgresStateStore:
    """A store connected straight to the server (the 'other process' of a test)."""
    return open_store()


@pytest.fixture
def proxied(open_store: Callable[..., PostgresStateStore], pg_proxy: PgProxy) -> PostgresStateStore:
    """The store under test, connected through the fault proxy (opened and migrated already,
    so a fault armed afterwards hits the test's own write)."""
    return open_store(pg_proxy.url)


@pytest.fixture(scope="session")
def small_pgbouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    """pgbouncer in transaction mode with two server connections: clients must share them
    between transactions, so anything session-scoped would leak or break. Fails, never skips."""
    try:
        bouncer = start_pgbouncer(pg_server, "transaction", pool_size=2)
    except Exception as exc:
        pytest.fail(f"pgbouncer could not be started (tests never skip): {exc}", pytrace=False)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def branches(caplog: pytest.LogCaptureFixture) -> Callable[[], list[tuple[str, str | None]]]:
    """``branches()``: the (branch, effect_key) pairs logged on ``ctrlrun.postgres`` so far."""
    caplog.set_level(logging.INFO, logger="ctrlrun.postgres")

    def logged() -> list[tuple[str, str | None]]:
        return [
            (record.branch, record.effect_key)
            for record in caplog.records
            if record.name == "ctrlrun.postgres" and hasattr(record, "branch")
        ]

    return logged


class Executor:
    """A remote that counts its calls; ``fail_with`` makes the next call raise."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail_with: list[BaseException] = []

    def __call__(self, **arguments: Any) -> dict[str, Any]:
        self.calls.append(arguments)
        if self.fail_with:
            raise self.fail_with.pop(0)
        return {"ok": len(self.calls)}


@pytest.fixture
def executor() -> Executor:
    return Executor()


def in_thread(fn: Callable[[], Any]) -> Future[Any]:
    """Run ``fn`` on a thread of its own (a second client of the store); its future."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def left_ambiguous(
    store: PostgresStateStore, executor: Any, hook: Callable[[str], str]
) -> Callable[..., Any]:
    """``refund(payment_id, amount)`` protected with the reconcile ``hook``, whose first call
    (on ``KEY``) already ended AMBIGUOUS: the executor raised ``TimeoutError`` once."""
    control = Control(load_policy_text(POLICY), store)

    @ctrlrun.protect("stripe.refund", control=control, reconcile=hook)
    def refund(payment_id: str, amount: int) -> Any:
        return executor(payment_id=payment_id)

    executor.fail_with.append(TimeoutError())
    with ctrlrun.context("bot"), pytest.raises(TimeoutError):
        refund("pay_1", 1)
    return refund
