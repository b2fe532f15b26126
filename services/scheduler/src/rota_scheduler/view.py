"""The scheduler's view of the cluster, rebuilt by folding events. Pure: no I/O, no clock.

Every fact comes from ROTA_EVT, including the scheduler's own proposals echoed back, so a new
leader that replays the stream from the start arrives at exactly the state its predecessor had.
Times are float epoch seconds, the policy's unit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rota.budget import BudgetMeter
from rota.config import RotaConfig
from rota.contracts import JobSpec, Tier
from rota.contracts.job import share_quarters
from rota_policy import (
    Slot,
    Snapshot,
    gangs_of,
)
from rota_policy.model.runtimes import RuntimeScale
from rota_policy.model.snapshot import QUARTERS
from rota_policy.preemption.drain import Drain

from rota_scheduler.pending_index import PendingIndex
from rota_scheduler.snapshot import SnapshotMemo, snapshot_of
from rota_scheduler.staleness import WaitPrint, words

ACTIVE_STATES = frozenset({"admitted", "running"})
REQUEUED = frozenset({"preempted", "lost", "resized", "drained"})
"""Stop reasons that put a job back in its queue; only `preempted` spends its budget."""


@dataclass
class Allocation:
    """GPUs a run holds in the ledger, from proposal until the ledger releases them."""

    run_id: str
    job_id: str
    placement: tuple[Slot, ...]
    borrowed_gpus: int
    granted: bool = False
    flavor: str = ""
    """The flavor granted (one of the job's flavors); empty in events from before flavor lists,
    which were all on the job's `flavor`."""


@dataclass
class JobRecord:
    job_id: str
    spec: JobSpec
    submitted_at: float
    state: str = "pending"  # pending | proposed | admitted | running | done
    run_id: str | None = None
    attempt: int = 0
    started_at: float | None = None
    last_checkpoint_at: float | None = None
    last_checkpoint_uri: str | None = None
    resume_from: str | None = None
    preemptions: int = 0
    cancelled: bool = False
    stop_requested: bool = False
    pending_fingerprint: WaitPrint | None = None
    """What its last JobPending said (`rota_scheduler.staleness`); None: never explained."""
    requeued_at: float | None = None
    """When a preemption put it back in its queue; its wait restarts there (metrics)."""
    ran_s: float = 0.0
    """Time its ended runs ran, for what it really takes against what it declared."""

    @property
    def queued_since(self) -> float:
        return self.submitted_at if self.requeued_at is None else self.requeued_at


@dataclass
class PlanRecord:
    plan_id: str
    preemptor_job_id: str
    victim_run_ids: tuple[str, ...]
    target: tuple[Slot, ...]
    requested_at: float | None = None


@dataclass
class RestartRecord:
    """A run that restarts at another size on GPUs held for its job (`rota_policy.Restart`):
    a shrunk victim on the workers it keeps (DECISIONS 81), a growing run on its own and the
    added ones (DECISIONS 82). Folded from events only, so a new leader that replays the
    stream holds the same GPUs."""

    run_id: str
    target: tuple[Slot, ...]
    requested_at: float
    grow: bool = False


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
    is free, and their runs are stopped as `rota_policy.drain` says (DECISIONS 100)."""
    evictions: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Run id → (node, why) of runs a Kubernetes EvictionRequest names (`RunEvictionRequested`):
    stopped as a drain stops a run, until the run ends or the request is withdrawn."""
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

    def apply(self, event_type: str, data: dict[str, Any], at: float) -> None:
        handler = getattr(self, f"_on_{event_type}", None)
        if handler is not None:
            handler(data, at)
            self.changes += 1
            if (job := self._job(data)) is not None:
                self.pending_index.sync(job)

    def _job(self, data: dict[str, Any]) -> JobRecord | None:
        return self.jobs.get(str(data.get("job_id")))

    def _on_JobSubmitted(self, data: dict[str, Any], at: float) -> None:
        job_id = data["job_id"]
        if job_id not in self.jobs:
            spec = JobSpec.model_validate(data["spec"])
            submitted = _epoch(data.get("submitted_at")) or at
            self.jobs[job_id] = JobRecord(job_id, spec, submitted)
            self.unexplained[job_id] = None

    def _on_JobCancelled(self, data: dict[str, Any], at: float) -> None:
        job = self._job(data)
        if job is None:
            return
        job.cancelled = True
        self.restarts.pop(job.job_id, None)
        if job.state == "pending":
            job.state = "done"
        else:
            self.cancelled_live[job.job_id] = None

    def _on_AllocationProposed(self, data: dict[str, Any], at: float) -> None:
        job = self._job(data)
        run_id = data["run_id"]
        self.allocations.setdefault(
            run_id,
            Allocation(run_id, data["job_id"], _slots(data["placement"]), int(data.get("borrowed_gpus", 0)),
                       flavor=str(data.get("flavor", ""))),
        )
        if job is not None and job.state == "pending":
            job.state, job.run_id = "proposed", run_id
            self.restarts.pop(job.job_id, None)  # proposed: on its restart's GPUs, or elsewhere
        plan_id = data.get("plan_id")
        if plan_id:
            self.plans.pop(plan_id, None)

    def _on_AllocationGranted(self, data: dict[str, Any], at: float) -> None:
        run_id = data["run_id"]
        allocation = self.allocations.get(run_id)
        if allocation is None:
            allocation = Allocation(run_id, data["job_id"], _slots(data["placement"]), 0,
                                    flavor=str(data.get("flavor", "")))
            self.allocations[run_id] = allocation
        allocation.granted = True
        allocation.borrowed_gpus = int(data.get("borrowed_gpus", 0))
        job = self._job(data)
        if job is not None and job.run_id == run_id and job.state == "proposed":
            job.state = "admitted"
            job.attempt += 1
            self.granted_unstarted.add(run_id)

    def _on_AllocationRejected(self, data: dict[str, Any], at: float) -> None:
        self.allocations.pop(data["run_id"], None)
        job = self._job(data)
        if job is not None and job.run_id == data["run_id"] and job.state == "proposed":
            job.state, job.run_id = ("done" if job.cancelled else "pending"), None

    def _on_AllocationReleased(self, data: dict[str, Any], at: float) -> None:
        self.allocations.pop(data["run_id"], None)
        self.drain_victims.pop(data["run_id"], None)
        self.evictions.pop(data["run_id"], None)
        self.evictions.pop(data["run_id"], None)
        self.granted_unstarted.discard(data["run_id"])

    def _on_RunStarted(self, data: dict[str, Any], at: float) -> None:
        job = self._job(data)
        self.granted_unstarted.discard(data["run_id"])
        if job is not None and job.run_id == data["run_id"] and job.state in ("admitted", "proposed"):
            job.state, job.started_at = "running", at
            job.last_checkpoint_at = None
            spec, granted = job.spec, self.allocations.get(data["run_id"])
            flavor = granted.flavor if granted is not None and granted.flavor else spec.flavor
            gpus = spec.share / QUARTERS if spec.share else (
                spec.total_gpus if granted is None else sum(len(s.gpus) for s in granted.placement))
            self.budget_meter.started(data["run_id"], spec.team, flavor, gpus, at)

    def _on_RunCheckpointed(self, data: dict[str, Any], at: float) -> None:
        job = self._job(data)
        if job is not None and job.run_id == data["run_id"]:
            job.last_checkpoint_at, job.last_checkpoint_uri = at, data.get("checkpoint_uri")

    def _run_ended(self, data: dict[str, Any], at: float) -> JobRecord | None:
        self.granted_unstarted.discard(data["run_id"])
        self.drain_victims.pop(data["run_id"], None)
        self.budget_meter.stopped(data["run_id"], at)
        job = self._job(data)
        if job is None or job.run_id != data["run_id"]:
            return None
        if job.started_at is not None:
            job.ran_s += at - job.started_at
        job.run_id, job.started_at, job.stop_requested = None, None, False
        return job

    def _on_RunFinished(self, data: dict[str, Any], at: float) -> None:
        if (job := self._run_ended(data, at)) is not None:
            job.state = "done"
            self.restarts.pop(job.job_id, None)
            if job.spec.declared_runtime_s:
                self.runtime_scale.finished(job.ran_s, job.spec.declared_runtime_s)

    def _on_RunFailed(self, data: dict[str, Any], at: float) -> None:
        if (job := self._run_ended(data, at)) is not None:
            job.state = "done"
            self.restarts.pop(job.job_id, None)

    def _on_RunStopped(self, data: dict[str, Any], at: float) -> None:
        job = self._run_ended(data, at)
        if job is None:
            return
        if data.get("reason") in REQUEUED and not job.cancelled:
            # Back to its queue: the original submit time, and its checkpoint to resume from.
            # A lost, resized (grown) or drained run was not preempted for another job: it
            # spends none of the job's preemption budget.
            job.state = "pending"
            job.preemptions += data.get("reason") == "preempted"
            job.requeued_at = at
            if data.get("checkpoint_uri"):
                job.resume_from = data["checkpoint_uri"]
        else:
            job.state = "done"
            self.restarts.pop(job.job_id, None)

    def _on_PreemptionRequested(self, data: dict[str, Any], at: float) -> None:
        if data.get("node"):  # a drain's plan: nothing is held, no preemptor waits
            for victim in data["victims"]:
                if victim["run_id"] in self.allocations:
                    self.drain_victims[victim["run_id"]] = data["plan_id"]
            return
        target = _slots(data.get("target") or [])
        victims = tuple(v["run_id"] for v in data["victims"])
        self.plans[data["plan_id"]] = PlanRecord(
            data["plan_id"], data["preemptor_job_id"], victims, target, requested_at=at)
        for victim in data["victims"]:
            if victim.get("shrink_to"):
                self._restart_on(victim["job_id"], victim["run_id"], int(victim["shrink_to"]), at)

    def _restart_on(self, job_id: str, run_id: str, workers: int, at: float) -> None:
        """A shrunk victim restarts on its first `workers` workers' GPUs. Only while that run
        still holds them: the plan's echo, read after the run ended, changes nothing."""
        job, allocation = self.jobs.get(job_id), self.allocations.get(run_id)
        if job is None or allocation is None or job.run_id != run_id:
            return
        self.restarts[job_id] = RestartRecord(run_id, allocation.placement[:workers], at)

    def _on_GrowRequested(self, data: dict[str, Any], at: float) -> None:
        job = self._job(data)
        if job is None or job.run_id != data["run_id"] or data["run_id"] not in self.allocations:
            return  # the echo of a grow whose run already ended: nothing to hold
        self.restarts[job.job_id] = RestartRecord(data["run_id"], _slots(data["target"]), at,
                                                  grow=True)

    def _on_GrowCompleted(self, data: dict[str, Any], at: float) -> None:
        restart = self.restarts.get(data["job_id"])
        # Not grown (no checkpoint in time, or its run ended): the added GPUs go back.
        if (restart is not None and restart.run_id == data["run_id"]
                and data.get("outcome") in ("aborted", "finished")):
            del self.restarts[data["job_id"]]

    def _on_PreemptionCompleted(self, data: dict[str, Any], at: float) -> None:
        if data.get("aborted"):
            self.plans.pop(data["plan_id"], None)
        for victim in data.get("victims", []):
            restart = self.restarts.get(victim["job_id"])
            # A victim left running (aborted) or that ended by itself restarts at no size.
            if (restart is not None and restart.run_id == victim["run_id"]
                    and victim.get("outcome") in ("aborted", "finished")):
                del self.restarts[victim["job_id"]]

    def _on_NodeWithdrawn(self, data: dict[str, Any], at: float) -> None:
        self.withdrawn[data["node"]] = data.get("reason", "")

    def _on_NodeRestored(self, data: dict[str, Any], at: float) -> None:
        self.withdrawn.pop(data["node"], None)

    def _on_NodeDrainRequested(self, data: dict[str, Any], at: float) -> None:
        deadline = _epoch(data.get("deadline"))
        self.drains[data["node"]] = Drain(data["node"], at if deadline is None else deadline,
                                          str(data.get("reason") or "maintenance"))

    def _on_RunEvictionRequested(self, data: dict[str, Any], at: float) -> None:
        if data.get("withdrawn"):
            self.evictions.pop(data["run_id"], None)
        elif data["run_id"] in self.allocations:
            self.evictions[data["run_id"]] = (data["node"], (
                f"an eviction of its pod {data['pod']} on node {data['node']} was requested"
                f" by {data['requester']}"))

    def _on_NodeDrainCancelled(self, data: dict[str, Any], at: float) -> None:
        self.drains.pop(data["node"], None)

    def _on_JobPending(self, data: dict[str, Any], at: float) -> None:
        job = self._job(data)
        if job is not None:
            reasons = data.get("reasons") or []
            factors = data.get("factors") or {}
            text, times = words(str(r.get("message", "")) for r in reasons)
            self.explained(job, WaitPrint(
                codes=tuple(str(r["code"]) for r in reasons),
                text=text,
                eta=_epoch(data.get("eta")),
                position=int(data.get("position") or 0),
                overdue=self.overdue(job, at),
                factors=tuple(float(factors.get(k) or 0.0)
                              for k in ("queue", "age", "fairshare", "quota_headroom")),
                times=times,
            ))

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
            if (job is None or job.state != "pending" or job.cancelled
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

    def _on_UsageRecorded(self, data: dict[str, Any], at: float) -> None:
        self.usage = {team: float(v) for team, v in data.get("teams", {}).items()}
        self.usage_as_of = _epoch(data.get("as_of")) or at

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
                self.allocations[run_id] = Allocation(
                    run_id, row["job_id"], _slots(row["placement"]),
                    int(row.get("borrowed_gpus", 0)), granted=True, flavor=str(row.get("flavor", "")))
                added += 1
            else:
                known.granted = True
        return added, len(dropped)

    # ------------------------------------------------------------ the policy's input

    def pending_jobs(self) -> Iterator[JobRecord]:
        return (j for j in self.jobs.values() if j.state == "pending" and not j.cancelled)

    def snapshot(self, now: float, explain: frozenset[str] | None = None) -> Snapshot:
        """The policy's input at `now`; `explain`: the pending jobs to explain (None: all)."""
        return snapshot_of(self, now, explain, self.snapshot_memo)

    def stops_needed(self) -> list[JobRecord]:
        """Cancelled jobs whose run still holds GPUs and has not been told to stop."""
        found: list[JobRecord] = []
        for job_id in list(self.cancelled_live):
            job = self.jobs.get(job_id)
            if job is None or job.state == "done":
                del self.cancelled_live[job_id]
            elif job.run_id and job.state in ACTIVE_STATES and not job.stop_requested:
                found.append(job)
        return found


def _slots(placement: list[dict[str, Any]]) -> tuple[Slot, ...]:
    return tuple(Slot(int(p["worker"]), str(p["node"]), tuple(int(g) for g in p["gpus"]),
                      share_quarters(p.get("gpu_share")))
                 for p in placement)


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    from datetime import datetime

    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
