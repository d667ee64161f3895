"""Notification bodies rendered at delivery (kernel/notify_body.py): what a store row may hold
that is not an event is refused by name, never rendered."""

from __future__ import annotations

import pytest

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.notify import BodyFormat
from ctrlrun.kernel.notify_body import render


@pytest.mark.parametrize("event", [None, "text", {"type": "approval.requested"}, {"data": []}])
def test_a_row_that_carries_no_event_is_refused(event):
    with pytest.raises(InvalidArgument, match="carries no event"):
        render(event, BodyFormat.STANDARD)


def test_an_unknown_event_type_is_refused_with_its_name_escaped():
    with pytest.raises(InvalidArgument) as caught:
        render({"type": "evil\u202e.type", "data": {}}, BodyFormat.SLACK)
    assert "\\u202e" in caught.value.message and "\u202e" not in caught.value.message
