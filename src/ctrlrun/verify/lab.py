"""The workbench every guarantee runs on: the operator's policy, a scratch store created on
first use, an injected clock, counting fakes, and assertions that turn into a FAIL carrying a
counterexample (every effect record, receipt, event and approval of the scenario).

A guarantee is a function of a ``Lab`` returning a ``Passed`` (which action, what was shown),
or raising ``Failed`` (a violated guarantee, or a control that misbehaved — also a FAIL) or
``NotApplicable`` (a true statement about the document). Anything else is verify's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, TypeVar

from ctrlrun._time import ManualClock
from ctrlrun.errors import ApprovalRequired
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.effect import DEFAULT_LEASE
from ctrlrun.kernel.policy import Decision, Policy
from ctrlrun.kernel.receipt import Receipt
from ctrlrun.runtime.control import Control

from .scratch import Scratch
from .synthesis import PREFIX, Target, Vector, solve, targets

E = TypeVar("E", bound=BaseException)
T = TypeVar("T")

APPROVER: Final = f"{PREFIX}-approver"
ADMITTED: Final = (Decision.ALLOW, Decision.APPROVE)


class Failed(Exception):
    """The guarantee does not hold (or its control misbehaved): ``detail`` says how."""

    def __init__(self, detail: str, action: str = "", counterexample: Any = None) -> None:
        super().__init__(detail)
        self.detail, self.action, self.counterexample = detail, action, counterexample


class NotApplicable(Exception):
    """The document gives this guarantee nothing to exercise; ``reason`` says what it lacks."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Passed:
    """What a passing guarantee exercised and showed."""

    action: str
    detail: str


def nothing_admitted(policy: Policy) -> str:
    """The N/A reason when no action can be allowed or approved, as the document says it."""
    if not policy.actions:
        return "the policy lists no action"
    return "every action in the document is denied, so nothing admitted can be exercised"


class Remote:
    """A counting fake executor: raises the queued exceptions in turn, then returns."""

    def __init__(self, *raises: BaseException) -> None:
        self.calls = 0
        self._raises = list(raises)

    def __call__(self, **arguments: Any) -> dict[str, Any]:
        self.calls += 1
        if self._raises:
            raise self._raises.pop(0)
        return {PREFIX: "done", "call": self.calls}


def _never(**arguments: Any) -> None:
    raise AssertionError("the executor ran before an approval was granted")


class Lab:
    """One guarantee's scenario space. ``store`` opens the scratch store on first use."""

    def __init__(self, gid: str, policy: Policy, scratch: Scratch, processes: int = 8) -> None:
        self.gid, self.policy, self.scratch, self.processes = gid, policy, scratch, processes
        self.clock = ManualClock()
        self._store: Any = None
        self.action = ""

    @property
    def store(self) -> Any:
        if self._store is None:
            self._store = self.scratch.open(self.clock)
        return self._store

    def control(self, lease: timedelta = DEFAULT_LEASE) -> Control:
        """A ``Control`` on the scratch store, stamping with the lab's clock."""
        return Control(self.policy, self.store, clock=self.clock, lease=lease)

    # --- choosing what to exercise --------------------------------------------------------

    def pick(
        self,
        accept: Callable[[Target], bool],
        decisions: Iterable[Decision] = ADMITTED,
        fits: Callable[[Vector], bool] = lambda vector: True,
    ) -> tuple[Target, Vector] | None:
        """The first target (sorted by action name, then rule) ``accept`` takes and whose
        vector ``fits``; it becomes the action this guarantee reports."""
        for target in targets(self.policy, decisions):
            if accept(target):
                vector = solve(self.policy, target)
                if vector is not None and fits(vector):
                    self.action = target.label
                    return target, vector
        return None

    # --- running actions ------------------------------------------------------------------

    def approve(self, control: Control, action: Action) -> str:
        """Request and grant an approval for ``action``'s hash, as ``ctrlrun approve`` would."""
        try:
            control.execute(action, _never)
        except ApprovalRequired as required:
            self.store.grant_approval(required.request_id, APPROVER)
            return required.request_id
        raise self.fail(f"{action.name} was decided approve, yet no approval was requested")

    def present(self, control: Control, vector: Vector, remote: Callable[..., Any]) -> Receipt:
        """Run a fresh action for ``vector`` (approving it first when its rule says approve)."""
        approval = None
        if vector.target.decision is Decision.APPROVE:
            approval = self.approve(control, vector.action())
        return control.execute(vector.action(), remote, approval_id=approval)

    # --- verdicts -------------------------------------------------------------------------

    def fail(self, detail: str) -> Failed:
        """A ``Failed`` for this guarantee with the scenario's full evidence."""
        return Failed(detail, self.action, self.counterexample())

    def check(self, condition: object, detail: str) -> None:
        """Fail with ``detail`` unless ``condition`` holds."""
        if not condition:
            raise self.fail(detail)

    def expect(self, what: str, call: Callable[[], object], kind: type[E], **fields: Any) -> E:
        """``call`` must raise ``kind`` with ``fields`` (compared as text); else FAIL."""
        try:
            call()
        except kind as exc:
            wrong = {
                k: getattr(exc, k, None)
                for k, v in fields.items()
                if str(getattr(exc, k, None)) != str(v)
            }
            if wrong:
                raise self.fail(f"{what}: refused with {wrong}, expected {fields}") from exc
            return exc
        except (Failed, NotApplicable):
            raise
        except Exception as exc:
            got = f"{type(exc).__name__} ({exc})"
            raise self.fail(
                f"{what}: raised {got}, expected {kind.__name__}{fields or ''}"
            ) from exc
        raise self.fail(f"{what}: admitted, expected {kind.__name__}{fields or ''}")

    def control_ok(self, what: str, call: Callable[[], T]) -> T:
        """Run a positive control; any exception is a FAIL labelled ``control failed``."""
        try:
            return call()
        except (Failed, NotApplicable):
            raise
        except Exception as exc:
            raise self.fail(f"control failed: {what}: {type(exc).__name__}: {exc}") from exc

    def counterexample(self) -> dict[str, Any]:
        """Everything the scratch store holds (it holds only this scenario)."""
        if self._store is None:
            return {}
        store = self._store
        try:
            return {
                "effects": [_plain(vars_of(r)) for r in store.list_effects()],
                "receipts": [r.document for r in store.receipts()],
                "events": [e.to_dict() for e in store.events()],
                "approvals": [_plain(vars_of(a)) for a in store.list_approvals()],
            }
        except Exception as exc:  # the evidence must not hide the failure
            return {"unreadable": f"{type(exc).__name__}: {exc}"}


def vars_of(record: Any) -> dict[str, Any]:
    """A slotted dataclass's fields as a dict."""
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
