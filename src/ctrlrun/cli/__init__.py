"""The ``ctrlrun`` command line."""

from __future__ import annotations

import click

from ctrlrun.cli.serve import serve


@click.group()
@click.version_option(package_name="ctrlrun")
def main() -> None:
    """ctrlrun: see, answer and settle what agents did."""


main.add_command(serve)
