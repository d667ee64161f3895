"""Instructions per protected SQLite call, counted by valgrind's callgrind: exact and repeatable
where time on a shared machine is not.

The bench's ``@protect`` call with an effect key at ``normal`` (``ctrlrun``), and the same
statements replayed with no pipeline (``sql``, ``sqlite_bench.Replay``); on Postgres (sides
``pg`` and ``pgfloor``, the client only: the server runs outside callgrind) the same call and
the floor's two single-row inserts (``pg_common.Floor``). Each side runs under
callgrind twice, with ``N`` and ``2N`` calls after the same warm-up; the difference divided by
``N`` is one call, free of start-up and import. ``--src DIR`` measures another checkout's
``src`` (an exported commit) with the same driver.

``python call_instructions.py [--calls N] [--side ctrlrun|sql|pg|pgfloor ...] [--src DIR]``
(``pg`` sides: ``$CTRLRUN_BENCH_POSTGRES_URL`` or a throwaway embedded cluster)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

WARMUP = 100
SIDES = ("ctrlrun", "sql", "pg", "pgfloor")
_PG_SCHEMA = "CTRLRUN_INSTRUCTIONS_SCHEMA"  # the parent's schema, passed to the measured runs


def drive(side: str, calls: int) -> None:
    """The measured process: a warm-up, then ``calls`` calls of ``side``."""
    from sqlite_bench import Replay, open_control, protected_op

    import ctrlrun

    with tempfile.TemporaryDirectory() as tmp, ctrlrun.context(agent="bench"):
        if side.startswith("pg"):
            op = _pg_op(side, Path(tmp))
        elif side == "sql":
            op = Replay(Path(tmp), "normal").op
        else:
            op = protected_op(open_control(Path(tmp), "normal"), effect=True)
        for i in range(1, WARMUP + 1):
            op(i)
        for i in range(WARMUP + 1, WARMUP + 1 + calls):
            op(i)


def _pg_op(side: str, tmp: Path) -> Callable[[int], object]:
    import pg_common

    import ctrlrun

    url, schema = os.environ[pg_common.ENV_URL], os.environ[_PG_SCHEMA]
    if side == "pgfloor":
        return pg_common.Floor(url, schema).call
    act = ctrlrun.protect("bench.effect", control=pg_common.control(url, schema, tmp))(lambda n: n)
    tag = os.urandom(4).hex()  # each measured run's keys are its own
    return lambda i: act(f"{tag}:{i}")


def instructions(side: str, calls: int, src: str | None) -> int:
    """Instructions callgrind counts over a whole run of ``calls`` calls."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--drive",
                side,
                "--calls",
                str(calls),
            ],
            env=env,
            check=True,
            capture_output=True,
            cwd=Path(__file__).parent,
        )
        found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
        if found is None:
            raise SystemExit("callgrind wrote no total")
        return int(found.group(1))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="N (default 300)")
    parser.add_argument("--side", choices=SIDES, action="append")
    parser.add_argument("--src", help="the src directory to measure (default: the installed)")
    parser.add_argument("--drive", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        drive(args.drive, args.calls)
        return 0
    sides = args.side or ["ctrlrun", "sql"]
    with _postgres(any(side.startswith("pg") for side in sides)):
        per_call = {side: _per_call(side, args.calls, args.src) for side in sides}
    for ours, floor, target in (("ctrlrun", "sql", " (target ≤ 2×)"), ("pg", "pgfloor", "")):
        if ours in per_call and floor in per_call:
            print(f"{ours} ÷ {floor} {per_call[ours] / per_call[floor]:.2f}×{target}")
    return 0


def _per_call(side: str, calls: int, src: str | None) -> float:
    once = instructions(side, calls, src)
    twice = instructions(side, 2 * calls, src)
    per_call = (twice - once) / calls
    print(f"{side:8s}{per_call / 1000:9.1f}k instructions per call", flush=True)
    return per_call


@contextmanager
def _postgres(wanted: bool) -> Iterator[None]:
    """For the ``pg`` sides: a server and a fresh schema, named to the measured runs through
    the environment, dropped afterwards."""
    if not wanted:
        yield
        return
    import pg_common

    with pg_common.server() as url:
        schema = pg_common.new_schema(url, "instructions")
        os.environ[pg_common.ENV_URL], os.environ[_PG_SCHEMA] = url, schema
        try:
            yield
        finally:
            pg_common.drop_schema(url, schema)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
