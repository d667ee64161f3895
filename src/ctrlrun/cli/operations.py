"""``ctrlrun operations``: list long-running operations and reap abandoned ones."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ctrlrun.cli.common import when
from ctrlrun.cli.durable_common import (
    emit_json,
    open_operator_store,
    refusals,
    store_option,
    table,
)
from ctrlrun.kernel.operation import OperationStatus


@click.group("operations")
def operations_group() -> None:
    """Long-running external operations: started once, then only polled."""


def _operations(store_url: str | None, *, writing: bool = False) -> Any:
    from ctrlrun.durable.operations import Operations

    return Operations(open_operator_store(store_url, writing=writing))


def _rows(records: Any) -> list[tuple[str, ...]]:
    return [
        (
            r.operation_id,
            str(r.status),
            r.kind,
            r.resource,
            r.remote_id or "-",
            when(r.lease_expires_at),
            "yes" if r.reconcile else "-",
        )
        for r in records
    ]


HEADERS = ("OPERATION", "STATUS", "KIND", "RESOURCE", "REMOTE", "LEASE", "RECONCILE")


@operations_group.command("list")
@click.option(
    "--status",
    type=click.Choice([str(s) for s in OperationStatus]),
    help="Only operations in this status.",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@store_option
def list_operations(status: str | None, as_json: bool, store_url: str | None) -> None:
    """Operations, oldest first."""
    with refusals():
        records = _operations(store_url).list(status)
        if as_json:
            emit_json(*(dataclasses.asdict(r) for r in records))
        else:
            click.echo(table(HEADERS, _rows(records)))


@operations_group.command("reap")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@store_option
def reap_operations(as_json: bool, store_url: str | None) -> None:
    """Drop the lapsed claims of abandoned running operations; flag unknown starts for
    reconciliation. Never restarts anything."""
    with refusals():
        moved = _operations(store_url, writing=True).reap()
        if as_json:
            emit_json(*(dataclasses.asdict(r) for r in moved))
            return
        click.echo(table(HEADERS, _rows(moved)) if moved else "nothing to reap")
