"""The server's work for one protected call on Postgres, against the floor's, from the
server's own statistics: rows written per table, index entries written (each insert or
non-HOT update writes one entry per index of its table), index scans (an index nobody scans
is a cut candidate), the functions run and their time (``track_functions = all``), WAL, and
CPU per call: the client's (``time.process_time``) and its server backend's (from ``/proc``,
when the server runs on this machine), the figure issue 28's "CPU <= 3x the floor" is about.

Run with ``make bench`` or ``python server_work.py [--calls N]`` from this directory; the
server is ``$CTRLRUN_BENCH_POSTGRES_URL`` or a throwaway embedded cluster (as postgres_bench).
The figures are deltas over N calls divided by N, one client, fresh keys; each workload's
connection is closed before the read, so its counters are flushed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pg_common
import psycopg
from psycopg.rows import dict_row

import ctrlrun

_TABLES = """SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
    (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid) AS indexes
  FROM pg_stat_user_tables t WHERE schemaname = %s"""
_INDEXES = "SELECT relname, indexrelname, idx_scan FROM pg_stat_user_indexes WHERE schemaname = %s"
_FUNCTIONS = """SELECT funcname, calls, total_time, self_time
  FROM pg_stat_user_functions WHERE schemaname = %s"""
_OTHERS = """SELECT count(*) FROM pg_stat_activity
  WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"""
_BACKENDS = """SELECT pid FROM pg_stat_activity
  WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"""
_WAL = "SELECT pg_current_wal_insert_lsn() AS lsn, wal_records, wal_fpi FROM pg_stat_wal"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def backend_cpu(url: str) -> dict[int, float] | None:
    """CPU seconds used so far by each client backend but ours, from ``/proc``: None when the
    server does not run on this machine (or this is not Linux)."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(_BACKENDS)]
    try:
        return {pid: _cpu_seconds(pid) for pid in pids}
    except OSError:
        return None


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def snapshot(url: str, schema: str) -> dict[str, dict[str, Any]]:
    """The server's counters now, keyed by kind then object name."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        out: dict[str, dict[str, Any]] = {}
        out["tables"] = {r["relname"]: r for r in conn.execute(_TABLES, (schema,))}
        out["indexes"] = {r["indexrelname"]: r for r in conn.execute(_INDEXES, (schema,))}
        out["functions"] = {r["funcname"]: r for r in conn.execute(_FUNCTIONS, (schema,))}
        wal = conn.execute(_WAL).fetchone()
        assert wal is not None
        lsn = conn.execute("SELECT %s::pg_lsn - '0/0'::pg_lsn AS b", (wal["lsn"],)).fetchone()
        assert lsn is not None
        out["wal"] = {
            "bytes": float(lsn["b"]),
            "records": wal["wal_records"],
            "fpi": wal["wal_fpi"],
        }
        return out


def _delta(after: dict[str, Any], before: dict[str, Any] | None, field: str) -> float:
    return float(after[field]) - (float(before[field]) if before else 0.0)


def report(
    title: str, before: dict[str, Any], after: dict[str, Any], calls: int
) -> dict[str, float]:
    """Print per-call figures; return the totals (rows, index entries, WAL bytes) per call."""
    print(f"{title}: per call, over {calls} calls")
    rows = entries = 0.0
    for name, t in sorted(after["tables"].items()):
        b = before["tables"].get(name)
        ins, upd, hot, dele = (
            _delta(t, b, f) for f in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del")
        )
        if ins or upd or dele:
            written = (ins + upd - hot) * int(t["indexes"])
            rows += ins + upd + dele
            entries += written
            print(
                f"  table {name:<28} ins {ins / calls:5.2f}  upd {upd / calls:5.2f}"
                f" (HOT {hot / calls:4.2f})  del {dele / calls:5.2f}  index entries"
                f" {written / calls:5.2f} ({t['indexes']} indexes)"
            )
    written_tables = {
        n for n, t in after["tables"].items() if _delta(t, before["tables"].get(n), "n_tup_ins")
    }
    unread = [
        n
        for n, i in after["indexes"].items()
        if i["relname"] in written_tables and not _delta(i, before["indexes"].get(n), "idx_scan")
    ]
    for name, f in sorted(after["functions"].items()):
        b = before["functions"].get(name)
        n = _delta(f, b, "calls")
        if n:
            print(
                f"  function {name:<25} calls {n / calls:5.2f}"
                f"  total {_delta(f, b, 'total_time') * 1e3 / calls:7.1f} µs"
                f"  self {_delta(f, b, 'self_time') * 1e3 / calls:7.1f} µs"
            )
    wal = {k: _delta(after["wal"], before["wal"], k) / calls for k in ("bytes", "records", "fpi")}
    print(
        f"  total rows {rows / calls:.2f}  index entries {entries / calls:.2f}"
        f"  WAL {wal['bytes']:.0f} B"
        f" in {wal['records']:.1f} records ({wal['fpi']:.2f} full pages)"
    )
    if unread:
        print(f"  indexes written but not scanned during the calls: {', '.join(sorted(unread))}")
    return {"rows": rows / calls, "entries": entries / calls, "wal": wal["bytes"]}


def measure(url: str, calls: int) -> dict[str, dict[str, float]]:
    """Floor, then ctrlrun, each in a fresh schema; returns per-call totals by workload."""
    # the workloads' sessions count their function calls; nothing server-wide changes
    traced = url + ("&" if "?" in url else "?") + "options=-c%20track_functions%3Dall"
    out: dict[str, dict[str, float]] = {}
    for kind in ("floor", "ctrlrun"):
        schema = pg_common.new_schema(url, f"w_{kind}")
        try:
            out[kind] = _one(traced, schema, kind, calls)
        finally:
            pg_common.drop_schema(url, schema)
    return out


def _workload(
    url: str, schema: str, kind: str, workdir: str
) -> tuple[Callable[[int], Any], Callable[[], None]]:
    """The call and its closer, on a fresh connection."""
    if kind == "floor":
        floor = pg_common.Floor(url, schema)
        return floor.call, floor.close
    ctl = pg_common.control(url, schema, Path(workdir))
    act = ctrlrun.protect("bench.effect", control=ctl)(lambda n: n)
    return lambda i: act(f"w{i}"), ctl.store.close  # type: ignore[attr-defined]


def _quiet(url: str) -> None:
    """Wait until no other client backend is connected: each one flushes its counters as it
    exits, after the client has closed its end."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(500):
            row = conn.execute(_OTHERS).fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.01)


def _one(url: str, schema: str, kind: str, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as workdir, ctrlrun.context(agent="bench"):
        call, close = _workload(url, schema, kind, workdir)
        for i in range(20):  # first-call setup is not per-call work
            call(-1 - i)
        close()
        _quiet(url)
        before = snapshot(url, schema)
        call, close = _workload(url, schema, kind, workdir)
        call(0)  # connected: its backend is the one measured, over the other calls
        server, client = backend_cpu(url), time.process_time()
        for i in range(1, calls):
            call(i)
        client = time.process_time() - client
        server_after = backend_cpu(url)
        close()
        _quiet(url)
        totals = report(f"Postgres server work, {kind}", before, snapshot(url, schema), calls)
    timed = max(calls - 1, 1)
    totals["client_us"] = client / timed * 1e6
    if server is not None and server_after is not None:
        used = sum(server_after[pid] - server.get(pid, 0.0) for pid in server_after)
        totals["server_us"] = used / timed * 1e6
    _show_cpu(totals)
    return totals


def _show_cpu(totals: dict[str, float]) -> None:
    server = totals.get("server_us")
    shown = "not on this machine" if server is None else f"{server:.0f} µs (its backend)"
    print(f"  CPU per call: client {totals['client_us']:.0f} µs, server {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with pg_common.server() as url:
        out = measure(url, args.calls)
    floor, ours = out["floor"], out["ctrlrun"]
    if "server_us" in floor and "server_us" in ours:
        total = {k: v["client_us"] + v["server_us"] for k, v in out.items()}
        print(
            f"CPU per call, client and server: ctrlrun {total['ctrlrun']:.0f} µs,"
            f" floor {total['floor']:.0f} µs ({total['ctrlrun'] / total['floor']:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
