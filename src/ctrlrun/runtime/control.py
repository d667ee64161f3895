"""``Control``: what a protected call runs under, and its entry points.

A ``Control`` holds the policy (re-read from its file when it changes), the store, the clock,
the sinks and the limits. The call itself, normalize → decide → approve → reserve → execute →
record, runs as one straight line in ``runtime.pipeline`` (decision 0030): ``run`` hands it
over once, and ``arun`` awaits the same steps through ``runtime.aio``, so both paths share
every check. The policy decides, the store reserves and records; the outcome table (a return is
COMMITTED, ``NotExecuted`` is FAILED, anything else AMBIGUOUS and re-raised) is the pipeline's.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from ctrlrun._time import Clock, check_positive, utc_now
from ctrlrun.errors import (
    ActionDenied,
    DenyReason,
    InvalidArgument,
    PolicyError,
    ProtectionMismatch,
)
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.approval import DEFAULT_APPROVAL_TTL, ApprovalRecord
from ctrlrun.kernel.effect import DEFAULT_LEASE
from ctrlrun.kernel.policy import Decision, Policy
from ctrlrun.kernel.protection import FindingKind, plan_protection
from ctrlrun.kernel.receipt import Receipt
from ctrlrun.kernel.template import Template
from ctrlrun.runtime import pipeline
from ctrlrun.runtime.approvals import Approvals
from ctrlrun.runtime.assess import Assessment, assess
from ctrlrun.runtime.call import CallSpec, make_spec
from ctrlrun.runtime.normalize import build_action, normalized
from ctrlrun.runtime.pipeline import InFlight
from ctrlrun.runtime.policy_source import PolicySource
from ctrlrun.runtime.receipts import Verdict, evaluated, proposed
from ctrlrun.runtime.reconcile import Reconcile
from ctrlrun.runtime.sinks import Sink
from ctrlrun.runtime.tracing import CallTracer, traced
from ctrlrun.store.protocol import StateStore

log = logging.getLogger("ctrlrun")

DEFAULT_MAX_ARGUMENT_BYTES = 1 << 20  # 1 MiB of canonical arguments per call


class Control:
    """Protects calls against ``policy``, recording in ``store``.

    ``lease`` bounds how long an attempt may hold its effect key before a contender finds it
    lapsed (and AMBIGUOUS); ``clock`` stamps receipts; ``sinks`` receive every receipt after the
    store has it and can never fail an action; ``async_workers`` is how many store threads the
    async path uses; ``max_argument_bytes`` caps one call's canonical arguments (a larger call
    is refused with ``InvalidArgument`` before anything is written); ``tracer`` sees each call
    whole (``runtime.tracing``; ``ctrlrun.integrations.otel`` for OpenTelemetry).
    """

    def __init__(
        self,
        policy: Policy,
        store: StateStore,
        *,
        lease: timedelta = DEFAULT_LEASE,
        clock: Clock | None = None,
        approval_ttl: timedelta = DEFAULT_APPROVAL_TTL,
        sinks: Sequence[Sink] = (),
        async_workers: int = 8,
        max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
        tracer: CallTracer | None = None,
    ) -> None:
        if not isinstance(async_workers, int) or async_workers < 1:
            raise InvalidArgument(f"async_workers must be a positive int, got {async_workers!r}")
        if not isinstance(max_argument_bytes, int) or max_argument_bytes < 1:
            raise InvalidArgument(
                f"max_argument_bytes must be a positive int, got {max_argument_bytes!r}"
            )
        self.max_argument_bytes = max_argument_bytes
        self.policy = policy
        self._source: PolicySource | None = None  # set by from_file: re-read on change
        self._fits: dict[tuple[object, ...], tuple[str, ...]] = {}  # check_protection's verdicts
        self.store = store
        self.lease = check_positive(lease, "lease")
        self.approval_ttl = check_positive(approval_ttl, "approval_ttl")
        self._clock = clock or utc_now
        self.tracer = tracer
        self._sinks = (*sinks, tracer) if isinstance(tracer, Sink) else tuple(sinks)
        self.async_workers = async_workers
        self._threads: ThreadPoolExecutor | None = None  # the async path's store threads
        self._threads_lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | None = None, *, create: bool = False, **kwargs: Any) -> Control:
        """Policy from ``path``, ``$CTRLRUN_CONFIG`` or ``./ctrlrun.yaml``; store from
        ``$CTRLRUN_STORE_URL`` or ``.ctrlrun/state.db`` beside the policy. The store must
        exist (``ctrlrun init`` creates it) unless ``create=True``: a missing or empty one is
        ``StoreNotFound``, never silently recreated."""
        from ctrlrun.config import load_policy_file  # YAML loads with the first policy file
        from ctrlrun.runtime.locate import missing_policy_text, open_default_store, policy_path

        found = policy_path(path)
        if not found.exists() and not found.is_symlink():
            raise PolicyError(missing_policy_text(found), path=str(found))
        policy = load_policy_file(found)
        store = kwargs.pop("store", None) or open_default_store(found, create=create)
        control = cls(policy, store, **kwargs)
        control._source = PolicySource(found, policy)
        return control

    def refresh_policy(self) -> Policy:
        """The policy to decide with now. A ``Control`` made by ``from_file`` re-reads its
        file when it changed (one ``stat`` per call); a file that no longer loads denies
        every call with ``DenyReason.POLICY_UNLOADABLE`` until it loads again."""
        source = self._source
        if source is None:
            return self.policy
        self.policy = source.refresh()
        if source.error is not None:
            raise ActionDenied(
                f"the policy {source.path} does not load, so every call is denied until it"
                f" is fixed: {source.error}",
                reason=DenyReason.POLICY_UNLOADABLE,
            )
        return self.policy

    # --- entry points ---------------------------------------------------------------------

    @functools.cached_property
    def approvals(self) -> Approvals:
        """The approval requests of this store, answered under this policy."""
        return Approvals(self)

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks every receipt (and approval step) is handed to."""
        return self._sinks

    def now(self) -> datetime:
        """This ``Control``'s clock (receipts and approval expiry are judged by it)."""
        return self._clock()

    def build(self, name: str, arguments: dict[str, Any], principal: Principal) -> Action:
        """The action a protected function ``name`` would make of ``arguments`` for
        ``principal`` under the current policy (its resource template applied)."""
        return build_action(self.refresh_policy(), name, dict(arguments), principal)

    def evaluate(self, name: str, arguments: dict[str, Any], principal: Principal) -> Assessment:
        """What would happen to this call now, writing nothing: the decision and its rule,
        the effect key and its state, and the approval that decides it (``Assessment``);
        ``ApprovalMismatch`` (``tampered``) if that request's stored action was rewritten."""
        policy = self.refresh_policy()
        return assess(self, build_action(policy, name, dict(arguments), principal), policy)

    def execute(
        self,
        action: Action,
        executor: Callable[..., Any],
        *,
        effect_key: str | None = None,
        effect: str | Template | None = None,
        lease: timedelta | None = None,
        reconcile: Reconcile | None = None,
        approval_id: str | None = None,
    ) -> Receipt:
        """Run ``executor(**action.canonical_arguments)`` under every check; return the receipt.

        Raises the refusal (``ActionDenied``, ``ApprovalRequired``, ``ApprovalMismatch``,
        ``DuplicateEffect``, ``AmbiguousEffect``) with the executor never called, or re-raises
        the executor's own exception after recording FAILED (``NotExecuted``) or AMBIGUOUS.
        """
        spec = make_spec(effect_key, effect, lease, reconcile, approval_id)
        return self.run(action, executor, spec)[1]

    def run(
        self,
        action: Action,
        executor: Callable[..., Any],
        spec: CallSpec,
        *,
        policy: Policy | None = None,
    ) -> tuple[Any, Receipt]:
        """The whole call (``runtime.pipeline``, handed over once); returns the executor's
        value and the receipt. ``executor`` must be a plain function: one that returns an
        awaitable is refused (use ``arun``). ``policy`` is the one the action was built under
        (``protect`` passes its own): one policy decides the whole call; by default it is
        ``refresh_policy()`` now."""
        return pipeline.run(self, action, executor, spec, policy)

    async def aexecute(
        self,
        action: Action,
        executor: Callable[..., Any],
        *,
        effect_key: str | None = None,
        effect: str | Template | None = None,
        lease: timedelta | None = None,
        reconcile: Reconcile | None = None,
        approval_id: str | None = None,
    ) -> Receipt:
        """``execute`` for async code: the same checks and outcomes; ``executor`` may be an
        ``async def`` (awaited on the loop) or a plain function (run on a worker thread)."""
        spec = make_spec(effect_key, effect, lease, reconcile, approval_id)
        return (await self.arun(action, executor, spec))[1]

    async def arun(
        self,
        action: Action,
        executor: Callable[..., Any],
        spec: CallSpec,
        *,
        policy: Policy | None = None,
    ) -> tuple[Any, Receipt]:
        """``run`` for async code. Store work runs on worker threads behind this Control's own
        limiter (``async_workers``); the outcome is recorded even when the call is cancelled,
        and the cancellation then propagates. See ``runtime.aio``."""
        from ctrlrun.runtime.aio import run_async

        if self.tracer is None:
            return await run_async(self, action, executor, spec, policy)
        with traced(self.tracer, action):
            return await run_async(self, action, executor, spec, policy)

    def check_protection(
        self,
        name: str,
        parameters: frozenset[str],
        *,
        effect: Template | None = None,
        resource: Template | None = None,
        policy: Policy | None = None,
    ) -> None:
        """``ProtectionMismatch`` (with every finding) if ``policy`` (by default the current
        one) names arguments that a function protected as ``name`` with ``parameters`` (and
        its own ``effect`` and ``resource`` templates) lacks. Decided once per policy and
        function shape."""
        if policy is None:
            policy = self.policy
        key = (policy.policy_hash, name, parameters, effect, resource)
        misfits = self._fits.get(key)
        if misfits is None:
            found = plan_protection(policy, name, parameters, effect=effect, resource=resource)
            misfits = tuple(str(f) for f in found if f.kind is FindingKind.MISSING_PARAMETER)
            self._fits[key] = misfits
        if misfits:
            raise ProtectionMismatch(
                f"{name}: the protected function does not fit the policy: {'; '.join(misfits)}"
                " (run `ctrlrun check` on its module)",
                findings=misfits,
            )

    def _store_threads(self) -> ThreadPoolExecutor:
        """The async path's own store threads (``async_workers`` of them), made at first use;
        each holds its own store connection."""
        with self._threads_lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.async_workers, "ctrlrun-store")
            return self._threads

    def request_approval(self, action: Action) -> ApprovalRecord:
        """The pending request for exactly ``action`` (made now, or the one already waiting),
        without running anything: for a framework that pauses before it calls the tool.
        ``InvalidArgument`` if the policy does not say ``approve`` for it; the refusal the call
        would get (``AlreadyCommitted`` with the stored result, ``InProgress``,
        ``AmbiguousEffect``), with nothing written, if its effect key already committed, is
        held or is AMBIGUOUS: nobody is asked about what already ran."""
        policy = self.refresh_policy()
        action = normalized(policy, action)
        evaluation = policy.evaluate(action)
        if evaluation.decision is not Decision.APPROVE:
            raise InvalidArgument(
                f"{action.name}: the policy says {evaluation.decision}, not approve"
            )
        refusal = assess(self, action, policy).refusal
        if refusal is not None:
            raise refusal
        entry = policy.entry(action.name)
        call = InFlight(
            self, self.store, self._clock, action, CallSpec(), policy, entry, self._clock()
        )
        call.verdict = Verdict("approve", evaluation.label, policy.policy_hash, evaluation.controls)
        call.pre = (proposed(action), evaluated(action, call.verdict, None))
        if entry is not None:
            call.approval = entry.approval_for(evaluation.rule)
        return pipeline.ask(call)
