"""The bench sections ``scale_curve.py`` and ``server_work.py`` run end to end against a real
Postgres (the test session's server) and print the shape ``make bench`` promises: one curve row
per process count with ratios to the floor, and per-call server figures for floor and ctrlrun."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import scale_curve  # noqa: E402

pytestmark = pytest.mark.postgres


def _run(pg_server, *args: str) -> str:
    env = {**os.environ, "CTRLRUN_BENCH_POSTGRES_URL": pg_server.url}
    done = subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=BENCH,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_default_counts_double_up_to_twice_the_cores() -> None:
    assert scale_curve.default_counts(2) == [1, 2, 4]
    assert scale_curve.default_counts(3) == [1, 2, 4, 6]
    assert scale_curve.default_counts(16) == [1, 2, 4, 8, 16, 32]


def test_scale_curve_prints_one_row_per_count_with_ratios(pg_server) -> None:
    out = _run(pg_server, "scale_curve.py", "--counts", "1,2", "--window", "0.3")
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s", line)]
    assert [r[0] for r in rows] == ["1", "2"]
    for row in rows:
        floor, chain, one, ours = (float(x.replace(",", "")) for x in row[1:5])
        assert floor > 0 and chain > 0 and one > 0 and ours > 0
        assert float(row[5]) == pytest.approx(chain / floor, abs=0.01)
        assert float(row[6]) == pytest.approx(one / floor, abs=0.01)
        assert float(row[7]) == pytest.approx(ours / floor, abs=0.01)


def test_server_work_counts_the_rows_a_protected_call_writes(pg_server) -> None:
    out = _run(pg_server, "server_work.py", "--calls", "50")
    floor, ours = out.split("Postgres server work, ctrlrun")
    assert "table floor_r" in floor and "ins  1.00" in floor
    assert "total rows 2.00" in floor
    assert "table receipts" in ours and "function ctrlrun_reserve_effect" in ours
    assert re.search(r"total rows \d+\.\d\d  index entries \d+\.\d\d  WAL \d+ B", ours)
    # CPU per call: the client's, and the server backend's when it runs here (it does)
    for part in (floor, ours):
        assert re.search(r"CPU per call: client \d+ µs, server \d+ µs \(its backend\)", part)
    assert re.search(r"CPU per call, client and server: ctrlrun \d+ µs, floor \d+ µs", out)
