"""CLI test helpers: a runner that fails the test on any traceback, the shapes of a refusal
and a usage error, and a store written by real protected calls."""

from __future__ import annotations

import sqlite3
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import ctrlrun
from ctrlrun.cli import main
from ctrlrun.config import load_policy_text
from ctrlrun.store.protocol import StartRequest
from ctrlrun.testing import ManualClock
from support.policies import POLICY

ENV = ("CTRLRUN_CONFIG", "CTRLRUN_STORE_URL", "CTRLRUN_DEBUG")


def run(*args: str) -> Result:
    """Invoke ``ctrlrun args``; a traceback (any exception but SystemExit) fails the test."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"ctrlrun {' '.join(args)} raised:\n{trace}")
    return result


def refused(result: Result, *fragments: str) -> str:
    """Assert exit 1, nothing on stdout and exactly one ``Error: …`` line; return it."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def usage(result: Result, fragment: str) -> None:
    """Assert a usage error: exit 2, the reason on stderr, nothing on stdout."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == "" and fragment in result.stderr


class Scene:
    """A project's store, written by real protected calls through ``Control``: the SQLite file
    under ``root``, or whatever ``opener(clock)`` opens (then ``url`` names it)."""

    def __init__(
        self,
        root: Path,
        *,
        opener: Callable[[ManualClock], Any] | None = None,
        url: str | None = None,
        start: datetime | None = None,
    ) -> None:
        self.root = root
        self.path = root / ".ctrlrun" / "state.db"
        # the real now by default: the CLI compares with the system clock
        self.clock = ManualClock(start)
        self._url = url
        self._opener = opener
        self.store = (opener or self._sqlite)(self.clock)
        self.control = ctrlrun.Control(load_policy_text(POLICY), self.store, clock=self.clock)
        self.remote_calls: list[dict] = []
        self.fail_with: list[BaseException] = []
        self.during: list[Callable[[], None]] = []  # run inside the executor, mid-flight

        @ctrlrun.protect("stripe.refund", control=self.control)
        def refund(payment_id: str, amount: int) -> dict:
            self.remote_calls.append({"payment_id": payment_id, "amount": amount})
            while self.during:
                self.during.pop(0)()
            if self.fail_with:
                raise self.fail_with.pop(0)
            return {"refund": f"re_{len(self.remote_calls)}"}

        self._refund = refund

    @property
    def url(self) -> str:
        return self._url or f"sqlite://{self.path}"

    def refund(self, payment_id: str, amount: int, *, approval: str | None = None):
        """Run the protected refund; return its value or the exception it raised."""
        with ctrlrun.context("support-bot", "alice"):
            try:
                if approval is None:
                    return self._refund(payment_id=payment_id, amount=amount)
                with ctrlrun.with_approval(approval):
                    return self._refund(payment_id=payment_id, amount=amount)
            except Exception as exc:
                return exc

    def committed(self, payment_id: str = "pay_1") -> str:
        self.refund(payment_id, 5_000)
        return self.receipt_for(f"refund:{payment_id}")["action_id"]

    def ambiguous(self, payment_id: str = "pay_2") -> str:
        self.fail_with.append(TimeoutError("reply lost after the provider refunded"))
        assert isinstance(self.refund(payment_id, 5_000), TimeoutError)
        return self.receipt_for(f"refund:{payment_id}")["action_id"]

    def _sqlite(self, clock: ManualClock) -> Any:
        return ctrlrun.SQLiteStateStore(self.path, clock=clock)

    def pending(self, payment_id: str = "pay_3", amount: int = 200_000) -> str:
        needed = self.refund(payment_id, amount)
        assert isinstance(needed, ctrlrun.ApprovalRequired)
        return needed.request_id

    def executing(self, key: str, *, lapsed: bool) -> None:
        """A crashed attempt's record: EXECUTING, its lease live or long lapsed."""
        request = StartRequest(action_id=f"act_crashed_{key}", effect_key=key)
        if not lapsed:
            self.store.start_action(request)
            return
        earlier = ManualClock(self.clock() - timedelta(hours=2))  # a clock only moves forward
        store = (self._opener or self._sqlite)(earlier)
        try:
            store.start_action(request)
        finally:
            store.close()

    def receipt_for(self, key: str) -> dict:
        return [r.document for r in self.store.receipts() if r["effect_key"] == key][-1]

    def close(self) -> None:
        self.store.close()


def tamper(path: Path, *statements: str) -> None:
    """Edit the SQLite file behind the store's back, as an attacker with file access would."""
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()
