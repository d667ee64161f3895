"""What the durable command families share: opening the operator's store, one-line errors,
aligned tables."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from ctrlrun.cli.common import (
    STORE_URL_ENV,
    Refusal,
    checked_store_url,
    default_store_url,
    json_line,
    person_option,
)
from ctrlrun.display import escape_text
from ctrlrun.errors import CtrlrunError

STORE_URL_HELP = (
    "sqlite:///path or postgresql://…?ctrlrun_schema=name (or $CTRLRUN_STORE_URL;"
    " default: .ctrlrun/state.db beside the policy file)"
)


def store_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--store-url``, read from ``$CTRLRUN_STORE_URL`` when not given (an empty one is
    refused, as every command refuses it)."""
    option = click.option(
        "--store-url", envvar=STORE_URL_ENV, callback=checked_store_url, help=STORE_URL_HELP
    )
    return option(fn)


def open_operator_store(url: str | None, *, writing: bool = False) -> Any:
    """The store ``url`` names, else ``.ctrlrun/state.db`` beside the policy file. It must
    already exist at the current schema: these commands create and migrate nothing; unless
    ``writing`` (a person's answer), they open it read-only (``open_store(read_only=True)``)."""
    from ctrlrun.store import open_store

    target = default_store_url() if url is None else url
    return open_store(target, existing=True, read_only=not writing)


USER_ENV = "CTRLRUN_USER"
"""The old name of ``$CTRLRUN_AS`` for ``plans`` and ``outbox``, still read for one release."""

durable_person_option = person_option(default=None, legacy_flags=("--by",), legacy_env=(USER_ENV,))
"""``--as NAME`` (the old ``--by`` still works), ``$CTRLRUN_AS`` (or the old
``$CTRLRUN_USER``); without any, the OS user (``default_person``)."""


def default_person() -> str:
    """Who is answering, when neither ``--as`` nor ``$CTRLRUN_AS`` names anyone: the OS
    user."""
    return os.environ.get(USER_ENV) or getpass.getuser()


@contextmanager
def refusals() -> Iterator[None]:
    """Any ctrlrun error becomes one line ``Error: …`` on stderr (escaped, as every refusal
    is) and exit status 1."""
    try:
        yield
    except CtrlrunError as exc:
        raise Refusal(str(exc)) from exc


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain, aligned, greppable columns; every cell escaped (``escape_text``), so a value
    can neither span two rows nor steer the terminal."""
    lines = [[escape_text(str(cell)) for cell in line] for line in (headers, *rows)]
    widths = [max(len(cell) for cell in column) for column in zip(*lines, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def emit_json(*documents: Any) -> None:
    """Each document as one JSON line (keys sorted, datetimes as ISO text), like every other
    ``--json`` listing of the command line; nothing at all for no documents."""
    for document in documents:
        json_line(document)
