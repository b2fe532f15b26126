"""The scheduler's view of the cluster, rebuilt by folding events. Pure: no I/O, no clock.

Every fact comes from ROTA_EVT, including the scheduler's own proposals echoed back, so a new
leader that replays the stream from the start arrives at exactly the state its predecessor had.
Times are float epoch seconds, the policy's unit.

One handler per event class (`HANDLERS`), each taking the typed message; a job's phase moves
only through `rota.contracts.lifecycle.next_phase`, the rule every reader of the stream shares.
The view folds only the events about a job's current run, and not `PreemptionNoticed` (a
notice for humans): to the scheduler a run being preempted is running until it stops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from rota.budget import BudgetMeter
from rota.config import RotaConfig
from rota.contracts import Tier
from rota.contracts import messages as m
from rota.contracts.job import WorkerPlacement, share_quarters
from rota.contracts.lifecycle import BUDGETED_REASON, Phase, next_phase
from rota_policy import Slot, gangs_of
from rota_policy.model.runtimes import RuntimeScale
from rota_policy.model.snapshot import QUARTERS
from rota_policy.preemption.drain import Drain

from rota_scheduler.executors import Executors
from rota_scheduler.pending_index import PendingIndex
from rota_scheduler.records import (
    Allocation,
    JobRecord,
    PlanRecord,
    RestartRecord,
    SnapshotMemo,
)
from rota_scheduler.staleness import WaitPrint, words

__all__ = ["HANDLERS", "ClusterView"]

ACTIVE_PHASES = frozenset({Phase.ADMITTED, Phase.RUNNING, Phase.PREEMPTING})
"""Phases in which a job's run holds granted GPUs."""

ENDED_RESTART = frozenset({m.VictimOutcome.aborted, m.VictimOutcome.finished})
"""A saga's outcomes after which its run restarts at no other size."""


@dataclass
class ClusterView:
    config: RotaConfig
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    plans: dict[str, PlanRecord] = field(default_factory=dict)
    restarts: dict[str, RestartRecord] = field(default_factory=dict)
    """By job id: restarts at another size in flight, until the job is proposed again."""
    usage: dict[str, float] = field(default_factory=dict)
    usage_as_of: float = 0.0
    granted_unstarted: set[str] = field(default_factory=set)
    """Run ids the ledger granted that have not reported `RunStarted` yet."""
    withdrawn: dict[str, str] = field(default_factory=dict)
    """Nodes the executor withdrew (`NodeWithdrawn`), with why: none of their GPUs is free."""
    drains: dict[str, Drain] = field(default_factory=dict)
    """Nodes drained (`NodeDrainRequested`), until `NodeDrainCancelled`: none of their GPUs
    is free, and their runs are stopped as `rota_policy.preemption.drain` says (DECISIONS 100)."""
    evictions: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Run id → (node, why) of runs a Kubernetes EvictionRequest names (`RunEvictionRequested`):
    stopped as a drain stops a run, until the run ends or the request is withdrawn."""
    executors: Executors = field(default_factory=Executors)
    """What the running executors can run (`ExecutorAnnounced`): what no one can run waits."""
    drain_victims: dict[str, str] = field(default_factory=dict)
    """Run id → the drain plan stopping it, until the run ends: stopped once."""
    changes: int = 0
    """Counts the events that changed something, so a reader can tell nothing did."""
    pending_index: PendingIndex = field(default_factory=PendingIndex)
    """The policy's queues, kept up to date by `apply` (every change to a job's state is
    made by an event about that job)."""
    runtime_scale: RuntimeScale = field(default_factory=RuntimeScale)
    """What finished jobs ran against what they declared, which the ETAs scale by."""
    budget_meter: BudgetMeter = field(init=False)
    """GPU-seconds each budgeted (team, flavor) used this period, from run starts and ends."""
    snapshot_memo: SnapshotMemo = field(default_factory=SnapshotMemo, repr=False)
    """The last snapshot's running runs, which the next reuses where nothing changed."""
    cancelled_live: dict[str, None] = field(default_factory=dict, repr=False)
    """Jobs cancelled and not yet done, in the order they were cancelled (`stops_needed`
    looks only at these)."""
    unexplained: dict[str, None] = field(default_factory=dict, repr=False)
    """Jobs submitted and never explained, in submission order (a set that keeps its order);
    those that stopped waiting leave as `unexplained_jobs` passes them."""

    def __post_init__(self) -> None:
        self.budget_meter = BudgetMeter({
            (name, flavor): budget.period
            for name, team in self.config.teams.items()
            for flavor, budget in team.budgets.items()
        })
        self.pending_index.cluster = tuple(f.name for f in self.config.cluster.flavors)
        self.pending_index.gangs = gangs_of(self.config)

    # ------------------------------------------------------------ folding events

    def apply(self, event: BaseModel, at: float) -> None:
        """Fold one event that happened at `at`; events no handler takes change nothing."""
        handler = HANDLERS.get(type(event))
        if handler is None:
            return
        job = handler(self, event, at)
        self.changes += 1
        if job is not None:
            self.pending_index.sync(job)

    @staticmethod
    def _moved(job: JobRecord, event: BaseModel) -> bool:
        """Move `job` through its lifecycle; whether its phase changed."""
        before = job.phase
        job.phase = next_phase(before, event, cancel_requested=job.cancelled)
        return job.phase is not before

    def _on_submitted(self, event: m.JobSubmitted, at: float) -> JobRecord | None:
        if event.job_id not in self.jobs:
            submitted = event.submitted_at.timestamp() or at
            self.jobs[event.job_id] = JobRecord(event.job_id, event.spec, submitted)
            self.unexplained[event.job_id] = None
        return self.jobs[event.job_id]

    def _on_cancelled(self, event: m.JobCancelled, at: float) -> JobRecord | None:
        job = self.jobs.get(event.job_id)
        if job is None:
            return None
        job.cancelled = True
        self.restarts.pop(job.job_id, None)
        self._moved(job, event)  # a pending job ends; a run that holds GPUs is stopped first
        if job.phase.live:
            self.cancelled_live[job.job_id] = None
        return job

    def _on_proposed(self, event: m.AllocationProposed, at: float) -> JobRecord | None:
        job = self.jobs.get(event.job_id)
        self.allocations.setdefault(
            event.run_id,
            Allocation(event.run_id, event.job_id, _slots(event.placement), event.borrowed_gpus,
                       flavor=event.flavor),
        )
        if job is not None and self._moved(job, event):
            job.run_id = event.run_id
            self.restarts.pop(job.job_id, None)  # proposed: on its restart's GPUs, or elsewhere
        if event.plan_id:
            self.plans.pop(event.plan_id, None)
        return job

    def _on_granted(self, event: m.AllocationGranted, at: float) -> JobRecord | None:
        allocation = self.allocations.get(event.run_id)
        if allocation is None:
            allocation = Allocation(event.run_id, event.job_id, _slots(event.placement), 0,
                                    flavor=event.flavor)
            self.allocations[event.run_id] = allocation
        allocation.granted = True
        allocation.borrowed_gpus = event.borrowed_gpus
        job = self.jobs.get(event.job_id)
        if job is not None and job.run_id == event.run_id and self._moved(job, event):
            job.attempt += 1
            self.granted_unstarted.add(event.run_id)
        return job

    def _on_rejected(self, event: m.AllocationRejected, at: float) -> JobRecord | None:
        self.allocations.pop(event.run_id, None)
        job = self.jobs.get(event.job_id)
        if job is not None and job.run_id == event.run_id and self._moved(job, event):
            job.run_id = None
        return job

    def _on_released(self, event: m.AllocationReleased, at: float) -> JobRecord | None:
        self.allocations.pop(event.run_id, None)
        self.drain_victims.pop(event.run_id, None)
        self.evictions.pop(event.run_id, None)
        self.granted_unstarted.discard(event.run_id)
        return self.jobs.get(event.job_id)

    def _on_started(self, event: m.RunStarted, at: float) -> JobRecord | None:
        job = self.jobs.get(event.job_id)
        self.granted_unstarted.discard(event.run_id)
        if job is not None and job.run_id == event.run_id and self._moved(job, event):
            job.started_at, job.last_checkpoint_at = at, None
            spec, granted = job.spec, self.allocations.get(event.run_id)
            flavor = granted.flavor if granted is not None and granted.flavor else spec.flavor
            gpus = spec.share / QUARTERS if spec.share else (
                spec.total_gpus if granted is None else sum(len(s.gpus) for s in granted.placement))
            self.budget_meter.started(event.run_id, spec.team, flavor, gpus, at)
        return job

    def _on_checkpointed(self, event: m.RunCheckpointed, at: float) -> JobRecord | None:
        job = self.jobs.get(event.job_id)
        if job is not None and job.run_id == event.run_id:
            job.last_checkpoint_at, job.last_checkpoint_uri = at, event.checkpoint_uri
        return job

    def _run_ended(self, event: m.RunFinished | m.RunFailed | m.RunStopped, at: float
                   ) -> JobRecord | None:
        """The job whose current run this was, with the run let go; None if it was not."""
        self.granted_unstarted.discard(event.run_id)
        self.drain_victims.pop(event.run_id, None)
        self.budget_meter.stopped(event.run_id, at)
        job = self.jobs.get(event.job_id)
        if job is None or job.run_id != event.run_id:
            return None
        if job.started_at is not None:
            job.ran_s += at - job.started_at
        job.run_id, job.started_at, job.stop_requested = None, None, False
        self._moved(job, event)
        if job.phase.terminal:
            self.restarts.pop(job.job_id, None)
        return job

    def _on_finished(self, event: m.RunFinished, at: float) -> JobRecord | None:
        job = self._run_ended(event, at)
        if job is not None and job.spec.declared_runtime_s:
            self.runtime_scale.finished(job.ran_s, job.spec.declared_runtime_s)
        return self.jobs.get(event.job_id)

    def _on_failed(self, event: m.RunFailed, at: float) -> JobRecord | None:
        self._run_ended(event, at)
        return self.jobs.get(event.job_id)

    def _on_stopped(self, event: m.RunStopped, at: float) -> JobRecord | None:
        job = self._run_ended(event, at)
        if job is not None and job.phase is Phase.PENDING:
            # Back to its queue: the original submit time, and its checkpoint to resume from.
            # A lost, resized (grown) or drained run was not preempted for another job: it
            # spends none of the job's preemption budget.
            job.preemptions += event.reason is BUDGETED_REASON
            job.requeued_at = at
            if event.checkpoint_uri:
                job.resume_from = event.checkpoint_uri
        return self.jobs.get(event.job_id)

    def _on_preemption_requested(self, event: m.PreemptionRequested, at: float) -> JobRecord | None:
        if event.node:  # a drain's plan: nothing is held, no preemptor waits
            for victim in event.victims:
                if victim.run_id in self.allocations:
                    self.drain_victims[victim.run_id] = event.plan_id
            return None
        victims = tuple(v.run_id for v in event.victims)
        self.plans[event.plan_id] = PlanRecord(
            event.plan_id, event.preemptor_job_id, victims, _slots(event.target or ()),
            requested_at=at)
        for victim in event.victims:
            if victim.shrink_to:
                self._restart_on(victim.job_id, victim.run_id, victim.shrink_to, at)
        return None

    def _restart_on(self, job_id: str, run_id: str, workers: int, at: float) -> None:
        """A shrunk victim restarts on its first `workers` workers' GPUs. Only while that run
        still holds them: the plan's echo, read after the run ended, changes nothing."""
        job, allocation = self.jobs.get(job_id), self.allocations.get(run_id)
        if job is None or allocation is None or job.run_id != run_id:
            return
        self.restarts[job_id] = RestartRecord(run_id, allocation.placement[:workers], at)

    def _on_grow_requested(self, event: m.GrowRequested, at: float) -> JobRecord | None:
        job = self.jobs.get(event.job_id)
        if job is None or job.run_id != event.run_id or event.run_id not in self.allocations:
            return job  # the echo of a grow whose run already ended: nothing to hold
        self.restarts[job.job_id] = RestartRecord(event.run_id, _slots(event.target), at,
                                                  grow=True)
        return job

    def _on_grow_completed(self, event: m.GrowCompleted, at: float) -> JobRecord | None:
        restart = self.restarts.get(event.job_id)
        # Not grown (no checkpoint in time, or its run ended): the added GPUs go back.
        if restart is not None and restart.run_id == event.run_id and event.outcome in ENDED_RESTART:
            del self.restarts[event.job_id]
        return self.jobs.get(event.job_id)

    def _on_preemption_completed(self, event: m.PreemptionCompleted, at: float) -> JobRecord | None:
        if event.aborted:
            self.plans.pop(event.plan_id, None)
        for victim in event.victims:
            restart = self.restarts.get(victim.job_id)
            # A victim left running (aborted) or that ended by itself restarts at no size.
            if (restart is not None and restart.run_id == victim.run_id
                    and victim.outcome in ENDED_RESTART):
                del self.restarts[victim.job_id]
        return None

    def _on_node_withdrawn(self, event: m.NodeWithdrawn, at: float) -> JobRecord | None:
        self.withdrawn[event.node] = event.reason
        return None

    def _on_node_restored(self, event: m.NodeRestored, at: float) -> JobRecord | None:
        self.withdrawn.pop(event.node, None)
        return None

    def _on_drain_requested(self, event: m.NodeDrainRequested, at: float) -> JobRecord | None:
        self.drains[event.node] = Drain(event.node, event.deadline.timestamp(), event.reason)
        return None

    def _on_drain_cancelled(self, event: m.NodeDrainCancelled, at: float) -> JobRecord | None:
        self.drains.pop(event.node, None)
        return None

    def _on_eviction_requested(self, event: m.RunEvictionRequested, at: float) -> JobRecord | None:
        if event.withdrawn:
            self.evictions.pop(event.run_id, None)
        elif event.run_id in self.allocations:
            self.evictions[event.run_id] = (event.node, (
                f"an eviction of its pod {event.pod} on node {event.node} was requested"
                f" by {event.requester}"))
        return self.jobs.get(event.job_id)

    def _on_pending(self, event: m.JobPending, at: float) -> JobRecord | None:
        job = self.jobs.get(event.job_id)
        if job is not None:
            text, times = words(r.message for r in event.reasons)
            factors = event.factors
            self.explained(job, WaitPrint(
                codes=tuple(r.code.value for r in event.reasons),
                text=text,
                eta=None if event.eta is None else event.eta.timestamp(),
                position=event.position,
                overdue=self.overdue(job, at),
                factors=(factors.queue, factors.age, factors.fairshare, factors.quota_headroom),
                times=times,
            ))
        return job

    def _on_executor_announced(self, event: m.ExecutorAnnounced, at: float) -> JobRecord | None:
        if not self.executors.announced(event, at):
            # A renewal, every 30 s: nothing to explain again (`changes` starts refresh passes).
            self.changes -= 1
        return None

    def _on_usage(self, event: m.UsageRecorded, at: float) -> JobRecord | None:
        self.usage = dict(event.teams)
        self.usage_as_of = event.as_of.timestamp() or at
        return None

    def explained(self, job: JobRecord, fingerprint: WaitPrint) -> None:
        """`job`'s wait was published with this fingerprint (`actions.fingerprint`)."""
        job.pending_fingerprint = fingerprint
        self.unexplained.pop(job.job_id, None)

    def unexplained_jobs(self, limit: int) -> list[str]:
        """The first `limit` pending jobs never explained, in submission order: without a
        pass over every job, which at 100,000 pending cost each cycle 30 ms."""
        found: list[str] = []
        gone: list[str] = []
        for job_id in self.unexplained:
            if len(found) >= limit:
                break
            job = self.jobs.get(job_id)
            if (job is None or job.phase is not Phase.PENDING or job.cancelled
                    or job.pending_fingerprint is not None):
                gone.append(job_id)
            else:
                found.append(job_id)
        for job_id in gone:
            del self.unexplained[job_id]
        return found

    def overdue(self, job: JobRecord, at: float) -> bool:
        """Whether the job has waited past its queue's long-wait threshold: a JobPending is
        published again when it crosses it, so that its owner hears of the long wait."""
        queue = self.config.queues.get(Tier(job.spec.queue))
        return queue is not None and at - job.queued_since >= queue.long_wait_threshold_s

    def reconcile(self, ledger_active: list[dict[str, Any]]) -> tuple[int, int]:
        """Make granted allocations match the ledger, the only writer of allocations.

        The stream can trail the ledger (a release not yet relayed when we replayed); the
        ledger's rows are the truth about which GPUs are held. Proposals the ledger has not
        decided yet are left alone. Returns (added, dropped).
        """
        self.changes += 1
        held = {row["run_id"]: row for row in ledger_active}
        dropped = [run_id for run_id, a in self.allocations.items()
                   if a.granted and run_id not in held]
        for run_id in dropped:
            del self.allocations[run_id]
            self.granted_unstarted.discard(run_id)
        added = 0
        for run_id, row in held.items():
            known = self.allocations.get(run_id)
            if known is None:
                placement = [WorkerPlacement.model_validate(p) for p in row["placement"]]
                self.allocations[run_id] = Allocation(
                    run_id, row["job_id"], _slots(placement),
                    int(row.get("borrowed_gpus", 0)), granted=True, flavor=str(row.get("flavor", "")))
                added += 1
            else:
                known.granted = True
        return added, len(dropped)

    # ------------------------------------------------------------ the policy's input

    def pending_jobs(self) -> Iterator[JobRecord]:
        return (j for j in self.jobs.values() if j.phase is Phase.PENDING and not j.cancelled)

    def stops_needed(self) -> list[JobRecord]:
        """Cancelled jobs whose run still holds GPUs and has not been told to stop."""
        found: list[JobRecord] = []
        for job_id in list(self.cancelled_live):
            job = self.jobs.get(job_id)
            if job is None or job.phase.terminal:
                del self.cancelled_live[job_id]
            elif job.run_id and job.phase in ACTIVE_PHASES and not job.stop_requested:
                found.append(job)
        return found


def _slots(placement: Sequence[WorkerPlacement]) -> tuple[Slot, ...]:
    return tuple(Slot(p.worker, p.node, tuple(p.gpus), share_quarters(p.gpu_share))
                 for p in placement)


Handler = Callable[[ClusterView, Any, float], JobRecord | None]
"""Folds one event into the view; returns the job it is about, if the view knows it, for the
pending index to take in."""

HANDLERS: dict[type[BaseModel], Handler] = {
    m.JobSubmitted: ClusterView._on_submitted,
    m.JobCancelled: ClusterView._on_cancelled,
    m.JobPending: ClusterView._on_pending,
    m.AllocationProposed: ClusterView._on_proposed,
    m.AllocationGranted: ClusterView._on_granted,
    m.AllocationRejected: ClusterView._on_rejected,
    m.AllocationReleased: ClusterView._on_released,
    m.RunStarted: ClusterView._on_started,
    m.RunCheckpointed: ClusterView._on_checkpointed,
    m.RunFinished: ClusterView._on_finished,
    m.RunFailed: ClusterView._on_failed,
    m.RunStopped: ClusterView._on_stopped,
    m.PreemptionRequested: ClusterView._on_preemption_requested,
    m.PreemptionCompleted: ClusterView._on_preemption_completed,
    m.GrowRequested: ClusterView._on_grow_requested,
    m.GrowCompleted: ClusterView._on_grow_completed,
    m.NodeWithdrawn: ClusterView._on_node_withdrawn,
    m.NodeRestored: ClusterView._on_node_restored,
    m.NodeDrainRequested: ClusterView._on_drain_requested,
    m.NodeDrainCancelled: ClusterView._on_drain_cancelled,
    m.RunEvictionRequested: ClusterView._on_eviction_requested,
    m.UsageRecorded: ClusterView._on_usage,
    m.ExecutorAnnounced: ClusterView._on_executor_announced,
}
"""One handler per event class the view folds (Cosmic Python's handlers keyed by message
class); every other event, `PreemptionNoticed` among them, changes nothing here."""
