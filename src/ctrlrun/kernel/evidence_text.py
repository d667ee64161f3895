"""The texts written as evidence: an event's data and an executor's result. Writing them
never fails an action: a value JSON cannot hold is stored as its ``repr``, and text UTF-8
cannot encode is escaped. Pure: the runtime composes them, every store writes them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ctrlrun.canonical import canonical_text, string_text
from ctrlrun.errors import InvalidArgument

_EVENT_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)


class EncodedEventData(dict[str, Any]):
    """Event data that carries its own ``event_data_json`` text, composed by whoever built it
    from texts already encoded (the proposed event's action). The producer's contract, held
    by test: ``text`` is exactly what encoding the dict would give; never mutate one."""

    __slots__ = ("text",)

    def __init__(self, data: dict[str, Any], text: str) -> None:
        super().__init__(data)
        self.text = text


def event_data_json(data: Mapping[str, Any]) -> str:
    """Event data as JSON text; never raises (odd values become their ``repr``)."""
    kind = type(data)
    if kind is EncodedEventData:
        text: str = data.text  # type: ignore[attr-defined]
        return text
    return _EVENT_ENCODER.encode(data)


@lru_cache(maxsize=64)
def attempt_data(attempt: int | None) -> EncodedEventData:
    """``{"attempt": attempt}`` with its text: the data of ``EXECUTION_STARTED`` and of an
    outcome without an error, the same for every call at one attempt, so it is encoded once
    per attempt number (shared and read-only, like every ``EncodedEventData``)."""
    plain = {"attempt": attempt}
    return EncodedEventData(plain, event_data_json(plain))


def result_json(value: Any) -> str | None:
    """An executor's return value as canonical JSON, or ``{"repr": …}`` if it has none."""
    if value is None:
        return None
    if type(value) is str and value.isascii():  # its canonical text is its JSON string: no
        return string_text(value)  # validating walk and UTF-8 round trip (~3k instructions)
    try:
        return canonical_text(value)
    except InvalidArgument:
        return json.dumps({"repr": safe_text(repr(value))[:2000]})


def safe_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode escaped, so evidence can always be written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
