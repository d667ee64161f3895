"""docs/gateway.md's sample policy loads and names tools `mcp.<alias>.<tool>`, and its
desktop-client configuration works when pasted: launched as a desktop client launches it, from
`/` with `PATH=/usr/bin:/bin`, with only the placeholders replaced (issue 27)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

import ctrlrun
from support.docs import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "gateway.md").read_text()
UPSTREAM = ROOT / "tests" / "support" / "mcp_upstream.py"
MINIMAL_PATH = "/usr/bin:/bin"


def block(language: str, filename: str = "") -> str:
    [found] = [b.text for b in blocks(PAGE) if (b.language, b.filename) == (language, filename)]
    return found


def test_the_sample_policy_loads_and_names_the_upstream_tools_under_the_alias():
    policy = ctrlrun.Policy.from_yaml(block("yaml", "ctrlrun.yaml"))
    assert set(policy.actions) == {"mcp.pay.lookup", "mcp.pay.refund", "mcp.pay.delete_customer"}
    assert policy.entry("mcp.pay.refund").effect.source == "refund:{payment_id}"
    assert "Tools keep their upstream names" in PAGE


def pasted(tmp_path: Path, calls: Path) -> dict:
    """The page's client configuration with its placeholders replaced by this machine's."""
    text = block("json")
    text = text.replace("/path/to/venv/bin/ctrlrun", str(Path(sys.executable).with_name("ctrlrun")))
    text = text.replace("/path/to/venv/bin/python", sys.executable)
    text = text.replace("/srv/payments_server.py", f"{UPSTREAM} {calls}")
    text = text.replace("/srv/ctrlrun.yaml", str(tmp_path / "ctrlrun.yaml"))
    return json.loads(text)["mcpServers"]["payments"]


def test_the_desktop_configuration_works_from_slash_with_a_minimal_path(tmp_path):
    (tmp_path / "ctrlrun.yaml").write_text(block("yaml", "ctrlrun.yaml"))
    calls = tmp_path / "calls"
    calls.mkdir()
    script = Path(sys.executable).with_name("ctrlrun")
    subprocess.run(  # the page's step: the store beside the policy
        [str(script), "init"],
        cwd=tmp_path,
        env={"PATH": MINIMAL_PATH},
        check=True,
        capture_output=True,
    )
    config = pasted(tmp_path, calls)
    assert Path(config["command"]).is_absolute()
    served = StdioServerParameters(
        command=config["command"], args=config["args"], env={"PATH": MINIMAL_PATH}, cwd="/"
    )

    async def main():
        async with Client(served) as client:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            done = await client.call_tool("refund", {"payment_id": "pay_doc", "amount": 7})
            return names, done

    names, done = anyio.run(main)
    assert names == ["refund"]  # the upstream's name; the policy says mcp.pay.refund
    assert not done.is_error and done.content[0].text == "refunded 7 on pay_doc"
    store = ctrlrun.SQLiteStateStore(tmp_path / ".ctrlrun" / "state.db")
    try:
        [receipt] = store.receipts()
        assert receipt["action"] == "mcp.pay.refund" and receipt["result"] == "committed"
    finally:
        store.close()
