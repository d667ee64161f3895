"""The refusal brake the framework adapters share: a model that keeps making a call ctrlrun
refuses is stopped after ``limit`` identical refused calls in one run.

"Identical" is the same tool with the same arguments (``call_fingerprint``); "refused" is any
answer that did not run the tool (a denial, a duplicate, AMBIGUOUS, an unapproved resume). The
adapters differ only in what "one run" is and how the run ends (docs/integrations.md):
LangGraph counts the refusals in the graph's own messages since the user's last message and
ends the run with a final text; the Agents SDK and pydantic-ai count in this object, per run,
and raise ``ctrlrun.RefusalLoop``. Imports no framework.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from ctrlrun.canonical import canonical_text
from ctrlrun.errors import InvalidArgument, RefusalLoop

DEFAULT_REFUSALS: Final = 3
MAX_RUNS: Final = 1024  # runs remembered at once; the least recently refused forgotten first


def call_fingerprint(tool: str, arguments: Mapping[str, Any]) -> str:
    """One short id for ``tool`` called with ``arguments``: equal for identical calls."""
    try:
        text = canonical_text({"tool": tool, "arguments": dict(arguments)})
    except (TypeError, ValueError):  # a value canonical JSON refuses: its plain JSON instead
        text = json.dumps([tool, arguments], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def check_limit(limit: int) -> int:
    """``limit`` if it is a positive int, else ``InvalidArgument``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"max_refusals must be a positive int, got {limit!r}")
    return limit


def loop_error(
    tool: str, refusals: int, last: str, kind: type[RefusalLoop] = RefusalLoop
) -> RefusalLoop:
    """The ``RefusalLoop`` (or its subclass ``kind``) that ends a run after ``refusals``
    identical refused calls."""
    return kind(
        f"{tool}: the same refused call was made {refusals} times in one run; the run was"
        " ended by ctrlrun's refusal brake",
        tool=tool,
        refusals=refusals,
        last=last,
    )


class RefusalBrake:
    """Counts identical refused calls per run, for adapters whose framework gives a per-run
    object (``run``: held weakly; a run that is gone is forgotten)."""

    def __init__(
        self, limit: int = DEFAULT_REFUSALS, *, kind: type[RefusalLoop] = RefusalLoop
    ) -> None:
        self.limit = check_limit(limit)
        self.kind = kind  # a framework may need its own subclass to let the error through
        self._runs: OrderedDict[int, tuple[weakref.ref[Any], Counter[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def refused(self, run: object, tool: str, arguments: Mapping[str, Any], text: str) -> None:
        """Count one refused call of ``tool`` with ``arguments`` in ``run`` (answered with
        ``text``); raise ``RefusalLoop`` when it is the ``limit``-th identical one."""
        fingerprint = call_fingerprint(tool, arguments)
        with self._lock:
            counts = self._counts(run)
            counts[fingerprint] += 1
            seen = counts[fingerprint]
        if seen >= self.limit:
            raise loop_error(tool, seen, text, self.kind)

    def _counts(self, run: object) -> Counter[str]:
        key = id(run)
        held = self._runs.pop(key, None)
        if held is None or held[0]() is not run:  # new, or an id reused by a later object
            held = (weakref.ref(run), Counter())
        self._runs[key] = held  # the most recent last
        while len(self._runs) > MAX_RUNS:
            self._runs.popitem(last=False)
        return held[1]
