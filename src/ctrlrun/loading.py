"""``ctrlrun.load_policy``, and the YAML reader behind ``Policy.from_yaml``/``from_file``.

The kernel's ``Policy`` reads no YAML and imports nothing above the kernel; this module, which
``import ctrlrun`` loads, installs the reader those two class methods delegate to. The reader
imports ``ctrlrun.config`` (and so ``yaml``) only when it is first used, so ``import ctrlrun``
still loads no YAML parser (docs/decisions/0027-policy-loader-public.md).
"""

from __future__ import annotations

import os

from ctrlrun.kernel.policy import Policy, install_reader


def load_policy(path: str | os.PathLike[str] | None = None) -> Policy:
    """The policy in the YAML file at ``path``; without one, the file ``@protect`` would use
    (``$CTRLRUN_CONFIG``, else ``./ctrlrun.yaml``). Raises ``PolicyError`` naming the file, the
    line and the key path, and nothing else::

        control = ctrlrun.Control(ctrlrun.load_policy("ctrlrun.yaml"), store)
    """
    from ctrlrun.config import load_policy_file
    from ctrlrun.runtime.locate import policy_path

    return load_policy_file(policy_path(path))


class ConfigReader:
    """The ``PolicyReader`` over ``ctrlrun.config``, imported at the first read."""

    def text(self, text: str, source: str | None) -> Policy:
        """``ctrlrun.config.load_policy_text``."""
        from ctrlrun.config import load_policy_text

        return load_policy_text(text, source=source)

    def file(self, path: str | os.PathLike[str]) -> Policy:
        """``ctrlrun.config.load_policy_file``."""
        from ctrlrun.config import load_policy_file

        return load_policy_file(path)


install_reader(ConfigReader())
