"""Installed on ``PYTHONPATH`` by tests that must break ctrlrun inside worker subprocesses too.

``CTRLRUN_TEST_BROKEN_STORE=<fixture>`` wraps every store ``ctrlrun.store.open_store`` opens
in that broken-store fixture; ``CTRLRUN_TEST_MUTATION=<name>`` applies a named mutation of
the kernel (see ``support.mutations``). ``CTRLRUN_TEST_SUPPORT`` is the tests directory.
"""

import os
import sys

_broken = os.environ.get("CTRLRUN_TEST_BROKEN_STORE")
_mutation = os.environ.get("CTRLRUN_TEST_MUTATION")
if _broken or _mutation:
    sys.path.insert(0, os.environ["CTRLRUN_TEST_SUPPORT"])
    if _broken:
        from support.broken_backends import install

        install(_broken)
    if _mutation:
        from support.mutations import apply_mutation

        apply_mutation(_mutation)
    os.environ["CTRLRUN_TEST_INJECTED"] = "1"
