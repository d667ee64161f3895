"""The installed ``ctrlrun`` console script itself, as an operator's shell runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "ctrlrun"


@pytest.fixture
def shell_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}
    return env


def ctrlrun(*args, cwd, env, **kwargs):
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kwargs,
    )


def test_the_script_is_installed_and_lists_its_commands_in_workflow_order(tmp_path, shell_env):
    assert SCRIPT.exists(), "make .venv/.installed installs the console script"
    done = ctrlrun("--help", cwd=tmp_path, env=shell_env)
    assert done.returncode == 0
    listed = [
        line.split()[0]
        for line in done.stdout.split("Commands:")[1].splitlines()
        if line.startswith("  ")
    ]
    assert listed == [
        "init",
        "demo",
        "effects",
        "resolve",
        "receipts",
        "stats",
        "checkpoint",
        "prune",
        "inspect",
        "approvals",
        "approve",
        "deny",
        "approver",
        "notify",
        "plans",
        "operations",
        "outbox",
        "serve",
        "console",
        "console-account",
        "gateway",
        "verify",
        "check",
        "policy",
        "conformance",
    ]
    version = ctrlrun("--version", cwd=tmp_path, env=shell_env)
    assert version.returncode == 0 and "version" in version.stdout


@pytest.mark.parametrize(
    ("setup", "args", "fragment"),
    [
        (lambda d: None, ["receipts"], "no policy file"),
        (
            lambda d: (d / "bad.db").write_bytes(b"\x00garbage" * 512),
            ["effects", "--store-url", "sqlite://bad.db"],
            "file is not a database",
        ),
        (lambda d: None, ["approve", "x", "--store-url", "redis://x"], "unsupported store URL"),
    ],
)
def test_a_refusal_is_one_line_and_exit_1_never_a_traceback(
    tmp_path, shell_env, setup, args, fragment
):
    setup(tmp_path)
    done = ctrlrun(*args, cwd=tmp_path, env=shell_env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: ")
    assert fragment in done.stderr and "Traceback" not in done.stderr


def test_a_reader_that_goes_away_is_not_an_error(tmp_path, shell_env):
    assert ctrlrun("demo", cwd=tmp_path, env=shell_env).returncode == 0
    url = f"sqlite://{tmp_path / '.ctrlrun' / 'demo' / 'state.db'}"
    # `ctrlrun receipts | head -1`: the pipe closes before ctrlrun writes
    with subprocess.Popen(
        [str(SCRIPT), "receipts", "--json", "--store-url", url],
        cwd=tmp_path,
        env=shell_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        process.stdout.close()
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=60)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert code == 0
