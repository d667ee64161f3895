"""Adapter tests run against the real stores, as the runtime tests do: the same fixtures, plus
the one protected tool every adapter wraps (a refund, sync and async)."""

import pytest

import ctrlrun
from ctrlrun import Control
from ctrlrun.config import load_policy_text
from runtime.conftest import backend, clock, store  # noqa: F401 - fixtures, by name
from support.policies import POLICY


@pytest.fixture
def control(store, clock):  # noqa: F811 - the store fixture, by name
    return Control(load_policy_text(POLICY), store, clock=clock)


@pytest.fixture
def ran():
    """The refunds the protected function actually made."""
    return []


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


@pytest.fixture
def protected_refund(control, ran, mode):
    """``stripe.refund`` under ``control``: a plain function or a coroutine function."""
    if mode == "sync":

        @ctrlrun.protect("stripe.refund", control=control)
        def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            ran.append((payment_id, amount))
            return f"refunded {amount}"

    else:

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            ran.append((payment_id, amount))
            return f"refunded {amount}"

    return refund


@pytest.fixture
def committed_big(protected_refund, control, mode, ran):
    """``pay_big`` refunded after a person approved it: its key COMMITTED, one request made.
    Returns a function giving the request id; ``ran`` is emptied after."""

    def run() -> str:
        import asyncio

        def call():
            with ctrlrun.context("support-bot", "alice"):
                value = protected_refund("pay_big", 200_000)
                return asyncio.run(value) if mode == "async" else value

        with pytest.raises(ctrlrun.ApprovalRequired) as needed:
            call()
        control.approvals.grant(needed.value.request_id, "bob")
        assert call() == "refunded 200000"
        ran.clear()
        return needed.value.request_id

    return run
