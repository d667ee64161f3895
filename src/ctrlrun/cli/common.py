"""What every ``ctrlrun`` command shares: finding and opening the store, turning any failure
into one ``Error: …`` line and an exit code, and printing tables and JSON lines.

Exit codes: 0 ok; 1 refused (one line ``Error: …`` on stderr, nothing written); 2 usage (click's
own errors). ``CtrlrunGroup.invoke`` is the one place that maps exceptions to them, so no input
can end in a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from ctrlrun._time import display_instant, encode_instant
from ctrlrun.display import escape_text
from ctrlrun.errors import CtrlrunError
from ctrlrun.loopback import is_loopback
from ctrlrun.runtime.locate import default_store_path, policy_path
from ctrlrun.store.protocol import StateStore

F = TypeVar("F", bound=Callable[..., Any])

CLI_PERSON: Final = "cli:local"
"""Who a shell answer is recorded as: the CLI cannot verify a person, so it says where from."""

STORE_URL_ENV: Final = "CTRLRUN_STORE_URL"
DEBUG_ENV: Final = "CTRLRUN_DEBUG"


def error_text(message: object) -> str:
    """``message`` as the text of one ``Error: …`` line: everything a terminal could act on
    escaped (``escape_text``; a line break shows as ``\\n``), so no message can forge a
    second line or steer the screen, and nothing in it is hidden."""
    return escape_text(str(message).strip()) or "refused"


class Refusal(click.ClickException):
    """A refusal shown as exactly one line, ``Error: <message>``, with exit code 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(error_text(message))


def listen_address(value: str, *, allow_remote: bool, what: str) -> tuple[str, int]:
    """``--listen HOST:PORT`` as ``(host, port)``: an IPv6 host may be bracketed, the port is
    0-65535 (0: any free one). A non-loopback host is refused unless ``allow_remote``, naming
    ``what`` would be exposed. ``Refusal`` for anything else."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise Refusal(f"--listen takes HOST:PORT with a port of 0-65535, got {value!r}")
    if not is_loopback(host) and not allow_remote:
        raise Refusal(f"refusing to listen on {host}: pass --allow-remote to expose the {what}")
    return host, int(port)


class CtrlrunGroup(click.Group):
    """The ``ctrlrun`` group: maps every exception a command raises to an exit code.

    Click's own usage errors keep exit 2; ``CtrlrunError`` and ``OSError`` become a one-line
    refusal (exit 1); anything else is reported the same way, naming its type, unless
    ``$CTRLRUN_DEBUG`` is set (then it propagates with its traceback, for a bug report).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        """In the order they were added (the order an operator meets them), not sorted."""
        return list(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            _silence_stdout()  # `ctrlrun receipts | head`: the reader left, nothing is wrong
            raise click.exceptions.Exit(0) from None
        except CtrlrunError as exc:
            raise Refusal(exc.message) from exc
        except UnicodeError as exc:  # e.g. an argument holding bytes that are not UTF-8
            reason = getattr(exc, "reason", None) or exc
            raise Refusal(f"not valid UTF-8 text: {reason}") from exc
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise Refusal(f"{where}{exc.strerror or exc}") from exc
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            raise Refusal(
                f"unexpected {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)"
            ) from exc


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (e.g. under a test runner)
        pass


# --- the store ---------------------------------------------------------------------------


def store_url_option(fn: F) -> F:
    """``--store-url`` (or ``$CTRLRUN_STORE_URL``); without either, the default store. An
    empty value, given or in the environment, is refused (``checked_store_url``)."""
    option = click.option(
        "--store-url",
        envvar=STORE_URL_ENV,
        metavar="URL",
        callback=checked_store_url,
        help="sqlite:///path/to/state.db or postgresql://…[?ctrlrun_schema=name]"
        f" (env {STORE_URL_ENV}; default: .ctrlrun/state.db beside the policy).",
    )
    return option(fn)


def checked_store_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """The option's value, refusing an empty one: click reads a set-but-empty
    ``$CTRLRUN_STORE_URL`` as unset, which would silently point at another store."""
    if value is None and os.environ.get(STORE_URL_ENV) is not None:
        value = os.environ[STORE_URL_ENV]
    if value is not None and not value.strip():
        where = "--store-url" if os.environ.get(STORE_URL_ENV) is None else STORE_URL_ENV
        raise Refusal(
            f"{where} is empty: give sqlite:///path/to/state.db or postgresql://…, or unset"
            f" {STORE_URL_ENV} to use the store beside the policy"
        )
    return value


def default_store_url() -> str:
    """``sqlite://`` + ``.ctrlrun/state.db`` beside the policy (``$CTRLRUN_CONFIG`` or
    ``./ctrlrun.yaml``). The policy must be a readable file, so that a mistyped
    ``CTRLRUN_CONFIG`` is reported instead of pointing silently at another store. It is not
    parsed: evidence stays readable while the policy is being fixed."""
    policy = policy_path()
    if not policy.exists():
        raise Refusal(
            f"no policy file at {policy.absolute()}, so no default store: run `ctrlrun init`,"
            f" or pass --store-url (or set {STORE_URL_ENV})"
        )
    try:
        with policy.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise Refusal(
            f"cannot read the policy file {policy.absolute()}: {exc.strerror or exc}"
        ) from exc
    return sqlite_url(default_store_path(policy))


def sqlite_url(path: Path) -> str:
    """The ``sqlite://`` URL of ``path`` (absolute paths give the usual three slashes)."""
    return f"sqlite://{path}"


@contextmanager
def existing_store(store_url: str | None, *, writing: bool = False) -> Iterator[StateStore]:
    """The operator's store, opened without creating or migrating anything, and read-only
    (``open_store(read_only=True)``) unless ``writing`` (a person's answer).

    A missing store, or one whose schema is behind or ahead of this ctrlrun, is refused
    (``SchemaMismatch``) with what to do about it. Closed on exit.
    """
    from ctrlrun.store import open_store, parse_store_url

    url = default_store_url() if store_url is None else store_url
    parsed = parse_store_url(url)
    if parsed.kind == "sqlite" and not Path(parsed.target).expanduser().exists():
        raise Refusal(
            f"no ctrlrun store at {Path(parsed.target).expanduser().absolute()}: `ctrlrun init`"
            " or the first protected call creates it; or point --store-url (or"
            f" {STORE_URL_ENV}) at an existing one"
        )
    store: StateStore = open_store(url, existing=True, read_only=not writing)
    try:
        yield store
    finally:
        store.close()


# --- output ------------------------------------------------------------------------------

STYLES: Final = {
    "committed": "green",
    "granted": "green",
    "consumed": "green",
    "ambiguous": "yellow",
    "pending": "yellow",
    "executing": "cyan",
    "reserved": "cyan",
    "failed": "red",
    "denied": "red",
    "blocked": "red",
    "observed": "blue",
    "expired": "red",
}


def style_for(text: str) -> str | None:
    """The color for a cell that starts with a state or result name, if any."""
    return STYLES.get(text.split(" ", 1)[0])


def table(
    rows: Sequence[Sequence[str]],
    *,
    header: Sequence[str] | None = None,
    color_column: int | None = None,
) -> None:
    """Print ``rows`` (under ``header``, if any) as columns two spaces apart, the last one
    unpadded. Every cell is escaped (``escape_text``) first: a value can neither span two rows
    nor send the terminal anything but text.

    Widths are taken from the plain text; the ``color_column`` cell is colored after
    padding, and ``click.echo`` strips the color unless stdout is a terminal.
    """
    lines = [
        [escape_text(cell) for cell in line]
        for line in (*([] if header is None else [header]), *rows)
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    for number, line in enumerate(lines):
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        cells.append(line[-1])
        is_header = header is not None and number == 0
        color = None if color_column is None or is_header else style_for(line[color_column])
        if color is not None and color_column is not None:
            cells[color_column] = click.style(cells[color_column], fg=color)
        click.echo("  ".join(cells).rstrip())


def json_text(document: Any) -> str:
    """``document`` as one line of JSON: keys sorted (stable output), instants as RFC 3339 UTC
    with ``Z`` (``encode_instant``), non-ASCII text as it is except the characters a terminal
    could act on, which are ``\\uXXXX`` escapes (still exact JSON: it decodes to the same
    values)."""
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, default=_json_default)
    return escape_text(text, json=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return encode_instant(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def json_line(document: Any) -> None:
    """Print ``document`` as one line of JSON (``json_text``)."""
    click.echo(json_text(document))


def say_lines(text: str) -> None:
    """Print a text made of lines (a report), each line escaped as ``say`` does."""
    for line in text.split("\n"):
        say(line)


def say(text: str = "", *, err: bool = False) -> None:
    """Print one line for a person, escaped (``escape_text``): whatever it holds, it is one
    line of plain text on the screen."""
    click.echo(escape_text(text), err=err)


def when(value: datetime | None) -> str:
    """A human timestamp: UTC to the second, ``2026-01-01T12:00:00Z``; ``-`` for none."""
    return "-" if value is None else display_instant(value)


def instant(value: datetime | None) -> str | None:
    """A JSON timestamp: the exact stored form (microseconds, ``Z``), or null."""
    return None if value is None else encode_instant(value)


def compact(value: Any) -> str:
    """``value`` in full as one line of JSON, for a table cell (never shortened: a person
    approves from it)."""
    return json_text(value)


def who(principal: Any) -> str:
    """``agent/user`` (or ``agent``) from a principal mapping; ``-`` if there is none."""
    if not isinstance(principal, dict) or not principal.get("agent"):
        return "-"
    user = principal.get("user")
    return f"{principal['agent']}/{user}" if user else str(principal["agent"])


def shorten(text: str | None, limit: int = 60) -> str:
    """``text`` escaped (a line break shows as ``\\n``), cut to ``limit`` characters with an
    ellipsis; ``-`` for none. For notes beside a row, never for what a person approves."""
    if not text:
        return "-"
    flat = escape_text(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
