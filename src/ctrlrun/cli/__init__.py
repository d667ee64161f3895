"""The ``ctrlrun`` command line."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="ctrlrun")
def main() -> None:
    """ctrlrun: see, answer and settle what agents did."""


from ctrlrun.cli.operations import operations_group  # noqa: E402
from ctrlrun.cli.plans import plans_group  # noqa: E402

main.add_command(plans_group)
main.add_command(operations_group)
