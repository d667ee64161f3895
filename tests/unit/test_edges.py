"""Small contracts at the edges: clocks, errors, ids, URLs, sinks, locating files."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timedelta

import pytest

import ctrlrun
from ctrlrun._time import check_aware, check_positive, decode_instant, encode_instant
from ctrlrun.canonical import canonical_bytes
from ctrlrun.errors import (
    ActionDenied,
    DenyReason,
    DuplicateEffect,
    DuplicateState,
    InvalidArgument,
    MissingDependency,
    PolicyError,
)
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.event import Event, EventType
from ctrlrun.runtime.locate import default_store_path, open_default_store, policy_path
from ctrlrun.runtime.receipts import describe
from ctrlrun.runtime.sinks import JSONLSink, emit
from ctrlrun.store import open_store
from ctrlrun.store.url import parse_store_url


class TestTime:
    def test_naive_datetimes_are_refused(self):
        with pytest.raises(InvalidArgument):
            check_aware(datetime(2026, 1, 1), "expires_at")

    @pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1), 5])
    def test_durations_must_be_positive_timedeltas(self, value):
        with pytest.raises(InvalidArgument):
            check_positive(value, "lease")

    def test_instants_round_trip_exactly(self):
        value = datetime.fromisoformat("2026-03-04T05:06:07.123456+02:00")
        assert decode_instant(encode_instant(value)) == value
        assert encode_instant(value).endswith("Z")
        assert check_aware(value, "x").utcoffset() == timedelta(0)


class TestErrors:
    def test_every_field_survives_pickling_and_renders_by_value(self):
        err = DuplicateEffect("dup", state=DuplicateState.IN_PROGRESS, effect_key="k")
        copy = pickle.loads(pickle.dumps(err))
        assert (copy.state, copy.effect_key, copy.reason) == (
            DuplicateState.IN_PROGRESS,
            "k",
            "duplicate",
        )
        assert err.to_dict() == {
            "error": "DuplicateEffect",
            "message": "dup",
            "reason": "duplicate",
            "state": "in_progress",
            "effect_key": "k",
        }

    def test_a_missing_dependency_names_the_install_line(self):
        err = MissingDependency(module="psycopg", extra="postgres")
        assert isinstance(err, ImportError)
        assert "in the ctrlrun checkout run pip install '.[postgres]'" in str(err)

    def test_denials_carry_reason_and_rule(self):
        err = ActionDenied("no", reason=DenyReason.POLICY, rule=2, action_id="act_1")
        assert pickle.loads(pickle.dumps(err)).rule == 2


class TestModels:
    def test_action_repr_and_canonical_bytes(self):
        action = Action("a.b", {"x": 1}, Principal("bot"))
        assert action.canonical == canonical_bytes(json.loads(action.canonical))
        assert "a.b" in repr(action) and action.action_id in repr(action)
        assert hash(action) == hash(action.action_id)
        assert action.has_argument("x") and action.argument("x") == 1

    def test_events_render_to_json(self):
        event = Event(
            1,
            datetime.fromisoformat("2026-01-01T00:00:00+00:00"),
            EventType.EFFECT_RESERVED,
            "act",
            "k",
            None,
            {"attempt": 1},
        )
        assert event.to_dict()["ts"] == "2026-01-01T00:00:00Z"
        assert event.to_dict()["type"] == "EFFECT_RESERVED"

    def test_lone_surrogates_in_keys_and_lists_are_located(self):
        with pytest.raises(InvalidArgument, match=r"\$\.a\b"):
            canonical_bytes({"a": {"\udc00": 1}})
        with pytest.raises(InvalidArgument, match=r"\$\[0\]\[1\]"):
            canonical_bytes([["ok", "\ud800"]])

    def test_describe_survives_a_broken_str(self):
        class Nasty(Exception):
            def __str__(self):
                raise RuntimeError("no")

        assert describe(Nasty()) == "Nasty: <unprintable>"
        assert describe(ValueError()) == "ValueError"
        assert describe(ValueError("\ud800")) == "ValueError: \\ud800"


class TestStoreURLs:
    def test_sqlite_forms(self):
        assert parse_store_url("sqlite:///abs/state.db").target == "/abs/state.db"
        assert parse_store_url("sqlite://rel/state.db").target == "rel/state.db"

    def test_postgres_schema_is_peeled_off(self):
        parsed = parse_store_url("postgresql://u@h/db?sslmode=require&ctrlrun_schema=ops")
        assert (parsed.kind, parsed.schema) == ("postgres", "ops")
        assert parsed.target == "postgresql://u@h/db?sslmode=require"
        assert parse_store_url("postgres://h/db").schema == "public"

    @pytest.mark.parametrize(
        "url", ["", "mysql://x", "sqlite://", "postgresql://h/db?ctrlrun_schema=a&ctrlrun_schema=b"]
    )
    def test_bad_urls_are_refused(self, url):
        with pytest.raises(InvalidArgument):
            parse_store_url(url)

    def test_open_store_sqlite(self, tmp_path):
        store = open_store(f"sqlite:///{tmp_path}/s.db")
        assert store.list_effects() == ()
        assert open_store(f"sqlite:///{tmp_path}/s.db", existing=True).list_effects() == ()


class TestSinks:
    def test_jsonl_sink_writes_each_receipt_with_its_hash(self, tmp_path):
        store = ctrlrun.SQLiteStateStore(tmp_path / "s.db")
        receipt = store.record((), {"receipt_id": "rcp_1", "action_id": "a", "result": "denied"})
        sink = JSONLSink(tmp_path / "receipts.jsonl")
        emit([sink], receipt)
        line = json.loads((tmp_path / "receipts.jsonl").read_text())
        assert line["receipt_id"] == "rcp_1" and line["hash"] == receipt.hash

    def test_a_failing_sink_is_logged_and_never_raises(self, tmp_path, caplog):
        class Broken:
            def receipt(self, receipt):
                raise OSError("disk full")

        emit([Broken()], None)  # type: ignore[list-item]
        assert "sink" in caplog.text


class TestLocate:
    def test_explicit_path_then_env_then_cwd(self, monkeypatch, tmp_path):
        monkeypatch.delenv("CTRLRUN_CONFIG", raising=False)
        assert str(policy_path()) == "ctrlrun.yaml"
        monkeypatch.setenv("CTRLRUN_CONFIG", str(tmp_path / "p.yaml"))
        assert policy_path() == tmp_path / "p.yaml"
        assert policy_path("x.yaml").name == "x.yaml"
        monkeypatch.setenv("CTRLRUN_CONFIG", " ")
        with pytest.raises(PolicyError, match="empty"):
            policy_path()

    def test_the_default_store_sits_beside_the_policy(self, monkeypatch, tmp_path):
        monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
        policy = tmp_path / "ctrlrun.yaml"
        assert default_store_path(policy) == tmp_path / ".ctrlrun" / "state.db"
        store = open_default_store(policy, create=True)
        assert store.path == tmp_path / ".ctrlrun" / "state.db"

    def test_the_store_url_variable_wins(self, monkeypatch, tmp_path):
        monkeypatch.setenv("CTRLRUN_STORE_URL", f"sqlite:///{tmp_path}/elsewhere.db")
        assert (
            open_default_store(tmp_path / "ctrlrun.yaml", create=True).path.name == "elsewhere.db"
        )
