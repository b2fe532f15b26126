"""The state of one scheduling cycle, shared by its phases, and the `Rules` that say which phases
a policy uses.

A `Cycle` holds its inputs and three parts, each with what it says: `capacity` (what may still
be given out: GPUs, quota, budgets, reservations, victims taken), `in_flight` (plans and
restarts in flight and what they hold) and `outcome` (admissions, plans and blocks so far).
Its methods are the moves that touch more than one part."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from rota.contracts.common import Tier

from rota_policy.admission.backfill import ReservationBook
from rota_policy.cycle.capacity import Capacity
from rota_policy.cycle.outcome import Outcome
from rota_policy.cycle.plans import InFlight, hold
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import Admission, PreemptionPlan
from rota_policy.model.snapshot import PendingJob, Slot, Snapshot, expected_ends
from rota_policy.model.topology import Need
from rota_policy.nominate.fairshare import fairshare_factors
from rota_policy.nominate.ordering import Scorer, submit_key
from rota_policy.preemption.search import PreemptionContext

__all__ = ["Cycle", "MissKey", "Order", "Planner", "PlannerCache", "Rules"]

Order = Literal["score", "slurm", "tier_fifo", "submit"]
Planner = Callable[[PendingJob, PreemptionContext, "Cycle"], PreemptionPlan | None]


@dataclass(frozen=True, slots=True)
class Rules:
    name: str
    order: Order
    quotas: bool
    backfill: Literal["none", "greedy", "reserve"]
    """none: a blocked job blocks all behind it; greedy: later jobs take what fits (no
    reservation); reserve: later jobs may not delay the blocked jobs' reservations."""
    planner: Planner | None = None
    reservations: int | None = None
    """Reservations per flavor; None takes the config's `backfill_reservations`."""
    per_queue_depth: int = 64
    """Blocked jobs tried per lane (tier, team, flavor) per cycle, like Slurm's bf_max_job_user.
    Past it, a lane's jobs still get their turn if the free GPUs could hold them."""
    pass_over: bool = True
    """Pass over a lane's jobs that a reservation blocks in one step, when that cannot change a
    decision (`cycle.fast`); False tries them one by one."""
    preempt_for_wait_target: bool = False
    """Search for victims only when the job's tier's wait target (`long_wait_s`) is at stake:
    it has waited that long, or the GPUs expected to free themselves come too late for it.
    False: whenever the job is blocked (Kueue, Slurm)."""
    grow: bool = False
    """Grow elastic runs on idle GPUs nobody waits for (`grow`; Rota)."""
    share_victims: bool = False
    """GPU shares are victims, and a share searches for victims (Rota: DECISIONS 84); False:
    a share is no victim and stops nobody (the baselines, whose searches count whole GPUs)."""


class MissKey(NamedTuple):
    """What a failed search for victims depends on, but for the number of workers: a share may
    find room on a shared GPU where a whole GPU is not to be had, and the reverse; past its wait
    target a job may take back borrowers that cannot checkpoint."""

    tier: Tier
    team: str
    flavor: str
    gpus_per_worker: int
    need: Need
    """Its topology need, rack affinity included."""
    share: int
    waited: bool
    """Whether it has waited its tier's wait target."""


@dataclass(slots=True)
class PlannerCache:
    """Answers a planner reuses between the jobs of one cycle (Rota's, in `core`)."""

    pool_rank: dict[str, int] = field(default_factory=dict)
    """Per flavor, the lowest tier (highest rank) among runs that any rule could preempt."""
    fewest_missed: dict[MissKey, int] = field(default_factory=dict)
    """The fewest workers for which a search found no plan: a larger gang of the same key
    finds none either, as it needs more of the same victims."""


class _EveryJob:
    __slots__ = ()

    def __contains__(self, job_id: object) -> bool:
        return True


_EVERY_JOB = _EveryJob()


class Cycle:
    """The mutable state of one cycle, shared by the phases."""

    def __init__(self, snapshot: Snapshot, now: float, config: PolicyConfig, rules: Rules) -> None:
        self.snapshot, self.now, self.config, self.rules = snapshot, now, config, rules
        self.capacity = Capacity(snapshot, now, config)
        self.in_flight = InFlight()
        self.outcome = Outcome(_EVERY_JOB if snapshot.explain is None else snapshot.explain)
        self.many = any(q.fallback for q in snapshot.pending)
        """Some pending job accepts several flavors: the shortcuts that read one flavor per
        lane step aside for its lane (`cycle.fast`)."""
        self.shares = any(q.shares for q in snapshot.pending)
        """Some GPU share waits: the shortcuts that count whole GPUs step aside for the lanes
        with shares (`cycle.fast`, DECISIONS 67)."""
        self._fs: dict[str, float] | None = None
        self._preemption: PreemptionContext | None = None
        self.planner_cache = PlannerCache()
        self.scorer = Scorer(
            config,
            now,
            snapshot.usage,
            self.capacity.quota,
            [q.team for q in snapshot.pending],
            headroom=rules.order == "score",
        )

    # ------------------------------------------------------------ helpers

    def runtime(self, job: PendingJob) -> float:
        est = job.runtime_estimate_s
        return est if est is not None and est > 0 else self.config.default_runtime_s

    @property
    def preemption(self) -> PreemptionContext:
        # One context per cycle, so that planners share its per-cycle victim pools.
        if self._preemption is None:
            capacity = self.capacity
            whole = capacity.runs_by_flavor  # fills `share_runs`
            self._preemption = PreemptionContext(
                self.now, self.config, capacity.state, capacity.quota, whole, capacity.taken,
                idle_only=frozenset(capacity.budget.idle_only),
                share_runs=capacity.share_runs if self.rules.share_victims else {},
            )
        return self._preemption

    def fairshare(self) -> dict[str, float]:
        if self._fs is None:
            teams = {r.team for r in self.snapshot.running} | {q.team for q in self.snapshot.pending}
            shares = self.config.shares(teams)
            self._fs = fairshare_factors(self.snapshot.usage, shares)
        return self._fs

    def order_key(self) -> Callable[[PendingJob], float]:
        """Lower sorts first. Slurm: age plus classic fair share; Kueue and FIFO: submit time."""
        order = self.rules.order
        if order == "score":
            return self.scorer.key
        if order == "slurm":
            fs = self.fairshare()
            w, cap, now = self.config.weights, self.config.age_cap_s, self.now

            def slurm_key(job: PendingJob) -> float:
                age = min(max(0.0, now - job.submitted_at), cap) / cap
                return -(w.age * age + w.fairshare * fs.get(job.team, 0.0))

            return slurm_key
        return submit_key

    def book(self, flavor: str) -> ReservationBook:
        """The backfill reservations of `flavor`, made at the first ask from the expected ends of
        running work not taken as victims and of this cycle's admissions."""
        capacity = self.capacity
        book = capacity.books.get(flavor)
        if book is None:
            taken = capacity.taken
            runs = [r for r in capacity.runs_by_flavor.get(flavor, ()) if r.run_id not in taken]  # whole runs
            ends = expected_ends(runs, self.now, self.config.default_runtime_s)
            releases = list(zip(ends, [r.gpus for r in runs], strict=True))
            releases.extend(
                (self.now + self.runtime(job), capacity.fresh.get(job.job_id, 1) if job.share else job.gpus)
                for job in self.outcome.admitted_jobs
                if job.flavor == flavor
            )
            shared = capacity.share_runs.get(flavor)
            if shared:  # a shared GPU comes back whole when its last share ends
                last: dict[tuple[str, int], float] = {}
                for run, end in zip(shared, expected_ends(shared, self.now, self.config.default_runtime_s),
                                    strict=True):
                    key = (run.placement[0].node, run.placement[0].gpus[0])
                    last[key] = max(last.get(key, end), end)
                releases.extend((end, 1) for end in last.values())
            book = ReservationBook(releases)
            capacity.books[flavor] = book
        return book

    def admit(self, job: PendingJob, placement: tuple[Slot, ...], via_plan: bool) -> None:
        capacity, outcome = self.capacity, self.outcome
        demand = job.demand
        borrowed = capacity.quota.check(job.team, job.flavor, demand).borrowed if not via_plan else 0
        if not via_plan:
            capacity.quota.add(job.team, job.flavor, demand)
        outcome.admissions.append(Admission(job.job_id, placement, borrowed, via_plan, job.flavor))
        outcome.admitted_jobs.append(job)
        taken = job.gpus
        state = capacity.state
        if job.share:  # it took a free GPU if the GPU now holds it alone
            slot = placement[0]
            held = state.parts[state.layout.index[slot.node]][slot.gpus[0]]
            taken = capacity.fresh[job.job_id] = 1 if held == job.share else 0
        book = capacity.books.get(job.flavor)
        if book is not None and taken:
            book.commit(taken, self.now + self.runtime(job))

    def release_plan_quota(self, job_id: str, back: bool = False) -> None:
        """Take a plan's quota off its team (or put it `back`), to ask whether its preemptor
        could start without it."""
        hold = self.in_flight.plan_holds[job_id]
        self.capacity.quota.add(hold.team, hold.flavor, hold.gpus if back else -hold.gpus)

    def give_up_plan(self, job_id: str) -> None:
        """Drop a plan in flight whose quota is already released: its held GPUs are free again
        and the caller stops tracking it. Its victims were told to stop and still do."""
        hold = self.in_flight.plan_holds.pop(job_id)
        for node, gpus in hold.held:
            self.capacity.state.give(node, gpus)
        self.outcome.abandoned.append(job_id)

    def accept_plan(self, job: PendingJob, plan: PreemptionPlan) -> None:
        self.outcome.plans.append(plan)
        self.outcome.preemptors.append(job)
        self.in_flight.plan_ready_at[job.job_id] = self.now + self.config.checkpoint_save_s
        self.capacity.taken.update(v.run_id for v in plan.victims)
        self.capacity.quota.add(job.team, job.flavor, job.demand)
        hold(self.capacity.state, plan.target)
