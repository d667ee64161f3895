"""Three-way merges a document kind may offer to ``DocumentSession.rebase``.

A merge is handed the confirmed base (what the local edits started from), the local copy and
the stored one, and returns the content to save against the stored version, or raises
``MergeConflict`` naming what it cannot combine. It never picks a side on its own: a change
both sides made differently is a conflict for a person, not a last write that wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ctrlrun.errors import InvalidArgument, MergeConflict

Resolve = Callable[[Any, Any, Any], Any]
"""``resolve(base, mine, theirs) -> merged``."""

_ABSENT: Final = object()


def merge_json_objects(base: Any, mine: Any, theirs: Any) -> dict[str, Any]:
    """Merge three JSON objects key by key (the top-level keys are the unit, like a record's
    attributes; values are compared whole).

    For each key, with "absent" a value of its own (so deletions merge too):

    * both sides hold the same value: that value;
    * only one side differs from the base: that side's value;
    * both sides differ from the base and from each other: a conflict.

    Raises ``MergeConflict(keys)`` listing every conflicting key, sorted, and merges nothing;
    ``InvalidArgument`` if any of the three is not an object.
    """
    for name, value in (("base", base), ("mine", mine), ("theirs", theirs)):
        if not isinstance(value, Mapping):
            raise InvalidArgument(f"a json-object merge needs objects; {name} is {value!r:.60}")
    merged: dict[str, Any] = {}
    conflicts: list[str] = []
    for key in sorted({*base, *mine, *theirs}):
        was, ours, other = base.get(key, _ABSENT), mine.get(key, _ABSENT), theirs.get(key, _ABSENT)
        if ours == other:
            chosen = ours
        elif ours == was:
            chosen = other
        elif other == was:
            chosen = ours
        else:
            conflicts.append(key)
            continue
        if chosen is not _ABSENT:
            merged[key] = chosen
    if conflicts:
        raise MergeConflict(
            f"both sides changed {', '.join(map(repr, conflicts))} differently; choose",
            keys=tuple(conflicts),
        )
    return merged


MERGES: Final[Mapping[str, Resolve]] = {"json-object": merge_json_objects}
"""The kinds that can merge, by kind name. Any other kind leaves a conflict to the user."""


def merge_for(kind: str) -> Resolve | None:
    """The merge of ``kind``, or None if documents of that kind do not merge."""
    return MERGES.get(kind)
