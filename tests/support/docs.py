"""Run a Markdown page's examples and compare what they print with what the page shows.

A page is read as a sequence of fenced blocks, executed in order in one scratch directory:

* ```` ```console ````: each ``$ command`` line runs in a shell (``export NAME=value`` sets the
  environment of the later commands); the lines up to the next ``$`` are its expected output,
  stdout and stderr together. A command whose shown output has an ``Error:`` line must exit 1,
  one with a ``Usage:`` line must exit 2, any other must exit 0.
* ```` ```python refund.py ```` / ```` ```yaml ctrlrun.yaml ````: a block with a file name is
  written to that file, or, if an earlier command created the file, must equal it.
* ```` ```bash ````: only ``make demo``, ``make test`` and the install lines of
  ``INSTALL_LINES`` (the Makefile and those lines are checked elsewhere).

Output is compared after normalising what legitimately differs between runs: generated ids
(``apr_``/``act_``/``rcp_`` + 32 hex digits), hashes (a receipt's hash covers its ids) and
generated public keys (``ed25519:`` + base64) are
matched as a consistent one-to-one renaming, the ids learned this way are substituted into
later commands; timestamps become
``<time>``; ``PLACEHOLDER_ROOT`` in the page stands for the scratch directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(\S*)[ \t]*(\S*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
IDS = re.compile(
    r"\b(?:(?:apr|act|rcp)_[0-9a-f]{32}|sha256:[0-9a-f]{64})\b|\bed25519:[A-Za-z0-9+/]{43}="
)
TIMES = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
PLACEHOLDER_ROOT = "/home/you/ctrlrun"
ALLOWED_BASH = {"make demo", "make test"}
INSTALL_LINES = {  # run by tests/cli/test_cli_install.py
    "pip install /path/to/ctrlrun",
    "pip install '/path/to/ctrlrun[postgres]'",
    "make dist",
    "pip install dist/ctrlrun-0.1.0-py3-none-any.whl",
}


@dataclass(frozen=True)
class Block:
    """One fenced block: its info string's language and file name, its text and its line."""

    language: str
    filename: str
    text: str
    line: int


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page`` in order."""
    return [
        Block(m.group(1), m.group(2), m.group(3), page.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(page)
    ]


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """``(command, expected output lines)`` for each ``$`` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"console block output before any command: {line!r}")
    return steps


@dataclass
class Session:
    """The scratch directory, the environment, and the ids learned so far (page → actual)."""

    root: Path
    env: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path) -> Session:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}
        bin_dir = str(Path(sys.executable).parent)  # the venv's ctrlrun and python come first
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["NO_COLOR"] = "1"
        env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr in the order a terminal shows
        return cls(root, env)

    def command(self, shown: str) -> str:
        """The shown command with learned ids and the placeholder root filled in."""
        real = IDS.sub(lambda m: self.ids.get(m.group(0), m.group(0)), shown)
        return real.replace(PLACEHOLDER_ROOT, str(self.root))

    def run(self, shown: str, expected: list[str], where: str) -> None:
        """Run one step and compare; ``AssertionError`` naming ``where`` on any difference."""
        command = self.command(shown)
        if command.startswith("export "):
            name, _, value = command[len("export ") :].partition("=")
            self.env[name] = value
            assert not expected, f"{where}: export prints nothing"
            return
        code, actual = execute(command, self.root, self.env)
        wanted = expected_exit(expected)
        printed = "\n".join(actual)
        assert code == wanted, f"{where}: `{shown}` exited {code}:\n{printed}"
        self.compare(expected, actual, f"{where}: `{shown}`")

    def compare(self, expected: list[str], actual: list[str], where: str) -> None:
        """Line by line, after normalising times and learning the id renaming."""
        assert len(expected) == len(actual), (
            f"{where}: {len(actual)} lines printed, {len(expected)} shown:\n" + "\n".join(actual)
        )
        for number, (shown, printed) in enumerate(zip(expected, actual, strict=True), 1):
            shown_ids, printed_ids = IDS.findall(shown), IDS.findall(printed)
            assert len(shown_ids) == len(printed_ids), f"{where}, line {number}: {printed!r}"
            for page_id, real_id in zip(shown_ids, printed_ids, strict=True):
                self.learn(page_id, real_id, where)
            normal = IDS.sub("<id>", TIMES.sub("<time>", printed))
            assert IDS.sub("<id>", TIMES.sub("<time>", shown)) == normal, (
                f"{where}, line {number}:\n  shown:   {shown!r}\n  printed: {printed!r}"
            )

    def learn(self, page_id: str, real_id: str, where: str) -> None:
        known = self.ids.get(page_id)
        assert known in (None, real_id), f"{where}: {page_id} stood for {known}, now {real_id}"
        others = {v for k, v in self.ids.items() if k != page_id}
        assert real_id not in others, f"{where}: {real_id} is shown under two different ids"
        self.ids[page_id] = real_id

    def file(self, block: Block, where: str) -> None:
        """Write the block to its file, or check that an earlier command wrote exactly it."""
        target = self.root / block.filename
        if target.exists():
            assert target.read_text() == block.text, f"{where}: {block.filename} differs"
        else:
            target.write_text(block.text)


def run_page(page: str, root: Path, name: str) -> Session:
    """Execute every block of ``page`` in ``root``; return the session (for more checks)."""
    session = Session.start(root)
    for block in blocks(page):
        where = f"{name}:{block.line}"
        if block.language == "console":
            for command, expected in console_steps(block.text):
                session.run(command, expected, where)
        elif block.filename:
            session.file(block, where)
        elif block.language == "bash":
            lines = {line.split("#")[0].strip() for line in block.text.splitlines()}
            allowed = ALLOWED_BASH | INSTALL_LINES
            assert lines - {""} <= allowed, f"{where}: a bash block that no test runs"
        else:
            raise AssertionError(f"{where}: a ```{block.language} block that no test runs")
    return session


def rewrite_page(page: str, root: Path) -> str:
    """``page`` with every console block's shown output replaced by what its commands print
    now (for a maintainer who changed an output on purpose: review the diff, then commit).
    Ids shown in the old output are renamed to the new run's, in commands too."""
    session = Session.start(root)
    out, last = [], 0
    for match in FENCE.finditer(page):
        language, filename, text = match.group(1), match.group(2), match.group(3)
        if language == "console":
            lines = []
            for shown, expected in console_steps(text):
                command = session.command(shown)
                lines.append("$ " + command.replace(str(root), PLACEHOLDER_ROOT))
                if command.startswith("export "):
                    name, _, value = command[len("export ") :].partition("=")
                    session.env[name] = value
                    continue
                _, printed = execute(command, root, session.env)
                old_ids = IDS.findall("\n".join(expected))
                for page_id, real_id in zip(old_ids, IDS.findall("\n".join(printed)), strict=False):
                    session.ids.setdefault(page_id, real_id)
                lines += printed
            out.append(page[last : match.start(3)] + "\n".join(lines) + "\n")
            last = match.end(3)
        elif filename and not (root / filename).exists():
            (root / filename).write_text(text)
    out.append(page[last:])
    return "".join(out)


def expected_exit(expected: list[str]) -> int:
    """2 for a usage error shown, 1 for a refusal shown, else 0."""
    if any(line.startswith("Usage: ") for line in expected):
        return 2
    return 1 if any(line.startswith("Error: ") for line in expected) else 0


def execute(command: str, root: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``command`` in a shell in ``root``: its exit code and its output lines (stdout and
    stderr interleaved as a terminal shows them), with ``root`` shown as the placeholder."""
    done = subprocess.run(
        command,
        shell=True,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout.replace(str(root), PLACEHOLDER_ROOT).splitlines()


if __name__ == "__main__":  # python tests/support/docs.py README.md docs/cli.md
    import tempfile

    for name in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(name)
            path.write_text(rewrite_page(path.read_text(), Path(scratch)))
