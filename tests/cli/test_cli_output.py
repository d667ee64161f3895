"""The small output helpers every command shares."""

from __future__ import annotations

from ctrlrun.cli.common import redacted, shorten, who


def test_a_password_is_never_printed():
    assert redacted("postgresql://app:s3cret@db:5432/x?sslmode=require") == (
        "postgresql://app:***@db:5432/x?sslmode=require"
    )
    assert redacted("sqlite:///tmp/state.db") == "sqlite:///tmp/state.db"


def test_principals_and_long_text():
    assert who({"agent": "bot", "user": "alice"}) == "bot/alice"
    assert who({"agent": "bot", "user": None}) == "bot"
    assert who(None) == who({}) == "-"
    assert shorten("a\nb   c") == "a b c" and shorten(None) == "-"
    assert shorten("x" * 100, 10) == "x" * 9 + "…"
