"""Where the tests' clocks start: one clock for every test, ``ctrlrun.testing.ManualClock``
(an injected clock replaces the database's clock on Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime

DEFAULT_START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
