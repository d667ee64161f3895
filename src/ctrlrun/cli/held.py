"""``ctrlrun receipts --check FILE|-``: receipts a caller holds, checked against the store."""

from __future__ import annotations

import json
from typing import IO, Any, Final

import click

from ctrlrun.cli.common import Refusal, json_line, table
from ctrlrun.kernel.held import HeldCheck, HeldStatus, StoredIndex, check_held
from ctrlrun.store.protocol import StateStore

HEADER: Final = ("STATUS", "SEQ", "RECEIPT ID", "FOUND", "DETAIL")
MAX_LINE: Final = 10 * 1024 * 1024


def read_held(source: IO[str]) -> list[Any]:
    """One held copy per non-blank line (JSON); a line that is not JSON is kept as a marker
    that judges ``not_a_receipt`` with its line number."""
    held: list[Any] = []
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            held.append(json.loads(line) if len(line) <= MAX_LINE else _Unreadable(number))
        except ValueError:
            held.append(_Unreadable(number))
    return held


class _Unreadable:
    def __init__(self, line: int) -> None:
        self.line = line


def check_file(store: StateStore, source: IO[str], *, as_json: bool) -> None:
    """Print each held receipt's verdict; ``Refusal`` (exit 1) unless every one is present."""
    held = read_held(source)
    index = StoredIndex(store.receipts())
    checks = [_judge(one, index) for one in held]
    if as_json:
        for check in checks:
            json_line(check.to_dict())
    elif checks:
        table([_row(c) for c in checks], header=HEADER, color_column=0)
    else:
        raise Refusal("the file holds no receipts to check")
    bad = [c for c in checks if not c.ok]
    if bad:
        counts = {
            s: sum(c.status is s for c in bad) for s in HeldStatus if s is not HeldStatus.PRESENT
        }
        said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        raise Refusal(
            f"{len(bad)} of {len(checks)} held receipts are not in the store as held ({said})"
        )
    if not as_json:
        click.echo(f"all {len(checks)} held receipts are present and identical")


def _judge(one: Any, index: StoredIndex) -> HeldCheck:
    if isinstance(one, _Unreadable):
        return HeldCheck(None, None, HeldStatus.NOT_A_RECEIPT, detail=f"line {one.line}: not JSON")
    return check_held(one, index)


def _row(check: HeldCheck) -> tuple[str, ...]:
    seq = "-" if check.seq is None else str(check.seq)
    return (str(check.status), seq, check.receipt_id or "-", check.found or "", check.detail)
