"""``ctrlrun verify``: run the guarantees against *this* policy, in scratch stores.

    from ctrlrun.config import load_policy_file
    from ctrlrun.verify import run

    report = run(load_policy_file("ctrlrun.yaml"))
    print(report.to_text())          # Gn  name  PASS|FAIL|N/A  action (detail)
    raise SystemExit(report.exit_code)

Each guarantee picks the first action of the document (sorted by name, then rule) that
exercises it, builds argument values that land in the intended rule (invented values start
with ``ctrlrun-verify``) and confirms the policy decides as intended, then drives the real
pipeline — ``Control``, ``@protect``, the store — against counting fakes. Each has a positive
control showing the same action would otherwise succeed; a control that misbehaves is a FAIL.
A guarantee the document gives nothing to exercise is N/A with the reason; N/A is never a
pass and nothing applicable is exit 2.

Scratch stores are created per guarantee and always removed (SQLite: temporary files;
Postgres: a ``ctrlrun_verify_<hex>`` schema each). Verify never opens, reads or creates the
operator's store, and never reads ``$CTRLRUN_STORE_URL``. ``docs/verify.md`` lists what each
guarantee asserts, its control, its N/A reasons, and what verify does not establish.
``import ctrlrun`` does not import this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctrlrun.verify.report import Result, Status, VerifyReport
    from ctrlrun.verify.runner import GUARANTEES, Guarantee, run, select
    from ctrlrun.verify.scratch import ConfigRefused

_HOMES = {
    "GUARANTEES": "runner",
    "ConfigRefused": "scratch",
    "Guarantee": "runner",
    "Result": "report",
    "Status": "report",
    "VerifyReport": "report",
    "run": "runner",
    "select": "runner",
}
__all__ = [
    "GUARANTEES",
    "ConfigRefused",
    "Guarantee",
    "Result",
    "Status",
    "VerifyReport",
    "run",
    "select",
]


def __getattr__(name: str) -> Any:
    """Exports load on first use, so a worker process imports only what it runs."""
    if name not in _HOMES:
        raise AttributeError(f"module 'ctrlrun.verify' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ctrlrun.verify.{_HOMES[name]}"), name)
