"""The state of one scheduling cycle, shared by its phases, and the `Rules` that say which phases
a policy uses."""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rota.contracts.common import Tier
from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.admission.backfill import ReservationBook
from rota_policy.admission.block import NO_ETA, Block
from rota_policy.admission.budget import BudgetState
from rota_policy.admission.placement import ClusterState
from rota_policy.admission.quota import QuotaBook
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import Admission, PreemptionPlan
from rota_policy.model.snapshot import PendingJob, Restart, RunningRun, Slot, Snapshot, expected_ends
from rota_policy.model.topology import Need
from rota_policy.nominate.fairshare import fairshare_factors
from rota_policy.nominate.ordering import Scorer, submit_key
from rota_policy.preemption.search import PreemptionContext

__all__ = ["Cycle", "Order", "PlanHold", "Planner", "PlannerCache", "Rules"]

Order = Literal["score", "slurm", "tier_fifo", "submit"]
Planner = Callable[[PendingJob, PreemptionContext, "Cycle"], PreemptionPlan | None]


@dataclass(frozen=True, slots=True)
class PlanHold:
    """What a plan in flight holds for its preemptor this cycle: quota, and the GPUs of its
    target already free, per node index."""

    team: str
    flavor: str
    gpus: float
    """What quota counts of its target: GPUs, or a share's fraction."""
    held: tuple[tuple[int, tuple[int, ...]], ...]


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
    """Blocked jobs tried per (tier, team, flavor) queue per cycle, like Slurm's bf_max_job_user.
    Past it, a queue's jobs still get their turn if the free GPUs could hold them."""
    pass_over: bool = True
    """Pass over a queue's jobs that a reservation blocks in one step, when that cannot change a
    decision; False tries them one by one (the reference the tests compare with)."""
    preempt_for_wait_target: bool = False
    """Search for victims only when the job's tier's wait target (`long_wait_s`) is at stake:
    it has waited that long, or the GPUs expected to free themselves come too late for it.
    False: whenever the job is blocked (Kueue, Slurm)."""
    grow: bool = False
    """Grow elastic runs on idle GPUs nobody waits for (`grow`; Rota)."""
    share_victims: bool = False
    """GPU shares are victims, and a share searches for victims (Rota: DECISIONS 84); False:
    a share is no victim and stops nobody (the baselines, whose searches count whole GPUs)."""


MissKey = tuple[Tier, str, str, int, Need, int, bool]
"""A job's tier, team, flavor, GPUs per worker, topology need (rack affinity included), share
and whether it has waited its wait target: what a failed search for victims depends on, but
for the number of workers (a share may find room on a shared GPU where a whole GPU is not to
be had, and the reverse; past its wait target a job may take back borrowers that cannot
checkpoint)."""


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
        self.state = ClusterState(snapshot.nodes, snapshot.layout)
        self.quota = QuotaBook(config, snapshot.running, self.state.layout.capacity, snapshot.in_use)
        self.budget = BudgetState(config, snapshot.budget_used, now)
        self._admitted_jobs: list[PendingJob] = []
        """The jobs behind `admissions`, in order: their GPUs come back after their runtime."""
        self.admissions: list[Admission] = []
        self.plans: list[PreemptionPlan] = []
        self.blocks: dict[str, Block] = {}
        self.block_flavor: dict[str, str] = {}
        """For a job that accepts several flavors, the flavor its block is about."""
        self.many = any(q.fallback for q in snapshot.pending)
        """Some pending job accepts several flavors: the shortcuts that read one flavor per
        queue step aside for its queue (`shortcuts`)."""
        self.shares = any(q.shares for q in snapshot.pending)
        """Some GPU share waits: the shortcuts that count whole GPUs step aside for the queues
        with shares (`shortcuts`, DECISIONS 67)."""
        self.asked: Container[str] = _EVERY_JOB if snapshot.explain is None else snapshot.explain
        """The jobs explain will answer for (`Snapshot.explain`)."""
        self.no_eta: list[PendingJob] = []
        """Blocked jobs that get no ETA: explain leaves them out of the fluid ahead of others."""
        self._block_cache: dict[tuple[Code, str], Block] = {}
        self.books: dict[str, ReservationBook] = {}
        self.taken: set[str] = set()
        self.planned: dict[str, tuple[Slot, ...] | None] = {}
        """Preemptors with a plan in flight: their target once every GPU of it is held."""
        self.plan_holds: dict[str, PlanHold] = {}
        self.restarting: dict[str, Restart] = {}
        """Waiting jobs that restart at another size on GPUs held for them (`restarts`); each
        is also in `planned` and `plan_holds`, as a preemptor with a plan in flight is."""
        self.plan_ready_at: dict[str, float] = {}
        self.preemptors: list[PendingJob] = []
        """The jobs behind this cycle's `plans`, in order: their quota is taken (explain's ETAs)."""
        """Per preemptor, when its victims are expected to have saved and stopped."""
        self.abandoned: list[str] = []
        self.deferred: dict[str, float] = {}
        """Jobs that would have searched for victims but for their queue's preemption delay,
        and when it ends."""
        self.head_of_line = ""
        """The job that blocks all behind it, under policies without backfill."""
        self.free_at_start = dict(self.state.free_total)
        self._runs_by_flavor: dict[str, list[RunningRun]] | None = None
        self._share_runs: dict[str, list[RunningRun]] = {}
        """Per flavor, the runs that hold GPU shares (filled with `runs_by_flavor`)."""
        self._fresh: dict[str, int] = {}
        """Per admitted share, 1 if it took a free GPU, 0 if it joined a GPU already shared."""
        self._fs: dict[str, float] | None = None
        self._preemption: PreemptionContext | None = None
        self.planner_cache = PlannerCache()
        self.scorer = Scorer(
            config,
            now,
            snapshot.usage,
            self.quota,
            [q.team for q in snapshot.pending],
            headroom=rules.order == "score",
        )

    # ------------------------------------------------------------ helpers

    def runtime(self, job: PendingJob) -> float:
        est = job.runtime_estimate_s
        return est if est is not None and est > 0 else self.config.default_runtime_s

    @property
    def admitted_jobs(self) -> Sequence[PendingJob]:
        return self._admitted_jobs

    @property
    def preemption(self) -> PreemptionContext:
        # One context per cycle, so that planners share its per-cycle victim pools.
        if self._preemption is None:
            whole = self.runs_by_flavor  # fills `_share_runs`
            self._preemption = PreemptionContext(
                self.now, self.config, self.state, self.quota, whole, self.taken,
                idle_only=frozenset(self.budget.idle_only),
                share_runs=self._share_runs if self.rules.share_victims else {},
            )
        return self._preemption

    @property
    def runs_by_flavor(self) -> dict[str, list[RunningRun]]:
        if self._runs_by_flavor is None:
            running = self.snapshot.running
            flavors = {run.flavor for run in running}
            out: dict[str, list[RunningRun]] = {}
            if len(flavors) == 1 and not any(r.share for r in running):  # the common case, in one step
                out[flavors.pop()] = list(running)
            else:
                for run in running:
                    if not run.share:  # shares are apart: they free no whole GPU alone (DECISIONS 84)
                        out.setdefault(run.flavor, []).append(run)
                    else:
                        self._share_runs.setdefault(run.flavor, []).append(run)
            self._runs_by_flavor = out
        return self._runs_by_flavor

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
        book = self.books.get(flavor)
        if book is None:
            taken = self.taken
            runs = [r for r in self.runs_by_flavor.get(flavor, ()) if r.run_id not in taken]  # whole runs
            ends = expected_ends(runs, self.now, self.config.default_runtime_s)
            releases = list(zip(ends, [r.gpus for r in runs], strict=True))
            releases.extend(
                (self.now + self.runtime(job), self._fresh.get(job.job_id, 1) if job.share else job.gpus)
                for job in self._admitted_jobs
                if job.flavor == flavor
            )
            shared = self._share_runs.get(flavor)
            if shared:  # a shared GPU comes back whole when its last share ends
                last: dict[tuple[str, int], float] = {}
                for run, end in zip(shared, expected_ends(shared, self.now, self.config.default_runtime_s),
                                    strict=True):
                    key = (run.placement[0].node, run.placement[0].gpus[0])
                    last[key] = max(last.get(key, end), end)
                releases.extend((end, 1) for end in last.values())
            book = ReservationBook(releases)
            self.books[flavor] = book
        return book

    def block(self, job: PendingJob, code: Code, detail: str = "") -> None:
        """Record why `job` waits, if explain will need it."""
        if code in NO_ETA:
            self.no_eta.append(job)
        elif code is not Code.WAITING_FOR_PREEMPTION and job.job_id not in self.asked:
            # Explain treats this job as one with no block unless it is asked about: only its
            # reason would differ, and nobody asks for it (a replay asks about new jobs only).
            return
        self.blocks[job.job_id] = self.shared_block(code, detail)

    def record(self, job: PendingJob, block: Block) -> None:
        """`block(job, block.code, block.detail)` for a block already made (the ladder's)."""
        code = block.code
        if code in NO_ETA:
            self.no_eta.append(job)
        elif code is not Code.WAITING_FOR_PREEMPTION and job.job_id not in self.asked:
            return
        self.blocks[job.job_id] = block

    def record_on(self, job: PendingJob, flavor: str, block: Block) -> None:
        """`record` for a job that accepts several flavors, whose block is about `flavor`."""
        self.record(job, block)
        if job.job_id in self.blocks:
            self.block_flavor[job.job_id] = flavor

    def shared_block(self, code: Code, detail: str = "") -> Block:
        """Blocks are immutable and a cycle records one per job it looks at, mostly the same
        few: share them."""
        block = self._block_cache.get((code, detail))
        if block is None:
            block = self._block_cache[(code, detail)] = Block(code, detail)
        return block

    def admit(self, job: PendingJob, placement: tuple[Slot, ...], via_plan: bool) -> None:
        demand = job.demand
        borrowed = self.quota.check(job.team, job.flavor, demand).borrowed if not via_plan else 0
        if not via_plan:
            self.quota.add(job.team, job.flavor, demand)
        self.admissions.append(Admission(job.job_id, placement, borrowed, via_plan, job.flavor))
        self._admitted_jobs.append(job)
        taken = job.gpus
        if job.share:  # it took a free GPU if the GPU now holds it alone
            slot = placement[0]
            held = self.state.parts[self.state.layout.index[slot.node]][slot.gpus[0]]
            taken = self._fresh[job.job_id] = 1 if held == job.share else 0
        book = self.books.get(job.flavor)
        if book is not None and taken:
            book.commit(taken, self.now + self.runtime(job))

    def release_plan_quota(self, job_id: str, back: bool = False) -> None:
        """Take a plan's quota off its team (or put it `back`), to ask whether its preemptor
        could start without it."""
        hold = self.plan_holds[job_id]
        self.quota.add(hold.team, hold.flavor, hold.gpus if back else -hold.gpus)

    def give_up_plan(self, job_id: str) -> None:
        """Drop a plan in flight whose quota is already released: its held GPUs are free again
        and the caller stops tracking it. Its victims were told to stop and still do."""
        hold = self.plan_holds.pop(job_id)
        for node, gpus in hold.held:
            self.state.give(node, gpus)
        self.abandoned.append(job_id)

    def accept_plan(self, job: PendingJob, plan: PreemptionPlan) -> None:
        self.plans.append(plan)
        self.preemptors.append(job)
        self.plan_ready_at[job.job_id] = self.now + self.config.checkpoint_save_s
        self.taken.update(v.run_id for v in plan.victims)
        self.quota.add(job.team, job.flavor, job.demand)
        hold(self.state, plan.target)


def hold(state: ClusterState, target: tuple[Slot, ...]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Hold a plan's target for its preemptor: its GPUs already free, taken; its GPUs that
    shares hold, kept from new shares (`ClusterState.held`). Returns the GPUs taken per node."""
    holds = []
    for slot in target:
        node = state.layout.index[slot.node]
        free = set(state.free[node])
        already = tuple(g for g in slot.gpus if g in free)
        if already:
            state.take_exact(node, already)
            holds.append((node, already))
        shared = state.parts.get(node)
        if shared:
            state.held.update((node, g) for g in slot.gpus if g in shared)
    return tuple(holds)
