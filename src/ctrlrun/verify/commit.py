"""G11 (Postgres): a write transaction whose connection is lost in flight ends held or
refused — never FAILED, never admitting a blind retry.

Without a seam in the store, verify opens the windows from outside, on its own scratch
schema, from a separate session:

* **idle**: while the executor runs (between the call's two transactions) every backend of
  the store's connections is terminated (``pg_terminate_backend``, found by the scratch
  ``application_name``), so the outcome transaction meets a dead connection.
* **at COMMIT**: a deferred constraint trigger on the scratch ``receipts`` table takes an
  advisory lock that verify holds, so the outcome transaction blocks *inside its COMMIT*
  (the client has sent COMMIT and awaits the reply). Verify sees the store's backend waiting
  for that very lock — which only the deferred trigger takes, and only COMMIT fires it (the
  query text cannot tell: the store sends its last statements in one message with the
  COMMIT, and a long message is truncated in ``pg_stat_activity``) — terminates it, then
  releases the lock. The transaction does not land and the client's COMMIT gets no answer:
  for the store, the outcome of its COMMIT is unknown.

In both windows the call must end either *held* (the outcome recorded after the store
reconnected and re-read, or the record left EXECUTING for its lease to make AMBIGUOUS) or
*refused* (the call raises a store error, which is not ``NotExecuted``) — never FAILED, and a
blind retry is refused. What this does not establish: a COMMIT that the server applied but
whose reply was lost (that needs a protocol-aware proxy between client and server, which the
project's own test suite has and verify does not ship), a server crash, restart or failover,
or which re-read branch the store took.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any, Final

from ctrlrun.errors import NotExecuted, Refused
from ctrlrun.kernel.effect import EffectState

from .effects import NO_EFFECT
from .lab import Lab, NotApplicable, Passed, Remote
from .synthesis import Vector, variants

WAIT: Final = 15.0
HOLD_SQL: Final = (
    "CREATE FUNCTION {s}.ctrlrun_verify_hold() RETURNS trigger LANGUAGE plpgsql AS"
    " $$BEGIN PERFORM pg_advisory_xact_lock({k}); RETURN NULL; END$$",
    "CREATE CONSTRAINT TRIGGER ctrlrun_verify_hold AFTER INSERT ON {s}.receipts"
    " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.ctrlrun_verify_hold()",
)
UNHOLD_SQL: Final = ("DROP TRIGGER ctrlrun_verify_hold ON {s}.receipts",)
WAITING_FOR_KEY: Final = (
    "pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    " AND classid = %s::oid AND objid = %s::oid AND objsubid = 1)"
)
"""A backend queued on verify's bigint advisory key (pg_locks splits it into two 32-bit
halves; ``objsubid = 1`` marks a bigint key)."""


def lost_commit_never_failed(lab: Lab) -> Passed:
    """G11. See the module docstring: the idle and at-COMMIT windows, each on its own key."""
    if lab.scratch.kind != "postgres":
        raise NotApplicable(
            "the scratch store is SQLite (give --store-url postgresql://… to run it): an"
            " embedded store has no connection whose COMMIT can be lost in flight"
        )
    picked = lab.pick(lambda t: t.entry.effect is not None and len(variants(lab.policy, t, 2)) == 2)
    if picked is None:
        raise NotApplicable(NO_EFFECT + " that can take two distinct keys")
    idle, at_commit = variants(lab.policy, picked[0], 2)
    lab.store  # noqa: B018 - open (and migrate) before any window is opened
    first = _window(lab, idle, "idle", _kill_now)
    second = _window(lab, at_commit, "at COMMIT", _kill_at_commit)
    return Passed(lab.action, f"connection lost idle → {first}; lost at COMMIT → {second}")


def _window(lab: Lab, vector: Vector, name: str, opener: Any) -> str:
    control, remote = lab.control(), Remote()
    armed = opener(lab)

    def executor(**arguments: Any) -> str:
        remote(**arguments)
        armed.fire()
        return "done"

    try:
        lab.present(control, vector, executor)
        ended = "held (the call returned)"
    except NotExecuted as exc:
        raise lab.fail(f"{name}: the lost connection surfaced as NotExecuted") from exc
    except Exception as exc:  # a refusal or a store error: the call did not claim success
        ended = f"refused ({type(exc).__name__})"
    finally:
        armed.close()
    lab.check(armed.hit, f"{name}: the window was never opened ({armed.note})")
    return _settled(lab, vector, name, ended, remote)


def _settled(lab: Lab, vector: Vector, name: str, ended: str, remote: Remote) -> str:
    record = lab.scratch.open().get_effect(vector.effect_key)
    state = str(record.state) if record else "absent"
    lab.check(state != EffectState.FAILED, f"{name}: the lost connection left the effect FAILED")
    lab.check(state != "absent", f"{name}: the reservation itself was lost")
    retry = Remote()
    lab.expect(
        f"{name}: a blind retry", partial(lab.present, lab.control(), vector, retry), Refused
    )
    lab.check(retry.calls == 0 and remote.calls == 1, f"{name}: the executor ran again")
    return f"{ended}, record {state}, blind retry refused"


class _Window:
    """An armed fault: ``fire`` opens it from the executor; ``hit`` says whether it landed."""

    def __init__(self, lab: Lab) -> None:
        self.lab, self.hit, self.note = lab, False, ""
        self.admin = lab.scratch.admin()  # type: ignore[attr-defined]

    def fire(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.admin.close()

    def terminate(self, condition: str = "true", *params: Any) -> int:
        rows = self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            f" WHERE application_name = %s AND pid <> pg_backend_pid() AND {condition}",
            [self.lab.scratch.application_name, *params],  # type: ignore[attr-defined]
        ).fetchall()
        return sum(1 for (done,) in rows if done)


class _KillNow(_Window):
    def fire(self) -> None:
        self.hit = self.terminate() > 0
        self.note = "no backend of the store was connected"


class _KillAtCommit(_Window):
    def __init__(self, lab: Lab) -> None:
        super().__init__(lab)
        self.key = int.from_bytes(lab.scratch.schema.encode()[-6:], "big")  # type: ignore[attr-defined]
        self._ddl(HOLD_SQL)
        self.admin.execute("SELECT pg_advisory_lock(%s)", [self.key])
        self.watcher = threading.Thread(target=self._watch, daemon=True)

    def _ddl(self, statements: tuple[str, ...]) -> None:
        schema = self.lab.scratch.schema  # type: ignore[attr-defined]
        for statement in statements:
            self.admin.execute(statement.format(s=f'"{schema}"', k=self.key))

    def fire(self) -> None:
        self.watcher.start()

    def _watch(self) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not self.hit:
            self.hit = self.terminate(WAITING_FOR_KEY, self.key >> 32, self.key & 0xFFFFFFFF) > 0
            time.sleep(0.005)
        self.note = "no backend of the store ever waited inside COMMIT"
        self.admin.execute("SELECT pg_advisory_unlock(%s)", [self.key])

    def close(self) -> None:
        if self.watcher.is_alive():
            self.watcher.join(WAIT + 5)
        self._ddl(UNHOLD_SQL)
        super().close()


def _kill_now(lab: Lab) -> _Window:
    return _KillNow(lab)


def _kill_at_commit(lab: Lab) -> _Window:
    return _KillAtCommit(lab)
