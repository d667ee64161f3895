"""Instructions per protected SQLite call, counted by valgrind's callgrind: exact and repeatable
where time on a shared machine is not.

The bench's ``@protect`` call with an effect key at ``normal`` (``ctrlrun``), and the same
statements replayed with no pipeline (``sql``, ``sqlite_bench.Replay``). Each side runs under
callgrind twice, with ``N`` and ``2N`` calls after the same warm-up; the difference divided by
``N`` is one call, free of start-up and import. ``--src DIR`` measures another checkout's
``src`` (an exported commit) with the same driver.

``python call_instructions.py [--calls N] [--side ctrlrun|sql ...] [--src DIR]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

WARMUP = 100


def drive(side: str, calls: int) -> None:
    """The measured process: a warm-up, then ``calls`` calls of ``side``."""
    from sqlite_bench import Replay, open_control, protected_op

    import ctrlrun

    with tempfile.TemporaryDirectory() as tmp, ctrlrun.context(agent="bench"):
        if side == "sql":
            op = Replay(Path(tmp), "normal").op
        else:
            op = protected_op(open_control(Path(tmp), "normal"), effect=True)
        for i in range(1, WARMUP + 1):
            op(i)
        for i in range(WARMUP + 1, WARMUP + 1 + calls):
            op(i)


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
    parser.add_argument("--side", choices=("ctrlrun", "sql"), action="append")
    parser.add_argument("--src", help="the src directory to measure (default: the installed)")
    parser.add_argument("--drive", choices=("ctrlrun", "sql"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        drive(args.drive, args.calls)
        return 0
    per_call = {}
    for side in args.side or ("ctrlrun", "sql"):
        once = instructions(side, args.calls, args.src)
        twice = instructions(side, 2 * args.calls, args.src)
        per_call[side] = (twice - once) / args.calls
        print(f"{side:8s}{per_call[side] / 1000:9.1f}k instructions per call", flush=True)
    if len(per_call) == 2:
        print(f"ctrlrun ÷ sql {per_call['ctrlrun'] / per_call['sql']:.2f}×  (target ≤ 2×)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
