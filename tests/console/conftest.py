"""Console fixtures: a store written by real protected calls, the real `ctrlrun console`
process serving it on loopback, and one headless Debian Chromium (via Playwright) per session.

The browser is Debian's (/usr/bin/chromium, installed by scripts/install-chromium.sh when
absent); Playwright never downloads one. Under CI=true a browser that cannot start fails the
run instead of skipping it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.console import Agents, Console, sign_in

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
INSTALL = ROOT / "scripts" / "install-chromium.sh"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the browser tests cannot run: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Chromium per test module. Not per session: Playwright's sync API keeps an
    event loop running on the main thread while it is open, which would make every later
    ``asyncio.run`` in the session fail; closing it with the module ends that loop."""
    if not CHROMIUM.exists():
        done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            _unavailable(f"installing chromium failed: {done.stderr.strip()}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        _unavailable(f"playwright is not installed: {exc}")
    with sync_playwright() as p:
        try:
            launched = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        except Exception as exc:
            _unavailable(f"chromium did not start: {exc}")
        yield launched
        launched.close()


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    built = Agents(tmp_path)
    yield built
    built.store.close()


@pytest.fixture
def console(tmp_path: Path, agents: Agents) -> Iterator[Console]:
    served = Console(tmp_path, agents.path)
    yield served
    served.stop()


@pytest.fixture
def page(browser, console: Console) -> Iterator[object]:
    """A fresh browser context (its own cookies and storage), signed in as ada."""
    context = browser.new_context(base_url=console.url, viewport={"width": 1200, "height": 800})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    sign_in(tab)
    yield tab
    context.close()
