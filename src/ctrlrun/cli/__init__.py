"""The ``ctrlrun`` command line: see, answer and settle what agents did.

Imported only by the console script (``ctrlrun = ctrlrun.cli:main``), never by ``import
ctrlrun``. Exit codes: 0 ok, 1 refused (one line ``Error: …`` on stderr), 2 usage.
"""

from __future__ import annotations

import click

from ctrlrun.cli.approvals import approvals, approve, deny
from ctrlrun.cli.approver import approver_group
from ctrlrun.cli.check import check
from ctrlrun.cli.checkpoints import checkpoint, prune
from ctrlrun.cli.common import CtrlrunGroup
from ctrlrun.cli.conformance import conformance
from ctrlrun.cli.console import console, console_account
from ctrlrun.cli.demo import demo
from ctrlrun.cli.effects import effects, resolve
from ctrlrun.cli.gateway import gateway
from ctrlrun.cli.init import init
from ctrlrun.cli.inspection import inspect
from ctrlrun.cli.notify import notify
from ctrlrun.cli.operations import operations_group
from ctrlrun.cli.outbox import outbox_group
from ctrlrun.cli.plans import plans_group
from ctrlrun.cli.policy import policy_group
from ctrlrun.cli.receipts import receipts
from ctrlrun.cli.serve import serve
from ctrlrun.cli.stats import stats
from ctrlrun.cli.verify import verify

COMMANDS = (
    init,
    demo,
    effects,
    resolve,
    receipts,
    stats,
    checkpoint,
    prune,
    inspect,
    approvals,
    approve,
    deny,
    approver_group,
    notify,
    plans_group,
    operations_group,
    outbox_group,
    serve,
    console,
    console_account,
    gateway,
    verify,
    check,
    policy_group,
    conformance,
)


@click.group(cls=CtrlrunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ctrlrun")
def main() -> None:
    """ctrlrun: see, answer and settle what agents did.

    Exit codes: 0 ok, 1 refused (one line `Error: …` on stderr, nothing written), 2 usage.
    Commands that read the store create and migrate nothing.
    """


for _command in COMMANDS:
    main.add_command(_command)
