"""The coordinator's spans: notice, ack, stop and completion, each in the right job's trace.

A saga is about two kinds of job. Its notices, acks and stops are about a victim, so their
spans go into the victim's trace; the completion is the preemptor's. Each span links to
the other side, so an SRE can walk from either job to the other: a victim's notice links to
the scheduler's plan span (`rota.decide preempt`, whose context the `PreemptionRequested`
headers carry, DECISIONS 10), and spans without that message at hand (a stop after an ack,
a withdrawal) to the preemptor's root; the completion links to the victims' traces.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext
from opentelemetry.util.types import AttributeValue
from rota.tracing import context_from_headers, in_job_trace, job_root_context, job_span

from rota_preemption.domain import (
    Effect,
    PublishCompleted,
    Saga,
    SendNotice,
    SendStop,
    Victim,
    WithdrawNotice,
)


def _link(job_id: str, role: str) -> Link:
    context = trace.get_current_span(job_root_context(job_id)).get_span_context()
    return Link(context, {"rota.role": role, "rota.job_id": job_id})


def plan_span_context(headers: Mapping[str, Any] | None, preemptor_job_id: str
                      ) -> SpanContext | None:
    """The scheduler's plan span, from the headers of its `PreemptionRequested`; None when
    they carry no context of the preemptor's trace (a plan published without tracing)."""
    ctx = context_from_headers(headers)
    if ctx is None or not in_job_trace(ctx, preemptor_job_id):
        return None
    return trace.get_current_span(ctx).get_span_context()


def _preemptor_link(saga: Saga, plan: SpanContext | None) -> Link:
    if plan is None:
        return _link(saga.plan.preemptor_job_id, "preemptor")
    return Link(plan, {"rota.role": "plan", "rota.job_id": saga.plan.preemptor_job_id,
                       "rota.plan_id": saga.plan.plan_id})


def _victim_attrs(saga: Saga, victim: Victim) -> dict[str, AttributeValue | None]:
    return {"rota.plan_id": saga.plan.plan_id, "rota.run_id": victim.run_id,
            "rota.notice_id": victim.notice_id, "rota.preemptor_job_id": saga.plan.preemptor_job_id,
            "rota.reason": saga.plan.reason, "rota.deadline": victim.deadline.isoformat(),
            "rota.grace_s": victim.grace_s}


@contextmanager
def effect_span(saga: Saga, effect: Effect, plan: SpanContext | None = None) -> Iterator[None]:
    """`plan`: the scheduler's plan span, when the caller has the plan's message in hand."""
    preemptor = saga.plan.preemptor_job_id
    match effect:
        case SendNotice(victim) | WithdrawNotice(victim):
            name = "notice" if isinstance(effect, SendNotice) else "withdraw"
            with job_span(f"rota.preemption.{name}", victim.job_id, _victim_attrs(saga, victim),
                          links=[_preemptor_link(saga, plan)]):
                yield
        case SendStop(victim, forced):
            with job_span("rota.preemption.stop", victim.job_id,
                          {**_victim_attrs(saga, victim), "rota.forced": forced,
                           "rota.checkpoint_uri": victim.checkpoint_uri},
                          links=[_preemptor_link(saga, plan)]):
                yield
        case PublishCompleted(done):
            victims = done.victims
            with job_span("rota.preemption.completed", preemptor, {
                "rota.plan_id": done.plan.plan_id,
                "rota.aborted": done.plan.state.value == "aborted",
                "rota.victims": [v.job_id for v in victims],
                "rota.outcomes": [f"{v.job_id}:{v.outcome.value if v.outcome else 'open'}"
                                  for v in victims],
                "rota.lost_gpu_seconds": sum(v.lost_gpu_seconds for v in victims),
            }, links=[_link(v.job_id, "victim") for v in victims]):
                yield
        case _:
            yield


@contextmanager
def ack_span(job_id: str, run_id: str, notice_id: str, plan_id: str | None, verdict: str,
             checkpoint_uri: str) -> Iterator[None]:
    with job_span("rota.preemption.ack", job_id, {
        "rota.run_id": run_id, "rota.notice_id": notice_id, "rota.plan_id": plan_id,
        "rota.verdict": verdict, "rota.checkpoint_uri": checkpoint_uri,
    }):
        yield
