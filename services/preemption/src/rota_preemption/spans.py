"""The coordinator's spans: notice, ack, stop and completion, each in the right job's trace.

A saga is about two kinds of job. Its notices, acks and stops are about a victim, so their
spans go into the victim's trace; the completion is the preemptor's. Each span links to
the other side (the preemptor's trace from a victim's span, the victims' from the
completion), so an SRE can walk from either job to the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Link
from opentelemetry.util.types import AttributeValue
from rota.tracing import job_root_context, job_span

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


def _victim_attrs(saga: Saga, victim: Victim) -> dict[str, AttributeValue | None]:
    return {"rota.plan_id": saga.plan.plan_id, "rota.run_id": victim.run_id,
            "rota.notice_id": victim.notice_id, "rota.preemptor_job_id": saga.plan.preemptor_job_id,
            "rota.reason": saga.plan.reason, "rota.deadline": victim.deadline.isoformat(),
            "rota.grace_s": victim.grace_s}


@contextmanager
def effect_span(saga: Saga, effect: Effect) -> Iterator[None]:
    preemptor = saga.plan.preemptor_job_id
    match effect:
        case SendNotice(victim) | WithdrawNotice(victim):
            name = "notice" if isinstance(effect, SendNotice) else "withdraw"
            with job_span(f"rota.preemption.{name}", victim.job_id, _victim_attrs(saga, victim),
                          links=[_link(preemptor, "preemptor")]):
                yield
        case SendStop(victim, forced):
            with job_span("rota.preemption.stop", victim.job_id,
                          {**_victim_attrs(saga, victim), "rota.forced": forced,
                           "rota.checkpoint_uri": victim.checkpoint_uri},
                          links=[_link(preemptor, "preemptor")]):
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
