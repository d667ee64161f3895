"""OpenTelemetry: one span per protected call, with the GenAI tool attributes and ctrlrun's,
current around the executor (spans it makes nest under it), ERROR only for failed and
ambiguous outcomes; sync and async, on both stores. The SDK's in-memory exporter collects."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ctrlrun
from ctrlrun import Control, NotExecuted
from ctrlrun.config import load_policy_text
from ctrlrun.integrations.otel import OTelTracer
from support.policies import POLICY


@pytest.fixture
def spans():
    return InMemorySpanExporter()


@pytest.fixture
def provider(spans):
    found = TracerProvider()
    found.add_span_processor(SimpleSpanProcessor(spans))
    return found


@pytest.fixture
def traced(store, clock, provider):
    return Control(load_policy_text(POLICY), store, clock=clock, tracer=OTelTracer(provider))


def by_name(spans, name):
    return [s for s in spans.get_finished_spans() if s.name == name]


def test_a_committed_call_is_one_span_with_the_executor_s_spans_inside(traced, provider, spans):
    inner = provider.get_tracer("http-client")

    @ctrlrun.protect("stripe.refund", control=traced)
    def refund(payment_id: str, amount: int):
        with inner.start_as_current_span("POST /v1/refunds"):
            return "refunded"

    with ctrlrun.context("bot"):
        assert refund("pay_1", 5) == "refunded"
    [span] = by_name(spans, "execute_tool stripe.refund")
    [http] = by_name(spans, "POST /v1/refunds")
    assert http.parent.span_id == span.context.span_id
    attributes = dict(span.attributes)
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "stripe.refund"
    assert attributes["ctrlrun.result"] == "committed"
    assert attributes["ctrlrun.effect_key"] == "refund:pay_1"
    assert attributes["ctrlrun.attempt"] == 1 and attributes["ctrlrun.decision"] == "allow"
    assert attributes["ctrlrun.receipt_id"].startswith("rcp_")
    assert "gen_ai.tool.call.arguments" not in attributes
    assert span.status.status_code is trace.StatusCode.UNSET


def test_failed_and_ambiguous_are_errors_refusals_are_not(traced, spans):
    outcomes = iter([NotExecuted("declined"), RuntimeError("reply lost")])

    @ctrlrun.protect("stripe.refund", control=traced)
    def refund(payment_id: str, amount: int):
        raise next(outcomes)

    with ctrlrun.context("bot"):
        with pytest.raises(NotExecuted):
            refund("pay_1", 5)
        with pytest.raises(RuntimeError):
            refund("pay_2", 5)
        with pytest.raises(ctrlrun.ActionDenied):
            refund("pay_3", 10_000_000)
    failed, ambiguous, denied = by_name(spans, "execute_tool stripe.refund")
    assert failed.attributes["ctrlrun.result"] == "failed"
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert ambiguous.attributes["ctrlrun.result"] == "ambiguous"
    assert ambiguous.status.status_code is trace.StatusCode.ERROR
    assert denied.attributes["ctrlrun.result"] == "denied"
    assert denied.attributes["ctrlrun.refusal"] == "policy"
    assert denied.attributes["ctrlrun.decision_reason"] == "rule[2]"
    assert denied.status.status_code is trace.StatusCode.UNSET


def test_an_approved_call_names_its_approver_and_arguments_are_opt_in(
    store, clock, provider, spans
):
    control = Control(
        load_policy_text(POLICY),
        store,
        clock=clock,
        tracer=OTelTracer(provider, record_arguments=True),
    )

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return "refunded"

    with ctrlrun.context("bot"):
        with pytest.raises(ctrlrun.ApprovalRequired) as needed:
            refund("pay_big", 200_000)
        control.approvals.grant(needed.value.request_id, "bob")
        refund("pay_big", 200_000)
    asked, ran = by_name(spans, "execute_tool stripe.refund")
    assert asked.attributes["ctrlrun.refusal"] == "approval_required"
    assert ran.attributes["ctrlrun.approver"] == "bob"
    arguments = ran.attributes["gen_ai.tool.call.arguments"]
    assert arguments == '{"amount":200000,"payment_id":"pay_big"}'


def test_a_call_waiting_for_a_person_carries_the_decision_rule_key_and_request(traced, spans):
    @ctrlrun.protect("stripe.refund", control=traced)
    def refund(payment_id: str, amount: int):
        return "refunded"

    async def arefund(payment_id: str, amount: int):
        return "refunded"

    protected_async = ctrlrun.protect("stripe.refund", control=traced)(arefund)

    async def main():
        with ctrlrun.context("bot"):
            with pytest.raises(ctrlrun.ApprovalRequired) as waiting:
                await protected_async("pay_async", 300_000)
        return waiting.value.request_id

    with ctrlrun.context("bot"), pytest.raises(ctrlrun.ApprovalRequired) as needed:
        refund("pay_big", 200_000)
    async_request = asyncio.run(main())
    sync_span, async_span = by_name(spans, "execute_tool stripe.refund")
    for span, request_id, key in (
        (sync_span, needed.value.request_id, "refund:pay_big"),
        (async_span, async_request, "refund:pay_async"),
    ):
        attributes = dict(span.attributes)
        assert attributes["ctrlrun.decision"] == "approve"
        assert attributes["ctrlrun.decision_reason"] == "rule[1]"
        assert attributes["ctrlrun.effect_key"] == key
        assert attributes["ctrlrun.approval_id"] == request_id
        assert attributes["ctrlrun.refusal"] == "approval_required"
        assert span.status.status_code is trace.StatusCode.UNSET


def test_an_async_call_is_traced_the_same_way(traced, provider, spans):
    inner = provider.get_tracer("http-client")

    @ctrlrun.protect("stripe.refund", control=traced)
    async def refund(payment_id: str, amount: int):
        with inner.start_as_current_span("POST /v1/refunds"):
            await asyncio.sleep(0)
            return "refunded"

    async def main():
        with ctrlrun.context("bot"):
            return await refund("pay_1", 5)

    assert asyncio.run(main()) == "refunded"
    [span] = by_name(spans, "execute_tool stripe.refund")
    [http] = by_name(spans, "POST /v1/refunds")
    assert http.parent.span_id == span.context.span_id
    assert span.attributes["ctrlrun.result"] == "committed"
