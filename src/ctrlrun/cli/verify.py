"""``ctrlrun verify``: prove the guarantees hold for this policy, in scratch stores.

The policy is found as ``Control.from_file`` finds it (``--policy``, ``$CTRLRUN_CONFIG``,
``./ctrlrun.yaml``); the operator's store is never opened (nor ``$CTRLRUN_STORE_URL`` read).
Exit 0 every applicable guarantee passed and at least one applied; 1 a guarantee failed;
2 the configuration was refused or nothing was applicable; 3 verify's own error. Errors are
one line ``Error: …`` on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from ctrlrun.cli.common import error_text, say_lines
from ctrlrun.cli.replication import replication_of, text_line, with_replication
from ctrlrun.config import load_policy_file
from ctrlrun.display import escape_text
from ctrlrun.errors import CtrlrunError


def refuse(message: str, code: int = 2) -> NoReturn:
    """One line ``Error: …`` on stderr (escaped, as every refusal is), then exit ``code``."""
    click.echo(f"Error: {error_text(message)}", err=True)
    raise click.exceptions.Exit(code)


def _live(progress: bool | None) -> Any:
    """The progress display: when asked, or by default when a person watches stderr."""
    return _progress if (sys.stderr.isatty() if progress is None else progress) else None


def _progress(guarantee: Any, result: Any) -> None:
    if result is None:
        click.echo(f"{guarantee.gid:<4}{guarantee.name} …", err=True, nl=False)
        sys.stderr.flush()
    else:
        click.echo(f" {str(result.status).upper()} ({result.seconds:.1f}s)", err=True)


def _load(policy: str | None) -> Any:
    from ctrlrun.runtime.locate import policy_path

    path = policy_path(policy)
    if not path.is_file():
        refuse(
            f"no policy file at {path} (give --policy, set CTRLRUN_CONFIG, or run where"
            " ctrlrun.yaml is)"
        )
    return load_policy_file(path)


@click.command("verify")
@click.option("--policy", "policy", metavar="PATH", help="The policy file (ctrlrun.yaml).")
@click.option(
    "--store-url",
    metavar="URL",
    help="postgresql://… to run in scratch schemas of that database (default: temp SQLite).",
)
@click.option("--only", default="", metavar="IDS", help="Comma-separated ids, e.g. G1,G3.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress lines on stderr (default: only when stderr is a terminal).",
)
@click.option("--junit", "junit", metavar="FILE", help="Also write a JUnit XML report.")
def verify(  # noqa: PLR0917 - click passes one argument per option
    policy: str | None,
    store_url: str | None,
    only: str,
    as_json: bool,
    junit: str | None,
    progress: bool | None,
) -> None:
    """Run the guarantees against this policy in scratch stores it creates and drops."""
    from ctrlrun.verify import run

    if store_url is not None and not store_url.strip():
        refuse("--store-url is empty: give postgresql://…, or leave it out for temp SQLite")
    try:
        loaded = _load(policy)
        report = run(loaded, store_url=store_url, only=only.split(","), progress=_live(progress))
    except click.exceptions.Exit:
        raise
    except CtrlrunError as exc:
        refuse(exc.message)
    except Exception as exc:  # verify's own failure, outside any one guarantee
        refuse(f"verify's own error: {type(exc).__name__}: {exc}", 3)
    if junit:
        Path(junit).write_text(report.to_junit(), encoding="utf-8")
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
    raise click.exceptions.Exit(report.exit_code)
