"""``plan_save`` is total and never writes over a version the save was not based on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctrlrun.errors import DocumentNotFound, VersionConflict
from ctrlrun.kernel.document import Content, SaveKind, Stored, plan_save

contents = st.sampled_from([{}, {"a": 1}, {"a": 2}, [1, 2], "text", None]).map(Content.of)
versions = st.integers(1, 6)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    stored=st.none() | st.builds(Stored, versions, contents.map(lambda c: c.hash)),
    content=contents,
    expected=versions,
)
def test_plan_save_is_total(stored, content, expected):
    if stored is None:
        with pytest.raises(DocumentNotFound):
            plan_save(stored, content, expected, doc_id="d")
        return
    if stored.content_hash == content.hash:
        plan = plan_save(stored, content, expected, doc_id="d")
        assert (plan.kind, plan.version) == (SaveKind.NOOP, stored.version)
    elif stored.version == expected:
        plan = plan_save(stored, content, expected, doc_id="d")
        assert (plan.kind, plan.version, plan.expected_version) == (
            SaveKind.WRITE,
            expected + 1,
            expected,
        )
    else:
        with pytest.raises(VersionConflict) as caught:
            plan_save(stored, content, expected, doc_id="d")
        assert (caught.value.current_version, caught.value.expected_version) == (
            stored.version,
            expected,
        )
