"""The store's files are private, the read commands write nothing and work where the store
cannot be written (a read-only filesystem; a Postgres role that may only read), and a denial
keeps the person's reason."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

import ctrlrun
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.durable import Outbox, Plans
from ctrlrun.errors import StoreError
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store import open_store
from support.cli import Scene, refused, run
from support.pg import unique_name
from support.terminal import CTRLRUN

READS = (
    ("effects",),
    ("receipts",),
    ("receipts", "--verify-chain"),
    ("approvals", "--pending"),
    ("plans", "list"),
    ("operations", "list"),
    ("outbox", "list"),
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_store_directory_and_files_are_private(empty):
    os.umask(0o022)  # the usual umask: without care, files would be 0644
    assert run("init").exit_code == 0
    assert mode(empty / ".ctrlrun") == 0o700
    assert mode(empty / ".ctrlrun" / "state.db") == 0o600
    scene = Scene(empty)
    scene.committed("pay_1")  # a write: the -wal and -shm files exist while it is open
    companions = [p for p in (empty / ".ctrlrun").iterdir() if p.name != "state.db"]
    assert companions and {mode(p) for p in companions} == {0o600}
    scene.close()
    elsewhere = ctrlrun.SQLiteStateStore(empty / "other.db")
    elsewhere.close()
    assert mode(empty / "other.db") == 0o600


def fingerprint(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file in ``directory``: its content digest and modification time."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
    }


@pytest.fixture
def shelf():
    """A directory others may enter (pytest's own is 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ctrlrun-ro-"))
    path.chmod(0o755)
    yield path
    for inner in (path, *path.rglob("*")):
        inner.chmod(0o755 if inner.is_dir() else 0o644)
    shutil.rmtree(path)


def read_only(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ctrlrun args`` where ``directory`` cannot be written: as root, on a read-only bind
    mount of it in a private mount namespace (root ignores permissions); otherwise with the
    directory and its files made read-only."""
    command = [CTRLRUN, *args]
    if os.geteuid() == 0:
        where = shlex.quote(str(directory))
        script = (
            f"mount --bind {where} {where} && mount -o remount,bind,ro {where}"
            ' && touch {where}/probe 2>/dev/null && exit 99; exec "$@"'
        ).replace("{where}", where)
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
        command += [CTRLRUN, *args]
    else:
        for inner in (*directory.iterdir(), directory):
            inner.chmod(0o555 if inner.is_dir() else 0o444)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")} | {"NO_COLOR": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=60)
    assert done.returncode != 99, "the directory was writable"
    return done


def test_the_read_commands_work_on_a_read_only_filesystem_and_write_nothing(shelf):
    (shelf / ".ctrlrun").mkdir()
    scene = Scene(shelf)  # committed, ambiguous, pending, a plan, an outbox message
    scene.committed("pay_1")
    scene.ambiguous("pay_2")
    approval = scene.pending("pay_3")
    Plans(scene.store).propose([{"action": "a.b", "arguments": {}}], agent="planner")
    Outbox(scene.store).enqueue("mail", {"to": "a@example.com"})
    action_id = scene.receipt_for("refund:pay_1")["action_id"]
    scene.close()  # the last connection checkpoints the WAL into the file and removes it
    store = shelf / ".ctrlrun"
    before = fingerprint(store)
    assert sorted(before) == ["state.db"]
    url = f"sqlite://{store}/state.db"
    for args in (*READS, ("inspect", action_id)):
        done = read_only(store, *args, "--store-url", url)
        assert done.returncode == 0, (args, done.stderr)
        assert done.stderr == ""
    listed = read_only(store, "effects", "--store-url", url).stdout
    assert "refund:pay_1" in listed and "ambiguous" in listed
    chain = read_only(store, "receipts", "--verify-chain", "--store-url", url).stdout
    assert chain == "chain: 2 of 2 receipts verified; head seq 2\n"
    answer = read_only(store, "approve", approval, "--store-url", url)
    assert answer.returncode == 1 and answer.stdout == ""
    assert answer.stderr.startswith("Error: ") and answer.stderr.count("\n") == 1
    assert fingerprint(store) == before


def test_a_read_command_opens_the_store_read_only(scene):
    scene.committed("pay_1")
    approval = scene.pending("pay_3")
    store = scene.path.parent
    scene.close()
    before = fingerprint(store)
    for args in (*READS, ("inspect", scene.receipt_for("refund:pay_1")["action_id"])):
        assert run(*args).exit_code == 0, args
    after = fingerprint(store)
    assert after["state.db"] == before["state.db"]  # not a byte, not a timestamp
    wal = store / "state.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # a reader's WAL holds no frame
    reader = open_store(f"sqlite://{scene.path}", read_only=True)
    try:
        with pytest.raises(StoreError, match="readonly"):
            reader.grant_approval(approval, "alice")
    finally:
        reader.close()
    assert fingerprint(store)["state.db"] == before["state.db"]


@pytest.fixture
def pg_history(empty, pg_schema):
    scene = Scene(
        empty,
        opener=lambda clock: PostgresStateStore(
            pg_schema.url, schema=pg_schema.schema, clock=clock
        ),
        url=with_schema(pg_schema.url, pg_schema.schema),
    )
    yield scene
    scene.close()


@pytest.mark.postgres
def test_the_read_commands_need_only_a_role_that_may_read(pg_history, pg_schema):
    pg_history.committed("pay_1")
    approval = pg_history.pending("pay_3")
    Plans(pg_history.store).propose([{"action": "a.b", "arguments": {}}], agent="planner")
    Outbox(pg_history.store).enqueue("mail", {})
    role = unique_name("reader_")
    server = pg_schema.server
    reader = server.create_role(role, usage_on=[pg_schema.schema])
    with server.connect() as conn:
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{pg_schema.schema}" TO "{role}"')
    try:
        url = with_schema(reader, pg_schema.schema)
        for args in READS:
            done = run(*args, "--store-url", url)
            assert done.exit_code == 0, (args, done.output)
        refused(run("approve", approval, "--store-url", url), "permission denied")
        assert pg_history.store.get_approval(approval).status == "pending"
    finally:
        server.drop_role(role)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def history(request, project):
    if request.param == "sqlite":
        (project / ".ctrlrun").mkdir()
        scene = Scene(project)
    else:
        scene = request.getfixturevalue("pg_history")
    yield scene
    scene.close()


def test_a_denial_keeps_its_reason(history):
    approval = history.pending("pay_3")
    other = history.pending("pay_4")
    url = ("--store-url", history.url)
    refused(run("deny", other, "--reason", "  ", *url), "reason must be non-empty")
    denied = run("deny", approval, "--reason", "not our customer", *url)
    assert denied.exit_code == 0, denied.output
    assert denied.stdout.splitlines()[-1] == "reason: not our customer"
    listed = run("approvals", *url).stdout
    assert "denied by cli:local: not our customer" in listed
    documents = [json.loads(line) for line in run("approvals", "--json", *url).stdout.splitlines()]
    reasons = {d["approval_id"]: d["deny_reason"] for d in documents}
    assert reasons == {approval: "not our customer", other: None}
    inspected = run("inspect", approval, *url).stdout
    assert "denied by cli:local: not our customer" in inspected
    assert "reason=not our customer" in inspected  # the APPROVAL_DENIED event
    assert history.store.get_approval(other).status == "pending"
