"""A discrete-event simulator on a virtual clock that applies a policy's Decisions.

It plays run progress, periodic checkpoints, each policy's way of stopping a victim (Rota's
notice -> save -> acknowledge -> stop; the baselines' SIGTERM), resumes with their restart
overhead, and accounts every preemption. The policy is called once per distinct event time
(or per `cycle_s` tick), never per simulated second, and is asked to explain only the jobs
submitted since the last cycle: that is what the ETA-at-submit metric needs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from rota.contracts.common import Tier
from rota.contracts.job import RackAffinity
from rota_policy import POLICIES, PolicyConfig, SchedulePolicy
from rota_policy.model.decisions import Decisions
from rota_policy.model.layout import layout_of
from rota_policy.model.runtimes import RuntimeScale
from rota_policy.model.snapshot import NodeState, PendingJob, PlanInFlight, RunningRun, Slot, Snapshot
from rota_policy.model.topology import job_topology

from rota_replay.accounts import Accounts
from rota_replay.budgets import SimBudgets
from rota_replay.etas import EtaLog, SqueueState
from rota_replay.nodebook import NodeBook
from rota_replay.queues import QueueKey, SimQueues
from rota_replay.simjob import EVICTIONS, SimJob
from rota_replay.workload import CHECKPOINT_INTERVAL_S, RESTART_S, TraceJob

__all__ = ["Simulator"]

_FINISH, _STOP, _CYCLE = 0, 1, 2


class Simulator:
    def __init__(
        self,
        trace: list[TraceJob],
        nodes: tuple[NodeState, ...],
        config: PolicyConfig,
        policy: str,
        *,
        quotas: dict[str, int] | None = None,
        cycle_s: float = 0.0,
        progress: Callable[[float], None] | None = None,
        etas: EtaLog | None = None,
        first_flavor: bool = False,
        rigid: bool = False,
    ) -> None:
        """`first_flavor`: each job accepts only the first flavor it lists (fallback off).
        `rigid`: an elastic job runs as a rigid gang of its max, the size the trace recorded
        (the baselines always do: DECISIONS 72)."""
        self.first_flavor = first_flavor
        self.elastic = not rigid and policy == "rota"
        self.jobs = [SimJob(t) for t in trace]
        self.by_id = {j.t.job_id: j for j in self.jobs}
        self.config = config
        self.policy_name = policy
        self.policy: SchedulePolicy = POLICIES[policy]
        self.eviction = EVICTIONS[policy]
        self.cycle_s = cycle_s
        self.progress_cb = progress
        self.nodes = NodeBook(nodes)
        self.node_states = self.nodes.states
        self.layout = layout_of(nodes)
        """Kept for every cycle: the nodes' shape never changes in a replay."""
        self.node_free = self.nodes.free
        self.any_flavor = tuple(dict.fromkeys(n.flavor for n in nodes))
        """What a job that accepts any flavor accepts: the cluster's, in the order nodes list them."""
        self.node_flavor = [n.flavor for n in nodes]
        self.capacity = sum(n.gpus for n in nodes)
        self.runs: dict[str, RunningRun] = {}
        self.plans: dict[str, PlanInFlight] = {}
        self.queues = SimQueues()
        self.new_ids: set[str] = set()
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self._init_accounting(trace, quotas or {})
        self.etas = etas or EtaLog()
        self.cycle_times: list[float] = []
        self.explained_new: frozenset[str] = frozenset()

    def _init_accounting(self, trace: list[TraceJob], quotas: dict[str, int]) -> None:
        teams = sorted({t.team for t in trace})
        window = (trace[0].submit, trace[-1].submit) if trace else (0.0, 0.0)
        self.accounts = Accounts(teams, quotas, window, self.capacity, self.config.half_life_s)
        self.preemptions = 0
        self.shrinks = 0
        """Elastic runs shrunk instead of stopped (DECISIONS 73); each is also one of `preemptions`."""
        self.grows = 0
        """Elastic runs grown on idle GPUs (DECISIONS 74); not preemptions."""
        self.below_max = 0
        """Elastic runs below their max: while any, a cycle may grow one on idle GPUs."""
        self.victims_by_tier = dict.fromkeys((t.value for t in Tier), 0)
        self.deferred_jobs: set[str] = set()
        """Jobs whose queue's preemption delay kept them from searching for victims, once or more."""
        self.preemptors: set[str] = set()
        self.wakeups: set[float] = set()
        self.lost_gpu_s = 0.0
        self.overhead_gpu_s = 0.0
        self.cycles = 0
        self.runtime_scale = RuntimeScale()
        self.budgets = SimBudgets(self.config) if self.config.budgets else None

    # ------------------------------------------------------------ events

    def _push(self, t: float, kind: int, idx: int, epoch: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, idx, epoch))

    def run(self) -> None:
        jobs, n, events = self.jobs, len(self.jobs), self.events
        i = 0
        cycle_at: float | None = None
        report_every = max(1, n // 200)
        while i < n or events:
            t = min(jobs[i].t.submit if i < n else math.inf, events[0][0] if events else math.inf)
            self.accounts.advance(t, self.nodes.held)
            dirty = False
            while i < n and jobs[i].t.submit == t:
                self._submit(jobs[i], t)
                i += 1
                dirty = True
                if self.progress_cb is not None and i % report_every == 0:
                    self.progress_cb(i / n)
            run_cycle = False
            while events and events[0][0] == t:
                _, kind, _, idx, epoch = heapq.heappop(events)
                if kind == _CYCLE:
                    run_cycle = True
                    cycle_at = None
                    continue
                job = jobs[idx]
                if epoch != job.epoch:
                    continue
                if kind == _FINISH:
                    self._finish(job, t)
                else:
                    self._stop(job, t)
                dirty = True
            if dirty and (self.queues.count or self.plans or self.below_max):
                if self.cycle_s > 0:
                    at = math.ceil(t / self.cycle_s) * self.cycle_s
                    if at <= t:
                        run_cycle = True
                    elif cycle_at is None:
                        cycle_at = at
                        self._push(at, _CYCLE, -1, 0)
                else:
                    run_cycle = True
            if run_cycle and (self.queues.count or self.plans or self.below_max):
                self._cycle(t)
        if self.progress_cb is not None:
            self.progress_cb(1.0)

    # ------------------------------------------------------------ state changes

    def flavors_of(self, tj: TraceJob) -> tuple[str, ...]:
        flavors = tj.flavors or self.any_flavor
        return flavors[:1] if self.first_flavor else flavors

    def _queue_key(self, job: SimJob) -> QueueKey:
        return (job.t.tier, job.t.team, self.flavors_of(job.t)[0])

    def _enqueue(self, job: SimJob, t: float) -> None:
        tj = job.t
        remaining = max(0.0, tj.declared_runtime_s - job.progress)
        flavors = self.flavors_of(tj)
        elastic = self.elastic and tj.elastic
        workers = tj.workers_min if elastic else tj.workers
        remaining *= tj.workers / workers  # its declared runtime at its min
        pj = PendingJob(
            job_id=tj.job_id,
            team=tj.team,
            tier=tj.tier,
            flavor=flavors[0],
            fallback=flavors[1:],
            workers=workers,
            gpus_per_worker=tj.gpus_per_worker,
            workers_max=tj.workers if elastic else 0,
            submitted_at=tj.submit,
            runtime_estimate_s=remaining or None,
            resumable=tj.resumable,
            preemptions=job.preemptions,
            topology=job_topology(None, RackAffinity.none, tj.workers, self.config.gang_topology),
            share=tj.share,
        )
        job.pending = pj
        job.pending_since = t
        self.queues.add(self._queue_key(job), pj)
        self.accounts.pending_gpus[tj.team] += tj.demand
        if self.budgets is not None:
            self.budgets.enqueued(tj.team, pj.flavor, tj.job_id)

    def _dequeue(self, job: SimJob) -> None:
        pj = job.pending
        assert pj is not None
        self.queues.remove(self._queue_key(job), pj)
        job.pending = None
        self.accounts.pending_gpus[job.t.team] -= job.t.demand

    def _submit(self, job: SimJob, t: float) -> None:
        self._enqueue(job, t)
        self.new_ids.add(job.t.job_id)

    def _start(self, job: SimJob, placement: tuple[Slot, ...], t: float, flavor: str) -> None:
        tj = job.t
        self._dequeue(job)
        self.nodes.take(placement)
        resumed = tj.resumable and job.progress > 0
        overhead = RESTART_S if resumed else 0.0
        gpus = 0 if tj.share else len(placement) * tj.gpus_per_worker
        demand = tj.demand if tj.share else float(gpus)
        job.rate = len(placement) / tj.workers
        job.starts += 1
        job.size_sum += len(placement)
        if resumed and job.preemptions:
            self.overhead_gpu_s += demand * overhead
        job.wait += t - job.pending_since
        if job.first_start is None:
            job.first_start = t
        job.attempt += 1
        job.run_start, job.run_base, job.run_overhead = t, job.progress, overhead
        job.stop_at = None
        run = RunningRun(
            run_id=f"{tj.job_id}/{job.attempt}",
            job_id=tj.job_id,
            team=tj.team,
            tier=tj.tier,
            flavor=flavor,
            placement=placement,
            gpus=gpus,
            started_at=t,
            last_checkpoint_at=t + overhead if tj.resumable else None,
            resumable=tj.resumable,
            preemptions=job.preemptions,
            expected_end=t + overhead + max(0.0, tj.declared_runtime_s - job.progress) / job.rate,
            checkpoint_interval_s=CHECKPOINT_INTERVAL_S if tj.resumable else None,
            share=tj.share,
            workers_range=(tj.workers_min, tj.workers) if self.elastic and tj.elastic else None,
        )
        job.run = run
        if run.workers_range is not None and len(placement) < tj.workers:
            self.below_max += 1
        if flavor != self.flavors_of(tj)[0]:
            job.fallback_starts += 1
        self.runs[run.run_id] = run
        self.accounts.set_usage(tj.team, flavor, t, demand)
        if self.budgets is not None:
            self.budgets.meter.started(run.run_id, tj.team, flavor, demand, t)
        job.epoch += 1
        self._push(t + overhead + (tj.duration - job.progress) / job.rate, _FINISH, tj.k, job.epoch)

    def _release(self, job: SimJob, t: float) -> None:
        run = job.run
        assert run is not None
        self.nodes.give(run.placement)
        del self.runs[run.run_id]
        if run.workers_range is not None and len(run.placement) < job.t.workers:
            self.below_max -= 1
        if self.budgets is not None:
            self.budgets.meter.stopped(run.run_id, t)
        job.run = None
        self.accounts.set_usage(job.t.team, run.flavor, t, -run.demand)

    def _finish(self, job: SimJob, t: float) -> None:
        self._release(job, t)
        job.finish = t
        job.progress = job.t.duration
        self.runtime_scale.finished(job.t.duration, job.t.declared_runtime_s)

    def _progress_at(self, job: SimJob, t: float) -> float:
        return min(job.t.duration, job.run_base + job.rate * max(0.0, t - job.run_start - job.run_overhead))

    def _notice(self, job: SimJob, t: float, shrink_to: int = 0) -> None:
        """A victim is told to stop (Rota's notice, or the baselines' SIGTERM), or, with
        `shrink_to`, to save and restart with its first `shrink_to` workers."""
        tj, ev = job.t, self.eviction
        done = self._progress_at(job, t)
        if tj.resumable and ev.resumable_saves:
            saved, delay = done, ev.resumable_stop_s
        elif tj.resumable:
            ran = max(0.0, done - job.run_base) / job.rate  # seconds of this run
            saved, delay = (
                job.run_base + (ran // CHECKPOINT_INTERVAL_S) * CHECKPOINT_INTERVAL_S * job.rate,
                ev.resumable_stop_s,
            )
        else:
            saved, delay = 0.0, ev.other_stop_s
        finish_at = job.run_start + job.run_overhead + (tj.duration - job.run_base) / job.rate
        if finish_at <= t + delay:
            return  # it ends on its own before it would have stopped: nothing is lost
        self._drop_grow(job)
        self.preemptions += 1
        self.shrinks += shrink_to > 0
        job.shrink_to = shrink_to
        self.victims_by_tier[tj.tier.value] += 1
        job.preemptions += 1
        job.saved = saved
        job.lost_s += (done - saved) / job.rate
        self.lost_gpu_s += tj.demand * (done - saved)  # = its GPUs x the seconds they ran for it
        assert job.run is not None
        self.overhead_gpu_s += job.run.demand * delay
        job.epoch += 1
        job.stop_at = t + delay
        self._push(t + delay, _STOP, tj.k, job.epoch)

    def _stop(self, job: SimJob, t: float) -> None:
        run = job.run
        assert run is not None
        self._release(job, t)
        job.progress = job.saved
        self._enqueue(job, t)
        if job.shrink_to:
            # A shrink: it restarts at once on the GPUs it kept, which were held for it.
            kept, job.shrink_to = run.placement[: job.shrink_to], 0
            self._start(job, kept, t, run.flavor)
        elif job.grow_slots:
            # A grow: it restarts at once on its GPUs and the ones held for it.
            added = job.grow_slots
            self._drop_grow(job)
            self._start(job, run.placement + added, t, run.flavor)

    def _grow(self, job: SimJob, added: tuple[Slot, ...], t: float) -> None:
        """An elastic run grows (DECISIONS 74): the added GPUs are held for it at once, it saves
        in checkpoint_save_s, then restarts on its GPUs and them (`_stop`). Not a preemption."""
        tj, run = job.t, job.run
        assert run is not None
        delay = self.eviction.resumable_stop_s
        if job.run_start + job.run_overhead + (tj.duration - job.run_base) / job.rate <= t + delay:
            return  # it ends first
        self.nodes.take(added)
        self.grows += 1
        job.grow_slots = added
        job.saved = self._progress_at(job, t)
        grown = run.gpus + len(added) * tj.gpus_per_worker
        self.overhead_gpu_s += run.gpus * delay + grown * RESTART_S
        job.epoch += 1
        job.stop_at = t + delay
        self._push(t + delay, _STOP, tj.k, job.epoch)

    def _drop_grow(self, job: SimJob) -> None:
        """The GPUs held for a grow go back (it grew, or it is stopped first)."""
        self.nodes.give(job.grow_slots)
        job.grow_slots = ()

    # ------------------------------------------------------------ the cycle

    def _snapshot(self, t: float) -> Snapshot:
        usage = self.accounts.decayed_usage(t)
        self.explained_new = frozenset(self.new_ids)
        self.new_ids.clear()
        explain = self.explained_new.union(self.etas.due(t))
        return Snapshot(
            nodes=tuple(self.node_states),
            running=tuple(self.runs.values()),
            pending=self.queues.pending(),
            usage=usage,
            plans=tuple(self.plans.values()),
            explain=explain,
            runtime_scale=self.runtime_scale.value,
            in_use=dict(self.accounts.in_use),
            layout=self.layout,
            budget_used=self._budget_used(t),
        )

    def _budget_used(self, t: float) -> dict[tuple[str, str], float] | None:
        if self.budgets is None:
            return None
        pending = (((team, flavor), [j.job_id for j in q])
                   for (_, team, flavor), q in self.queues.jobs.items())
        return self.budgets.used(t, pending)

    def _cycle(self, t: float) -> None:
        self.cycles += 1
        self.cycle_times.append(t)
        decisions = self.policy(self._snapshot(t), t, self.config)
        self._apply(decisions, t)
        if self.budgets is not None:
            self._wake_at_reset(self.budgets, t)

    def _wake_at_reset(self, budgets: SimBudgets, t: float) -> None:
        reset = budgets.next_reset(t)
        if reset is not None and reset not in budgets.woken_at:
            budgets.woken_at.add(reset)
            self._push(reset, _CYCLE, -1, 0)

    def _apply(self, decisions: Decisions, t: float) -> None:
        for job_id in decisions.abandoned_plans:
            self.plans.pop(job_id, None)
        for admission in decisions.admissions:
            self.plans.pop(admission.job_id, None)
            job = self.by_id[admission.job_id]
            self._start(job, admission.placement, t, admission.flavor or self.flavors_of(job.t)[0])
        for plan in decisions.plans:
            victims = []
            for victim in plan.victims:
                job = self.by_id[victim.job_id]
                self._notice(job, t, victim.shrink_to)
                victims.append(victim.run_id)
            self.plans[plan.preemptor_job_id] = PlanInFlight(
                plan.preemptor_job_id, tuple(victims), plan.target, t
            )
        for grow in decisions.grows:
            job = self.by_id[grow.job_id]
            if job.run is not None and job.run.run_id == grow.run_id and job.stop_at is None:
                self._grow(job, grow.added, t)
        self._defer(decisions)
        for ex in decisions.pending:
            job = self.by_id[ex.job_id]
            if not job.first_reason:
                job.first_reason = ex.reasons[0].code.value
        self._record_etas(decisions, t)

    def _defer(self, decisions: Decisions) -> None:
        """Jobs held by their queue's preemption delay: a cycle when it ends, as a live
        scheduler's tick would run one, even if nothing else happens then."""
        for plan in decisions.plans:
            self.preemptors.add(plan.preemptor_job_id)
        for job_id, at in decisions.deferred:
            self.deferred_jobs.add(job_id)
            if self.cycle_s > 0:
                at = math.ceil(at / self.cycle_s) * self.cycle_s
            if at not in self.wakeups:
                self.wakeups.add(at)
                self._push(at, _CYCLE, -1, 0)

    def _record_etas(self, decisions: Decisions, t: float) -> None:
        for job_id in self.explained_new:
            if self.by_id[job_id].pending is None:
                self.etas.at_submit[job_id] = t  # it started in the cycle that first saw it
        pending = {job_id: job.pending for job_id in (*self.explained_new, *self.etas.probing)
                   if (job := self.by_id[job_id]).pending is not None}
        self.etas.record(decisions, t, self.explained_new, pending, self._squeue_state,
                         self.config.default_runtime_s)

    def _squeue_state(self) -> SqueueState:
        free: dict[str, int] = dict.fromkeys(self.any_flavor, 0)
        for flavor, gpus in zip(self.node_flavor, self.node_free, strict=True):
            free[flavor] += len(gpus)
        return free, self.runs.values(), self.queues.jobs
