"""Real overlap between OS processes, and counters that survive process boundaries.

Used by the store conformance suite and by ``ctrlrun verify`` (G4). Standard library only.

* ``arrive`` is a file barrier: each process creates ``arrived-<pid>`` with an exclusive create
  and waits until ``parties`` such files exist, so every contender is alive and ready before any
  of them proceeds. The parent checks ``arrivals`` afterwards: a barrier nobody reached proves
  nothing.
* ``mark_once`` is an exclusive-create marker: a fake remote that leaves one file per call, so
  "called exactly once" is visible across processes.
* ``run_workers`` starts one ``python -m <module> <payload file>`` per payload, all before any is
  collected, waits for all of them within one deadline, and kills stragglers on every exit.

Every wait is bounded; a timeout raises ``TimeoutError`` (a red result, never a hang).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

ARRIVED: Final = "arrived-"
POLL: Final = 0.0005


def arrive(directory: str | os.PathLike[str], parties: int, *, timeout: float) -> None:
    """Announce this process at the barrier in ``directory`` and wait for ``parties`` in all.

    Raises ``TimeoutError`` if they have not all arrived within ``timeout`` seconds.
    """
    folder = Path(directory)
    mark_once(folder / f"{ARRIVED}{os.getpid()}")
    deadline = time.monotonic() + timeout
    while len(arrivals(folder)) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(arrivals(folder))} of {parties} arrived within {timeout}s")
        time.sleep(POLL)


def arrivals(directory: str | os.PathLike[str]) -> list[int]:
    """The pids that have arrived at the barrier in ``directory``."""
    return sorted(
        int(name[len(ARRIVED) :]) for name in os.listdir(directory) if name.startswith(ARRIVED)
    )


def mark_once(path: str | os.PathLike[str], content: str = "") -> bool:
    """Create ``path`` exclusively; True if this call created it, False if it existed."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, content.encode("utf-8"))
    finally:
        os.close(fd)
    return True


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """One worker's exit: its pid, exit code, the JSON object it printed last, its stderr."""

    pid: int
    returncode: int
    output: dict[str, Any] | None
    stderr: str


def run_workers(
    module: str,
    payloads: Sequence[Mapping[str, Any]],
    workdir: str | os.PathLike[str],
    *,
    timeout: float,
) -> list[WorkerResult]:
    """Run ``python -m module <payload file>`` once per payload, concurrently.

    Every process is started before any is waited for; all must exit within ``timeout``
    seconds in total or ``TimeoutError`` is raised. Any process still running when this
    returns or raises is killed. Children inherit the environment (so a mutation installed
    through ``PYTHONPATH`` reaches them too) and this interpreter.
    """
    folder = Path(workdir)
    procs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    try:
        for index, payload in enumerate(payloads):
            source = folder / f"payload-{index}.json"
            source.write_text(json.dumps(payload), encoding="utf-8")
            out, err = folder / f"stdout-{index}", folder / f"stderr-{index}"
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                    [sys.executable, "-m", module, str(source)],
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                )
            procs.append((proc, out, err))
        return [_collect(proc, out, err, time.monotonic() + timeout) for proc, out, err in procs]
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def _collect(proc: subprocess.Popen[bytes], out: Path, err: Path, deadline: float) -> WorkerResult:
    try:
        code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"worker {proc.pid} did not finish in time") from exc
    lines = [line for line in out.read_text("utf-8", "replace").splitlines() if line.strip()]
    output: dict[str, Any] | None = None
    if lines:
        try:
            parsed = json.loads(lines[-1])
        except ValueError:
            parsed = None
        output = parsed if isinstance(parsed, dict) else None
    return WorkerResult(proc.pid, code, output, err.read_text("utf-8", "replace")[-4000:])


def worker_payload() -> dict[str, Any]:
    """In a worker: the JSON payload whose file the parent passed as the only argument."""
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m <worker module> <payload.json>")
    data = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise SystemExit("the payload must be a JSON object")
    return data


def worker_reply(result: Mapping[str, Any]) -> None:
    """In a worker: print the one JSON object the parent reads."""
    sys.stdout.write(json.dumps(dict(result), default=str) + "\n")
    sys.stdout.flush()
