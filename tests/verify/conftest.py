"""Verify tests: the sample policy, fast children, and running verify in-process."""

from __future__ import annotations

import pytest

from ctrlrun import Policy
from ctrlrun.config import load_policy_file
from support.subprocess_env import bytecode_dir, subprocess_children

__all__ = ["bytecode_dir", "subprocess_children"]


@pytest.fixture(autouse=True)
def _children(subprocess_children):
    return subprocess_children


@pytest.fixture
def policy(tmp_path):
    """``policy(text)``: the policy file ``text`` written to ``ctrlrun.yaml`` and loaded."""

    def load(text: str) -> Policy:
        path = tmp_path / "ctrlrun.yaml"
        path.write_text(text)
        return load_policy_file(path)

    return load
