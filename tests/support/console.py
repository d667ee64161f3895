"""The console's browser tests: an agent's protected calls, the real `ctrlrun console`
process, and the browser steps the tests share."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import ctrlrun
from ctrlrun.config import load_policy_text
from ctrlrun.console.auth import hash_password
from support.policies import POLICY

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "console"
PASSWORD = "correct horse battery staple"
CONSOLE_POLICY = (
    POLICY
    + """\
  notify.send:
    decision: approve
    effect: "notify:{message_id}"
"""
)


class Agents:
    """An agent's protected calls against the store the console serves."""

    def __init__(self, root: Path, policy: str = CONSOLE_POLICY, store: Any = None) -> None:
        (root / ".ctrlrun").mkdir(exist_ok=True)
        self.path = root / ".ctrlrun" / "state.db"
        self.store = store if store is not None else ctrlrun.SQLiteStateStore(self.path)
        self.control = ctrlrun.Control(load_policy_text(policy), self.store)
        self.calls: list[dict] = []
        self.fail_with: list[BaseException] = []

        @ctrlrun.protect("stripe.refund", control=self.control)
        def refund(payment_id: str, amount: int) -> dict:
            self.calls.append({"payment_id": payment_id, "amount": amount})
            if self.fail_with:
                raise self.fail_with.pop(0)
            return {"refund": f"re_{len(self.calls)}"}

        @ctrlrun.protect("notify.send", control=self.control)
        def notify(message_id: str, body: str) -> str:
            return "sent"

        self._refund, self._notify = refund, notify

    def refund(self, payment_id: str, amount: int, approval: str | None = None) -> object:
        with ctrlrun.context("support-bot", "alice"):
            try:
                if approval is None:
                    return self._refund(payment_id=payment_id, amount=amount)
                with ctrlrun.with_approval(approval):
                    return self._refund(payment_id=payment_id, amount=amount)
            except Exception as exc:
                return exc

    def notify(self, message_id: str, body: str) -> object:
        with ctrlrun.context("notifier", None):
            try:
                return self._notify(message_id=message_id, body=body)
            except Exception as exc:
                return exc

    def receipts_for(self, key: str) -> list[dict]:
        return [r.document for r in self.store.receipts() if r["effect_key"] == key]


def _store_url(store: Path | str) -> str:
    """A SQLite file's store URL; a URL (a Postgres store's) as it is."""
    return store if isinstance(store, str) else f"sqlite://{store}"


class Console:
    """`ctrlrun console` as a real process on a free loopback port."""

    def __init__(self, root: Path, store_path: Path | str, *extra: str) -> None:
        accounts = root / "accounts"
        accounts.write_text(
            f"# people\nada:{hash_password(PASSWORD)}\nzoë:{hash_password(PASSWORD)}\n"
        )
        exe = Path(sys.executable).with_name("ctrlrun")
        command = [str(exe if exe.exists() else shutil.which("ctrlrun"))]
        self.proc = subprocess.Popen(
            [
                *command,
                *("console", "--store-url", _store_url(store_path)),
                *("--listen", "127.0.0.1:0", "--accounts", str(accounts)),
                *extra,
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, f"console did not start: {line}{self.proc.stderr.read()}"
        self.url = found.group(0).rstrip("/")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def sign_in(tab, name: str = "ada", password: str = PASSWORD) -> None:
    tab.goto("/sign-in")
    tab.fill("input[name=name]", name)
    tab.fill("input[name=password]", password)
    tab.click("#sign-in button")


def screenshot(tab, name: str, tmp_path: Path) -> None:
    """A full-page screenshot; into docs/console/ when CTRLRUN_CONSOLE_SCREENSHOTS is set
    (the docs' images are made by these tests), else beside the test's files."""
    where = SHOTS if os.environ.get("CTRLRUN_CONSOLE_SCREENSHOTS") else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(where / f"{name}.png"), full_page=True)


class Client:
    """A signed-in HTTP client of the console (the session cookie carried by hand: it is
    ``Secure``, which a plain-HTTP cookie jar would withhold)."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.cookie = ""
        status, _, headers = self.request("POST", "/sign-in", {"name": "ada", "password": PASSWORD})
        assert status == 303, status
        self.cookie = headers["set-cookie"].split(";", 1)[0]

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None
    ) -> tuple[int, str, dict[str, str]]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        headers = {"cookie": self.cookie} if self.cookie else {}
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            headers["content-type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            text = response.read().decode("utf-8")
            return response.status, text, {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
