"""The scheduler's part of each job's trace.

The scheduler decides in cycles, for many jobs at once, so no single incoming message is
"the cause" of a decision. Instead it keeps each job's trace context, taken from the
headers of the job's `JobSubmitted` in ROTA_EVT (and of each run's `AllocationGranted`), and
parents every decision on it. Those headers come back when the view is rebuilt by replaying
the stream, so a restart or a new leader continues the same traces.

Each outgoing message of a cycle is written inside its decision's span, so the outbox row
carries that span's context and the ledger's grant, the coordinator's saga and the rest nest
under the decision that caused them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link
from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel
from rota.contracts import messages as m
from rota.tracing import job_context, job_span, trace_carrier

from rota_scheduler.actions import Actions, DecisionRecord, Outgoing

_DECISION_OF: dict[type[BaseModel], str] = {
    m.AllocationProposed: "admit", m.PreemptionRequested: "preempt", m.JobPending: "hold",
    m.StopRun: "stop", m.RunStopped: "stop", m.GrowRequested: "grow"}
_RUN_ENDS = (m.RunFinished, m.RunFailed, m.RunStopped)


class JobTraces:
    """Trace headers per job (its submission) and per granted run (its grant)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, str]] = {}
        self.grants: dict[str, dict[str, str]] = {}
        self.factors: dict[str, dict[str, float]] = {}
        """Each pending job's last published score, so an admission can say what it was."""

    def observe(self, event: BaseModel, job_id: str | None,
                headers: Mapping[str, Any] | None) -> None:
        if job_id is None:
            return
        if isinstance(event, m.JobSubmitted):
            carrier = trace_carrier(headers)
            if carrier:
                self.jobs[job_id] = carrier
        elif isinstance(event, m.AllocationGranted):
            self.grants[event.run_id] = trace_carrier(headers)
        elif isinstance(event, m.JobPending):
            f = event.factors
            self.factors[job_id] = {"queue": f.queue, "age": f.age, "fairshare": f.fairshare,
                                    "quota_headroom": f.quota_headroom, "total": f.total}
        elif isinstance(event, _RUN_ENDS):
            self.grants.pop(event.run_id, None)

    def job(self, job_id: str) -> Context:
        return job_context(job_id, self.jobs.get(job_id))

    def run_start(self, job_id: str, run_id: str) -> Context:
        """Under the ledger's grant when its headers are known, else under the job."""
        return job_context(job_id, self.grants.get(run_id) or self.jobs.get(job_id))


def paired(actions: Actions, traces: JobTraces) -> Iterator[tuple[Outgoing, DecisionRecord | None]]:
    """Each outgoing message with the decision it carries out. `plan_actions` appends one
    record per message, in the same order; anything else (a StartRun) has no record."""
    for hold in actions.records:
        if hold.decision == "hold" and hold.factors:
            # This cycle's score, so a plan decided in the same cycle as the hold has it.
            traces.factors[hold.job_id] = dict(hold.factors)
    records = iter(actions.records)
    for item in actions.outgoing:
        kind = _DECISION_OF.get(type(item.message))
        record = next(records, None) if kind is not None else None
        if record is not None and (record.job_id != item.job_id or record.decision != kind):
            record = None  # out of step: better no attributes than wrong ones
        yield item, record


def _admit_reason(message: m.AllocationProposed) -> str:
    if message.plan_id:
        return "freed_by_preemption"
    return "borrowed_idle_gpus" if message.borrowed_gpus else "fits"


def decision_attributes(item: Outgoing, record: DecisionRecord | None, traces: JobTraces,
                        cycle_id: str) -> dict[str, AttributeValue | None]:
    message = item.message
    kind = _DECISION_OF.get(type(message), "other")
    attrs: dict[str, AttributeValue | None] = {
        "rota.decision": kind, "rota.cycle_id": cycle_id, "rota.run_id": item.run_id,
        "rota.reason": record.reason if record else None,
    }
    factors = dict(record.factors) if record and record.factors else {}
    if isinstance(message, m.AllocationProposed):
        attrs.update({"rota.reason": _admit_reason(message), "rota.gpus": message.gpus,
                      "rota.borrowed_gpus": message.borrowed_gpus, "rota.plan_id": message.plan_id,
                      "rota.placement": [f"{w.node}:{','.join(map(str, w.gpus))}"
                                         for w in message.placement]})
        factors = factors or traces.factors.get(message.job_id, {})
    elif isinstance(message, m.PreemptionRequested):
        attrs.update({"rota.reason": message.reason, "rota.message": message.message,
                      "rota.plan_id": message.plan_id,
                      "rota.victims": [v.job_id for v in message.victims],
                      "rota.victim_runs": [v.run_id for v in message.victims],
                      "rota.expected_lost_gpu_seconds": message.expected_lost_gpu_seconds})
        factors = factors or traces.factors.get(message.preemptor_job_id, {})
    elif isinstance(message, m.GrowRequested):
        attrs.update({"rota.grow_id": message.grow_id, "rota.run_id": message.run_id,
                      "rota.workers": message.workers, "rota.gpus": message.added_gpus,
                      "rota.message": message.message})
    elif isinstance(message, m.JobPending):
        attrs.update({"rota.reasons": [r.code.value for r in message.reasons],
                      "rota.position": message.position,
                      "rota.eta": message.eta.isoformat() if message.eta else None})
    for name, value in factors.items():
        attrs[f"rota.factor.{name}"] = value
    return attrs


@contextmanager
def decision_span(item: Outgoing, record: DecisionRecord | None, traces: JobTraces,
                  cycle_id: str) -> Iterator[None]:
    """The span of one decision, current while its message is written to the outbox."""
    if item.job_id is None:
        yield
        return
    attrs = decision_attributes(item, record, traces, cycle_id)
    message = item.message
    victims = message.victims if isinstance(message, m.PreemptionRequested) else []
    links = [Link(trace.get_current_span(traces.job(v.job_id)).get_span_context(),
                  {"rota.role": "victim", "rota.job_id": v.job_id}) for v in victims]
    kind = _DECISION_OF.get(type(message), "other")
    with job_span(f"rota.decide {kind}", item.job_id, attrs,
                  parent=traces.job(item.job_id), links=links) as span:
        for victim in victims:
            _victim_span(victim, message, span.get_span_context(), traces)
        yield


def _victim_span(victim: m.Victim, plan: Any, preemptor: trace.SpanContext,
                 traces: JobTraces) -> None:
    """The other half of the link: in the victim's trace, a span that points at the plan."""
    with job_span("rota.decide preempted", victim.job_id, {
        "rota.decision": "preempted", "rota.reason": plan.reason, "rota.plan_id": plan.plan_id,
        "rota.run_id": victim.run_id, "rota.preemptor_job_id": plan.preemptor_job_id,
        "rota.expected_lost_gpu_seconds": victim.expected_lost_gpu_seconds,
        "rota.borrowed": victim.borrowed,
    }, parent=traces.job(victim.job_id),
            links=[Link(preemptor, {"rota.role": "preemptor",
                                    "rota.job_id": plan.preemptor_job_id})]):
        pass
