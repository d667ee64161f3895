"""The ``ctrlrun`` command line."""

from __future__ import annotations

import click

from ctrlrun.cli.conformance import conformance
from ctrlrun.cli.verify import verify


@click.group()
@click.version_option(package_name="ctrlrun")
def main() -> None:
    """ctrlrun: see, answer and settle what agents did."""


main.add_command(conformance)
main.add_command(verify)
