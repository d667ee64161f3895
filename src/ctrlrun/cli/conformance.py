"""``ctrlrun conformance --store-url URL``: grade a store backend against the store contract.

Progress goes to stderr, the report to stdout. Exit 0 when every applicable case passed (and
at least one applied), 1 otherwise, 2 for a refused configuration (one line ``Error: …``).

The URL chooses the backend and where its scratch storage lives; the store it names is never
opened. ``sqlite:///dir/state.db`` runs each case in a private subdirectory of ``dir`` (so the
filesystem the store really lives on is the one graded), removed afterwards;
``postgresql://…`` runs each case in a private schema of that database, dropped afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from ctrlrun.cli.common import checked_store_url, error_text, say_lines
from ctrlrun.cli.replication import replication_of, text_line, with_replication
from ctrlrun.display import escape_text
from ctrlrun.errors import CtrlrunError
from ctrlrun.store.url import parse_store_url

LABELS = {"pass": "PASS", "fail": "FAIL", "n/a": "N/A"}


def refuse(message: str, code: int = 2) -> NoReturn:
    """One line ``Error: …`` on stderr (escaped, as every refusal is), then exit ``code``."""
    click.echo(f"Error: {error_text(message)}", err=True)
    raise click.exceptions.Exit(code)


def backend_for(url: str) -> Any:
    """The conformance backend for a store URL; ``CtrlrunError`` if it cannot be used."""
    from ctrlrun.conformance.store import PostgresBackend, SQLiteBackend
    from ctrlrun.errors import InvalidArgument, MissingDependency

    parsed = parse_store_url(url)
    if parsed.kind == "sqlite":
        directory = Path(parsed.target).expanduser().absolute().parent
        if not directory.is_dir():
            raise InvalidArgument(f"no directory {directory} for the scratch stores")
        return SQLiteBackend(directory)
    try:
        import psycopg  # noqa: F401
    except ModuleNotFoundError as exc:
        raise MissingDependency(module="psycopg", extra="postgres") from exc
    try:
        import ctrlrun.postgres  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ModuleNotFoundError as exc:
        raise InvalidArgument("this build of ctrlrun has no Postgres store") from exc
    return PostgresBackend(url)


def _live(progress: bool | None) -> Any:
    """The progress display: when asked, or by default when a person watches stderr."""
    return _progress if (sys.stderr.isatty() if progress is None else progress) else None


def _progress(index: int, total: int, name: str, result: Any) -> None:
    if result is None:
        click.echo(f"[{index:>2}/{total}] {name} …", err=True, nl=False)
        sys.stderr.flush()
    else:
        click.echo(f" {LABELS[str(result.status)]} ({result.seconds:.1f}s)", err=True)


@click.command("conformance")
@click.option(
    "--store-url",
    required=True,
    metavar="URL",
    callback=checked_store_url,
    help="sqlite:///dir/state.db or postgresql://… (the store itself is never opened).",
)
@click.option("--only", default="", metavar="NAMES", help="Comma-separated cases or suites.")
@click.option("--processes", default=8, show_default=True, help="Contending OS processes.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress lines on stderr (default: only when stderr is a terminal).",
)
def conformance(
    store_url: str, only: str, processes: int, as_json: bool, progress: bool | None
) -> None:
    """Run the store conformance suite against a backend, each case on scratch storage."""
    from ctrlrun.conformance.store import run
    from ctrlrun.conformance.store.runner import select

    names = [name.strip() for name in only.split(",") if name.strip()]
    try:
        backend = backend_for(store_url)
        select(names)
        if processes < 2:
            refuse(f"--processes must be at least 2, got {processes}")
    except CtrlrunError as exc:
        refuse(exc.message)
    report = run(backend, only=names, processes=processes, progress=_live(progress))
    replication = replication_of(store_url)
    if as_json:
        shown = report.to_json()
        if replication is not None:
            shown = with_replication(shown, replication)
        for line in shown.split("\n"):  # indented JSON: escape each line
            click.echo(escape_text(line, json=True))
    else:
        if replication is not None:  # first: the summary stays the last line
            say_lines(text_line(replication))
        say_lines(report.to_text())
    raise click.exceptions.Exit(0 if report.ok else 1)


__all__ = ["conformance"]
