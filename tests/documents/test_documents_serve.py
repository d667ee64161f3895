"""``ctrlrun serve``: loopback by default, the extra named when missing, and a real run."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctrlrun.cli import main
from ctrlrun.cli.serve import is_loopback
from ctrlrun.documents import HttpDocumentClient

CTRLRUN = str(Path(sys.executable).with_name("ctrlrun"))  # the installed console script


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.com", "localhost.evil"])
def test_other_hosts_are_not_loopback(host):
    assert not is_loopback(host)


def test_a_non_loopback_host_is_refused_without_allow_remote(tmp_path):
    result = CliRunner().invoke(
        main, ["serve", "--host", "0.0.0.0", "--store-url", f"sqlite:///{tmp_path}/s.db"]
    )
    assert result.exit_code == 1
    assert "--allow-remote" in result.output and not (tmp_path / "s.db").exists()


def test_a_store_url_is_required(monkeypatch):
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 2 and "--store-url" in result.output


@pytest.mark.parametrize("blocked", ["uvicorn", "starlette"])
def test_a_missing_server_extra_names_the_install_line(tmp_path, blocked):
    probe = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from ctrlrun.cli import main\n"
        f"main(['serve', '--store-url', 'sqlite:///{tmp_path}/s.db'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert f"{blocked} is not installed: ctrlrun's 'server' extra provides it" in done.stderr
    assert "pip install '.[server]'" in done.stderr


@pytest.mark.slow
def test_serve_answers_and_stops_on_sigterm(tmp_path):
    server = subprocess.Popen(
        [
            CTRLRUN,
            "serve",
            "--port",
            "0",
            "--store-url",
            f"sqlite:///{tmp_path}/state.db",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)/api/documents", line)
        assert found, line
        url = found.group(1)
        client = HttpDocumentClient(url, user="alice")
        client.create("notes", {"a": 1}, kind="json-object")
        assert client.save("notes", {"a": 2}, expected_version=1) == 2
        assert [v.writer for v in client.history("notes")] == ["alice", "alice"]
    finally:
        server.send_signal(signal.SIGTERM)
        rest = server.communicate(timeout=30)[1]
    # uvicorn shuts down gracefully, then re-raises the signal it caught (the Unix convention)
    assert server.returncode in (0, -signal.SIGTERM)
    assert "Traceback" not in rest
