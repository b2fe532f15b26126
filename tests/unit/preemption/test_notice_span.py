"""A victim's notice span links to the scheduler's plan span (DECISIONS 10), which the
`PreemptionRequested` headers carry, and not to the preemptor's root span."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rota.contracts import Tier
from rota.contracts import messages as m
from rota.ids import new_id
from rota.tracing import (
    JobIdGenerator,
    job_root_span_id,
    job_span,
    job_trace_id,
    outbox_headers,
    start_job_trace,
)
from rota_preemption import domain
from rota_preemption.domain import Saga, SendNotice, SendStop
from rota_preemption.spans import effect_span, plan_span_context


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider(id_generator=JobIdGenerator()))
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if not isinstance(provider.id_generator, JobIdGenerator):
        provider.id_generator = JobIdGenerator()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory


def _saga(preemptor: str, victim: str) -> Saga:
    request = m.PreemptionRequested(
        plan_id=new_id(), preemptor_job_id=preemptor, preemptor_queue=Tier.production,
        preemptor_team="ml", reason="rota:lower-tier", message="m", expected_lost_gpu_seconds=0,
        victims=[m.Victim(run_id=new_id(), job_id=victim, team="ml", queue=Tier.training,
                          gpus=8, expected_lost_gpu_seconds=0.0, resumable=True)])
    saga, _ = domain.start(request, datetime(2026, 3, 1, tzinfo=UTC), grace_s=lambda _: 60.0,
                           ended_runs={}, preemptor_cancelled=False, new_id=new_id)
    return saga


def test_the_notice_links_the_plan_span_from_the_plans_headers(
        exporter: InMemorySpanExporter) -> None:
    preemptor, victim = new_id(), new_id()
    saga = _saga(preemptor, victim)
    # The scheduler writes the plan inside its decision span; the outbox puts that span's
    # context in the message's headers.
    with start_job_trace("rota.job.submit", preemptor), \
            job_span("rota.decide preempt", preemptor) as plan_span:
        headers = outbox_headers(preemptor, "PreemptionRequested")
    plan = plan_span_context(headers, preemptor)
    assert plan is not None and plan.span_id == plan_span.get_span_context().span_id
    with effect_span(saga, SendNotice(saga.victims[0]), plan):
        pass
    notice = next(s for s in exporter.get_finished_spans() if s.name == "rota.preemption.notice"
                  and s.attributes and s.attributes.get("rota.job_id") == victim)
    assert notice.context.trace_id == job_trace_id(victim)
    linked = {(link.context.trace_id, link.context.span_id) for link in notice.links}
    assert (job_trace_id(preemptor), plan_span.get_span_context().span_id) in linked
    assert (job_trace_id(preemptor), job_root_span_id(preemptor)) not in linked


def test_without_a_plan_context_spans_fall_back_to_the_preemptors_root(
        exporter: InMemorySpanExporter) -> None:
    preemptor, victim = new_id(), new_id()
    saga = _saga(preemptor, victim)
    # Headers of another job's trace are not the plan's: they are not taken for it.
    assert plan_span_context(outbox_headers(new_id(), "X"), preemptor) is None
    assert plan_span_context(None, preemptor) is None
    with effect_span(saga, SendStop(saga.victims[0], forced=True)):
        pass
    stop = next(s for s in exporter.get_finished_spans() if s.name == "rota.preemption.stop"
                and s.attributes and s.attributes.get("rota.job_id") == victim)
    assert [(link.context.trace_id, link.context.span_id) for link in stop.links] == [
        (job_trace_id(preemptor), job_root_span_id(preemptor))]
