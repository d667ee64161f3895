"""``ctrlrun checkpoint``, ``ctrlrun receipts --verify-chain --checkpoints`` and ``ctrlrun
prune`` on both stores, over receipts written by real protected calls (docs/checkpoints.md).

The attack of issue 28: delete the newest receipts and rewind the head row together. Without
checkpoints every verifier says ok; with the file and the public key it is a named break."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctrlrun.kernel.signing import generate
from support.cli import Scene, refused, run, tamper, usage

OPERATOR_PEM, OPERATOR_KEY = generate()
MALLORY_PEM, _ = generate()
TOMORROW = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()


@dataclass
class Setup:
    scene: Scene
    tamper: Callable[..., None]
    key: Path
    file: Path

    def cli(self, *args: str):
        return run(*args, "--store-url", self.scene.url)

    def checkpoint(self, key: Path | None = None, file: Path | None = None):
        key, file = key or self.key, file or self.file
        return self.cli("checkpoint", "--key", str(key), "--file", str(file), "--origin", "shop")

    def verify(self, *extra: str, file: Path | None = None):
        proof = ("--checkpoints", str(file or self.file), "--public-key", OPERATOR_KEY)
        return self.cli("receipts", "--verify-chain", *proof, *extra)

    def cut_to(self, seq: int) -> None:
        """Delete every receipt after ``seq`` and rewind the head row to it, consistently."""
        kept = self.scene.store.receipts()[seq - 1].hash
        self.tamper(
            f"DELETE FROM receipts WHERE seq > {seq}",
            f"UPDATE receipt_chain SET seq = {seq}, hash = '{kept}'",  # the one head row
        )


def _sqlite_setup(project: Path, request: pytest.FixtureRequest) -> Setup:
    (project / ".ctrlrun").mkdir()
    scene = Scene(project)
    return Setup(scene, lambda *s: tamper(scene.path, *s), project / "k.pem", project / "cps")


def _postgres_setup(project: Path, request: pytest.FixtureRequest) -> Setup:
    from ctrlrun.conformance.store.backends import with_schema
    from ctrlrun.postgres import PostgresStateStore
    from support.pg_sql import execute

    pg = request.getfixturevalue("pg_schema")
    scene = Scene(
        project,
        # one chain, as SQLite keeps it: these tests cut by seq (tests/cli/test_cli_partitions.py
        # and tests/store/test_partitions.py prove several)
        opener=lambda clock: PostgresStateStore(
            pg.url, schema=pg.schema, clock=clock, partitions=1
        ),
        url=with_schema(pg.url, pg.schema),
    )

    def alter(*statements: str) -> None:
        for statement in statements:
            execute(
                pg.url,
                pg.schema,
                statement.replace("FROM ", "FROM {schema}.", 1).replace(
                    "UPDATE ", "UPDATE {schema}.", 1
                ),
            )

    return Setup(scene, alter, project / "k.pem", project / "cps")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def setup(request, project):
    made = (_sqlite_setup if request.param == "sqlite" else _postgres_setup)(project, request)
    made.key.write_bytes(OPERATOR_PEM)
    made.scene.committed("pay_1")
    made.scene.ambiguous("pay_2")
    made.scene.committed("pay_3")
    yield made
    made.scene.close()


def test_checkpoint_signs_the_head_into_a_file_and_the_chain_verifies_against_it(setup):
    made = setup.checkpoint()
    assert made.exit_code == 0, made.output
    assert "partition 0 at seq 3" in made.stdout
    text = setup.file.read_text()
    assert text.startswith("ctrlrun.checkpoint/v1 shop\n0 3 sha256:") and "\n\n\u2014 " in text
    setup.scene.committed("pay_4")  # the chain goes on past the checkpoint
    result = setup.verify()
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "chain: 4 of 4 receipts verified; head seq 4; checkpointed up to seq 3\n"
    )


def test_a_cut_tail_with_a_rewound_head_is_named_only_with_checkpoints(setup):
    assert setup.checkpoint().exit_code == 0
    setup.cut_to(1)
    plain = setup.cli("receipts", "--verify-chain")
    assert plain.exit_code == 0  # today's verdict: the cut is invisible to the chain alone
    result = setup.verify()
    assert result.exit_code == 1
    assert result.stderr == "Error: the receipt chain has 2 break(s)\n"
    summary, *lines = result.stdout.splitlines()
    assert summary == "chain: 1 of 1 receipts verified; head seq 1; checkpointed up to seq 3"
    assert [line.split()[:3] for line in lines] == [
        ["seq", "3", "tail_cut"],
        ["seq", "1", "head_rewound"],
    ]
    assert lines[0].endswith(
        "receipts up to seq 3 of partition 0 were checkpointed and are missing"
    )
    as_json = json.loads(setup.verify("--json").stdout)
    assert [(b["kind"], b["seq"]) for b in as_json["breaks"]] == [
        ("tail_cut", 3),
        ("head_rewound", 1),
    ]
    assert as_json["checkpointed"]["seq"] == 3 and as_json["ok"] is False


def test_a_checkpoint_by_another_key_is_refused(setup, project):
    mallory = project / "mallory.pem"
    mallory.write_bytes(MALLORY_PEM)
    forged = project / "forged"
    assert setup.checkpoint(key=mallory, file=forged).exit_code == 0
    refused(setup.verify(file=forged), "checkpoint at line 1 is not signed by key")


def test_a_checkpoint_file_whose_statement_was_edited_is_refused(setup):
    assert setup.checkpoint().exit_code == 0
    text = setup.file.read_text()
    setup.file.write_text(text.replace("\n0 3 ", "\n0 2 ", 1))
    refused(setup.verify(), "checkpoint at line 1")  # the heads line no longer matches
    setup.file.write_text(text.replace("shop", "shoq", 1))
    refused(setup.verify(), "does not verify under key", "altered or forged")


def test_checkpoint_refuses_to_sign_a_chain_cut_since_the_last_one(setup):
    assert setup.checkpoint().exit_code == 0
    setup.cut_to(2)
    before = setup.file.read_text()
    refused(setup.checkpoint(), "receipts up to seq 3 of partition 0", "checkpoint refused")
    assert setup.file.read_text() == before


def test_prune_then_the_rest_verifies_from_the_checkpoint(setup):
    assert setup.checkpoint().exit_code == 0
    setup.scene.committed("pay_4")
    proof = ("--checkpoints", str(setup.file), "--public-key", OPERATOR_KEY)
    pruned = setup.cli("prune", "--before", TOMORROW, *proof)
    assert pruned.exit_code == 0, pruned.output
    assert pruned.stdout.startswith("pruned 3 receipt(s) and ")
    assert "the chain now starts after seq 3" in pruned.stdout
    result = setup.verify()
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "chain: 1 of 1 receipts verified; head seq 4; starts after seq 3 (pruned);"
        " checkpointed up to seq 3\n"
    )
    effects = setup.cli("effects", "--json")  # every effect's current state is kept
    states = {d["effect_key"]: d["state"] for d in map(json.loads, effects.stdout.splitlines())}
    assert states == {
        "refund:pay_1": "committed",
        "refund:pay_2": "ambiguous",
        "refund:pay_3": "committed",
        "refund:pay_4": "committed",
    }
    again = setup.cli("prune", "--before", TOMORROW, *proof)
    refused(again, "no checkpoint made before that date")


def test_the_options_go_together(setup):
    usage(setup.cli("receipts", "--verify-chain", "--checkpoints", "x"), "go together")
    usage(setup.cli("receipts", "--checkpoints", "x", "--public-key", OPERATOR_KEY), "go with")
    usage(setup.cli("prune", "--before", TOMORROW), "prune needs --checkpoints")
    usage(setup.cli("prune", "--before", "last tuesday"), "is not a date")
    refused(setup.cli("checkpoint", "--key", str(setup.key), "--file", "f", "--origin", "a b"))
    setup.key.write_bytes(b"not a key")
    refused(setup.checkpoint(), "not an unencrypted PEM private key")
    assert not setup.file.exists()


def test_checkpoint_also_posts_to_a_webhook(setup):
    from support.webhook_receiver import Receiver

    receiver = Receiver()
    url = receiver.start()
    try:
        args = ("--key", str(setup.key), "--file", str(setup.file), "--webhook", url)
        made = setup.cli("checkpoint", *args)
        assert made.exit_code == 0, made.output
        assert made.stdout.splitlines()[-1] == f"appended to {setup.file}, {url}, the store"
        [received] = receiver.received
        assert received.body["statement"] == setup.file.read_text()[:-1]
        receiver.statuses.append(500)
        refused(setup.cli("checkpoint", *args), "could not be appended to", "500")
    finally:
        receiver.stop()
    refused(setup.cli("checkpoint", *args[:4], "--webhook", "ftp://x"), "http(s) URL")
