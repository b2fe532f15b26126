"""Decide, then act: turn one cycle's `Decisions` into the messages and records to commit.

Pure: ids come from an injected factory, so tests can pin them. Nothing here publishes; the
app writes every `Outgoing` through the outbox in one transaction with the decision log and
the proposed runs, then marks the view.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain, islice
from typing import Any

from pydantic import BaseModel
from rota.contracts import messages as m
from rota.contracts.job import share_fraction
from rota.contracts.lifecycle import Phase
from rota.contracts.subjects import EVENT_SUBJECTS, RUN_START, RUN_STOP, STREAM_CMD, STREAM_EVT
from rota.ids import new_id, stable_id
from rota_policy import Decisions, PendingExplanation, PreemptionPlan, Slot
from rota_policy.model.decisions import Grow

from rota_scheduler.records import JobRecord
from rota_scheduler.staleness import WaitPrint, staleness, words
from rota_scheduler.view import ClusterView


@dataclass(frozen=True)
class Outgoing:
    message: BaseModel
    subject: str
    stream: str
    job_id: str | None = None
    run_id: str | None = None
    id: str | None = None


@dataclass(frozen=True)
class DecisionRecord:
    job_id: str
    decision: str  # admit | hold | preempt | stop | start
    reason: str | None
    factors: dict[str, float]
    details: dict[str, Any]


@dataclass(frozen=True)
class NewRun:
    run_id: str
    job_id: str
    proposal_id: str


@dataclass
class Actions:
    outgoing: list[Outgoing] = field(default_factory=list)
    records: list[DecisionRecord] = field(default_factory=list)
    new_runs: list[NewRun] = field(default_factory=list)
    fingerprints: dict[str, WaitPrint] = field(default_factory=dict)
    stops: list[str] = field(default_factory=list)
    """Job ids whose run was told to stop (cancelled)."""
    held_back: list[str] = field(default_factory=list)
    """Job ids whose explanation changed but was left for a later cycle (`pending_limit`)."""


def placement_doc(slots: tuple[Slot, ...]) -> list[dict[str, Any]]:
    """The contract's placement; a GPU share's slot carries its fraction (`gpu_share`)."""
    return [{"worker": s.worker, "node": s.node, "gpus": list(s.gpus),
             **({"gpu_share": share_fraction(s.share)} if s.share else {})} for s in slots]


def fingerprint(explanation: PendingExplanation, overdue: bool) -> WaitPrint:
    """What a published wait said, to tell whether a fresh explanation says something new."""
    factors = explanation.factors
    text, times = words(r.message for r in explanation.reasons)
    return WaitPrint(
        codes=tuple(r.code.value for r in explanation.reasons),
        text=text,
        eta=explanation.eta,
        position=explanation.position,
        overdue=overdue,
        factors=(factors.queue, factors.age, factors.fairshare, factors.quota_headroom),
        times=times,
    )


def _iso(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def borrowed_whole(borrowed: float) -> int:
    """The contract counts borrowed GPUs whole: a share above its team's quota borrows its one
    GPU, as the ledger's grant says (`rota_ledger.domain`), though the policy counts 0.5."""
    return math.ceil(round(borrowed, 6))


def plan_actions(
    view: ClusterView,
    decisions: Decisions,
    *,
    now: float,
    new_uuid: Callable[[], str] = new_id,
    pending_limit: int | None = None,
) -> Actions:
    """The cycle's messages. Only explanations that changed beyond their tolerance are
    published (`staleness`), and at most `pending_limit` of them: a restart or a burst that
    changes every ETA spreads over a few cycles instead of one transaction of every pending
    job. Admissions, plans and stops are never held back."""
    actions = Actions()
    plan_of = {p.preemptor_job_id: p.plan_id for p in view.plans.values()}
    for admission in decisions.admissions:
        job = view.jobs[admission.job_id]
        run = NewRun(new_uuid(), job.job_id, new_uuid())
        actions.new_runs.append(run)
        spec = job.spec
        # What the placement holds: an elastic gang's admitted size, not its max (DECISIONS 71).
        held = sum(len(slot.gpus) for slot in admission.placement)
        actions.outgoing.append(
            Outgoing(
                m.AllocationProposed(
                    proposal_id=run.proposal_id,
                    job_id=job.job_id,
                    run_id=run.run_id,
                    team=spec.team,
                    user=spec.user,
                    queue=spec.queue,
                    flavor=admission.flavor or spec.flavor,
                    placement=placement_doc(admission.placement),
                    gpus=held,
                    borrowed_gpus=borrowed_whole(admission.borrowed_gpus),
                    plan_id=plan_of.get(job.job_id) if admission.via_plan else None,
                ),
                EVENT_SUBJECTS["AllocationProposed"],
                STREAM_EVT,
                job.job_id,
                run.run_id,
            )
        )
        actions.records.append(
            DecisionRecord(
                job.job_id,
                "admit",
                None,
                {},
                {
                    "run_id": run.run_id,
                    "gpus": held,
                    "borrowed_gpus": admission.borrowed_gpus,
                    "via_plan": admission.via_plan,
                    "flavor": admission.flavor or spec.flavor,
                    "placement": placement_doc(admission.placement),
                },
            )
        )
    for plan in decisions.plans:
        actions.outgoing.append(_preemption(view, plan, new_uuid()))
        actions.records.append(
            DecisionRecord(
                plan.preemptor_job_id,
                "preempt",
                plan.reason,
                {},
                {
                    "victims": [v.run_id for v in plan.victims],
                    # An elastic victim shrunk instead of stopped: the workers it keeps.
                    "shrink_to": {v.run_id: v.shrink_to for v in plan.victims if v.shrink_to},
                    "message": plan.message,
                    "expected_lost_gpu_s": plan.expected_lost_gpu_s,
                },
            )
        )
    _grow_actions(view, decisions, actions, new_uuid)
    _explain_actions(view, decisions, actions, now, pending_limit)
    for job in view.stops_needed():
        actions.stops.append(job.job_id)
        actions.outgoing.append(_stop_cancelled(view, job))
        actions.records.append(DecisionRecord(job.job_id, "stop", "cancelled", {}, {"run_id": job.run_id}))
    return actions


def _explain_actions(view: ClusterView, decisions: Decisions, actions: Actions, now: float,
                     pending_limit: int | None) -> None:
    """A JobPending (and its decision record) for each explanation gone stale: never published
    first, then the most changed, `pending_limit` at most; the rest are `held_back`."""
    floor = factor_floor(view)
    stale: list[tuple[float, int, PendingExplanation, WaitPrint]] = []
    for order, explanation in enumerate(decisions.pending):
        waiting = view.jobs.get(explanation.job_id)
        if waiting is None:
            continue
        print_ = fingerprint(explanation, view.overdue(waiting, now))
        change = staleness(waiting.pending_fingerprint, print_, now, floor)
        if change > 0:
            stale.append((change, order, explanation, print_))
    stale.sort(key=lambda item: (-item[0], item[1]))  # stable: the policy's order among equals
    if pending_limit is not None and len(stale) > pending_limit:
        actions.held_back.extend(item[2].job_id for item in stale[pending_limit:])
        stale = stale[:pending_limit]
    for _, _, explanation, print_ in sorted(stale, key=lambda item: item[1]):
        job = view.jobs[explanation.job_id]
        actions.fingerprints[job.job_id] = print_
        actions.outgoing.append(Outgoing(pending_event(job, explanation), EVENT_SUBJECTS["JobPending"],
                                         STREAM_EVT, job.job_id))
        factors = explanation.factors
        actions.records.append(
            DecisionRecord(
                job.job_id,
                "hold",
                explanation.primary.value,
                {
                    "queue": factors.queue,
                    "age": factors.age,
                    "fairshare": factors.fairshare,
                    "quota_headroom": factors.quota_headroom,
                    "total": factors.total,
                },
                {
                    "reasons": [r.code.value for r in explanation.reasons],
                    "eta": explanation.eta,
                    "position": explanation.position,
                },
            )
        )


def factor_floor(view: ClusterView) -> float:
    """The least move of a score factor worth publishing: 0.1% of the largest weight."""
    weights = view.config.policy.weights
    return 0.001 * max(weights.queue, weights.age, weights.fairshare, weights.quota_headroom, 1.0)


def pending_event(job: JobRecord, explanation: PendingExplanation) -> m.JobPending:
    """The JobPending that says `explanation` of `job`."""
    factors = explanation.factors
    return m.JobPending(
        job_id=job.job_id,
        team=job.spec.team,
        queue=job.spec.queue,
        reasons=[
            m.WaitReason(code=r.code, message=r.message, details=dict(r.details))
            for r in explanation.reasons
        ],
        eta=_iso(explanation.eta),
        position=explanation.position,
        factors=m.ScoreFactors(
            queue=factors.queue,
            age=factors.age,
            fairshare=factors.fairshare,
            quota_headroom=factors.quota_headroom,
            total=factors.total,
        ),
    )


def _preemption(view: ClusterView, plan: PreemptionPlan, plan_id: str) -> Outgoing:
    preemptor = view.jobs[plan.preemptor_job_id]
    victims = []
    for choice in plan.victims:
        job = view.jobs.get(choice.job_id)
        victims.append(
            m.Victim(
                run_id=choice.run_id,
                job_id=choice.job_id,
                team=choice.team,
                queue=choice.tier,
                gpus=choice.gpus,
                expected_lost_gpu_seconds=choice.expected_lost_gpu_s,
                borrowed=choice.borrowed,
                job_name=job.spec.name if job else None,
                user=job.spec.user if job else None,
                resumable=job.spec.resumable if job else False,
                last_checkpoint_uri=job.last_checkpoint_uri if job else None,
                shrink_to=choice.shrink_to or None,
                gpu_share=share_fraction(choice.share),
            )
        )
    return Outgoing(
        m.PreemptionRequested(
            plan_id=plan_id,
            preemptor_job_id=plan.preemptor_job_id,
            preemptor_queue=plan.preemptor_tier,
            preemptor_team=preemptor.spec.team,
            victims=victims,
            reason=plan.reason,
            message=plan.message,
            expected_lost_gpu_seconds=plan.expected_lost_gpu_s,
            target=placement_doc(plan.target),
        ),
        EVENT_SUBJECTS["PreemptionRequested"],
        STREAM_EVT,
        plan.preemptor_job_id,
    )


def _grow_actions(view: ClusterView, decisions: Decisions, actions: Actions,
                  new_uuid: Callable[[], str]) -> None:
    """A GrowRequested and its decision record per grow, in step (`tracing.paired`)."""
    for grow in decisions.grows:
        outgoing = _grow(view, grow, new_uuid())
        if outgoing is None:
            continue
        actions.outgoing.append(outgoing)
        actions.records.append(DecisionRecord(grow.job_id, "grow", None, {}, {
            "run_id": grow.run_id, "workers": grow.workers,
            "added": placement_doc(grow.added)}))


def _grow(view: ClusterView, grow: Grow, grow_id: str) -> Outgoing | None:
    """The GrowRequested of an elastic run (DECISIONS 82): its target is its own placement and
    the added workers, which the view holds for it from this event on."""
    job, allocation = view.jobs.get(grow.job_id), view.allocations.get(grow.run_id)
    if job is None or allocation is None:
        return None
    added = sum(len(slot.gpus) for slot in grow.added)
    return Outgoing(
        m.GrowRequested(
            grow_id=grow_id, job_id=job.job_id, run_id=grow.run_id, team=job.spec.team,
            queue=job.spec.queue, job_name=job.spec.name, user=job.spec.user,
            workers=grow.workers, added_gpus=added,
            target=placement_doc(allocation.placement + grow.added),
            message=(f"{added} idle {allocation.flavor or job.spec.flavor} GPUs: growing from"
                     f" {len(allocation.placement)} to {grow.workers} workers at its next"
                     " checkpoint"),
        ),
        EVENT_SUBJECTS["GrowRequested"],
        STREAM_EVT,
        job.job_id,
        grow.run_id,
    )


def _stop_cancelled(view: ClusterView, job: JobRecord) -> Outgoing:
    assert job.run_id is not None
    if job.run_id in view.granted_unstarted and job.phase is Phase.ADMITTED:
        # Never started: there is no process to stop, so record the stop ourselves and let
        # the ledger release the GPUs.
        return Outgoing(
            m.RunStopped(run_id=job.run_id, job_id=job.job_id, reason=m.StopReason.cancelled),
            EVENT_SUBJECTS["RunStopped"],
            STREAM_EVT,
            job.job_id,
            job.run_id,
            id=stable_id(f"stopped:{job.run_id}"),
        )
    return Outgoing(
        m.StopRun(run_id=job.run_id, job_id=job.job_id, reason=m.StopReason.cancelled),
        RUN_STOP,
        STREAM_CMD,
        job.job_id,
        job.run_id,
        id=stable_id(f"stop:{job.run_id}"),
    )


def start_run(job: JobRecord, run_id: str, view: ClusterView) -> Outgoing:
    """The StartRun for a granted run; its id derives from the run, so a repeat is dropped."""
    allocation = view.allocations[run_id]
    return Outgoing(
        m.StartRun(
            run_id=run_id,
            job_id=job.job_id,
            attempt=max(1, job.attempt),
            spec=job.spec,
            placement=placement_doc(allocation.placement),
            resume_from=job.resume_from,
        ),
        RUN_START,
        STREAM_CMD,
        job.job_id,
        run_id,
        id=stable_id(f"start:{run_id}"),
    )


def next_to_explain(view: ClusterView, held_back: set[str], limit: int) -> frozenset[str]:
    """The jobs a cycle asks about, besides a refresh slice, `limit` at most: those never
    explained first (nobody has seen why they wait), then those whose changed explanation an
    earlier cycle held back. Whatever is left over is asked about in the cycles after."""
    fresh = view.unexplained_jobs(limit)
    jobs = view.jobs
    waiting = (job_id for job_id in held_back
               if (job := jobs.get(job_id)) is not None and job.phase is Phase.PENDING
               and not job.cancelled)  # fmt: skip
    return frozenset(islice(chain(fresh, waiting), limit))


_FOLDED_AT_COMMIT = (m.AllocationProposed, m.PreemptionRequested, m.GrowRequested)
"""What the view takes in as soon as it is committed, not when its echo comes back: what it
holds GPUs for."""


def record_sent(view: ClusterView, actions: Actions, epoch: float) -> None:
    """Fold what was just committed into the view, before its echo arrives from the stream."""
    for item in actions.outgoing:
        if isinstance(item.message, _FOLDED_AT_COMMIT):
            view.apply(item.message, epoch)
    for job_id, print_ in actions.fingerprints.items():
        view.explained(view.jobs[job_id], print_)
    for job_id in actions.stops:
        view.jobs[job_id].stop_requested = True
