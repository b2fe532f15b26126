"""One scheduling cycle, in numbered phases (as Kueue and Armada write theirs).

    1. snapshot   working copies: nodes, quota usage, plans in flight and the GPUs they hold
    2. nominate   walk pending jobs in policy order (strict tiers, then score)
    3. admit      quota, then reservation, then best-fit gang placement
    4. preempt    for a blocked job: victims whose stop really lets it fit
    5. reserve    backfill reservation for a blocked job that could not preempt
    6. explain    reasons, ETA and score for every pending job asked about; queue diagnoses

`Rules` says which of these a policy uses; Rota and the three baselines share the engine so that
a comparison measures policy, not implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rota.contracts.messages import WaitReasonCode as Code

from rota_scheduler.policy.backfill import ReservationBook
from rota_scheduler.policy.config import PolicyConfig
from rota_scheduler.policy.fairshare import fairshare_factors
from rota_scheduler.policy.model import (
    Admission,
    Decisions,
    PendingJob,
    PendingQueue,
    PreemptionPlan,
    RunningRun,
    Slot,
    Snapshot,
)
from rota_scheduler.policy.ordering import QueueWalk, Scorer, submit_key, tier_queues
from rota_scheduler.policy.placement import ClusterState
from rota_scheduler.policy.preemption import PreemptionContext
from rota_scheduler.policy.quota import QuotaBook
from rota_scheduler.policy.reasons import NO_ETA, Block, explain

__all__ = ["Cycle", "Planner", "Rules", "run_cycle"]

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
    """Blocked jobs tried per (tier, team, flavor) queue per cycle, like Slurm's bf_max_job_user."""


class Cycle:
    """The mutable state of one cycle, shared by the phases."""

    def __init__(self, snapshot: Snapshot, now: float, config: PolicyConfig, rules: Rules) -> None:
        self.snapshot, self.now, self.config, self.rules = snapshot, now, config, rules
        self.state = ClusterState(snapshot.nodes)
        self.quota = QuotaBook(config, snapshot.running, self.state.capacity)
        self._admitted_jobs: list[PendingJob] = []
        self.admissions: list[Admission] = []
        self.plans: list[PreemptionPlan] = []
        self.blocks: dict[str, Block] = {}
        self.no_eta: list[PendingJob] = []
        self._block_cache: dict[tuple[Code, str], Block] = {}
        """Blocked jobs that get no ETA: explain leaves them out of the fluid ahead of others."""
        self.books: dict[str, ReservationBook] = {}
        self.taken: set[str] = set()
        self.planned: dict[str, tuple[Slot, ...] | None] = {}
        """Preemptors with a plan in flight: their target once every GPU of it is held."""
        self.abandoned: list[str] = []
        self.head_of_line = ""
        """The job that blocks all behind it, under policies without backfill."""
        self.free_at_start = dict(self.state.free_total)
        self._runs_by_flavor: dict[str, list[RunningRun]] | None = None
        self._fs: dict[str, float] | None = None
        self._preemption: PreemptionContext | None = None
        self.memo: dict[object, object] = {}
        """Per-cycle caches for planners (e.g. the victim pool of a flavor)."""
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

    def run_end(self, run: RunningRun) -> float:
        end = run.expected_end
        if end is None:
            end = run.started_at + self.config.default_runtime_s
        return max(end, self.now)

    @property
    def preemption(self) -> PreemptionContext:
        # One context per cycle, so that planners share its per-cycle victim pools.
        if self._preemption is None:
            self._preemption = PreemptionContext(
                self.now, self.config, self.state, self.quota, self.runs_by_flavor, self.taken
            )
        return self._preemption

    @property
    def runs_by_flavor(self) -> dict[str, list[RunningRun]]:
        if self._runs_by_flavor is None:
            out: dict[str, list[RunningRun]] = {}
            for run in self.snapshot.running:
                out.setdefault(run.flavor, []).append(run)
            self._runs_by_flavor = out
        return self._runs_by_flavor

    def fairshare(self) -> dict[str, float]:
        if self._fs is None:
            teams = {r.team for r in self.snapshot.running} | {q.team for q in self.snapshot.pending}
            shares = {t: self.config.team(t).shares for t in teams | set(self.config.teams)}
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
            # run_end, inlined: a book is built per flavor in most cycles, over every run.
            now, default, taken = self.now, self.config.default_runtime_s, self.taken
            releases: list[tuple[float, int]] = []
            for r in self.runs_by_flavor.get(flavor, ()):
                if r.run_id in taken:
                    continue
                end = r.expected_end
                if end is None:
                    end = r.started_at + default
                releases.append((end if end >= now else now, r.gpus))
            releases.extend(
                (self.now + self.runtime(job), job.gpus)
                for job in self._admitted_jobs
                if job.flavor == flavor
            )
            book = ReservationBook(releases)
            self.books[flavor] = book
        return book

    def block(self, job: PendingJob, code: Code, detail: str = "") -> None:
        # Blocks are immutable and a cycle records one per job it looks at, mostly the same
        # few: share them.
        block = self._block_cache.get((code, detail))
        if block is None:
            block = self._block_cache[(code, detail)] = Block(code, detail)
        self.blocks[job.job_id] = block
        if code in NO_ETA:
            self.no_eta.append(job)

    def admit(self, job: PendingJob, placement: tuple[Slot, ...], via_plan: bool) -> None:
        borrowed = self.quota.check(job.team, job.flavor, job.gpus).borrowed if not via_plan else 0
        if not via_plan:
            self.quota.add(job.team, job.flavor, job.gpus)
        self.admissions.append(Admission(job.job_id, placement, borrowed, via_plan))
        self._admitted_jobs.append(job)
        book = self.books.get(job.flavor)
        if book is not None:
            book.commit(job.gpus, self.now + self.runtime(job))

    def accept_plan(self, job: PendingJob, plan: PreemptionPlan) -> None:
        self.plans.append(plan)
        self.taken.update(v.run_id for v in plan.victims)
        self.quota.add(job.team, job.flavor, job.gpus)
        for slot in plan.target:
            node = self.state.index[slot.node]
            free = set(self.state.free[node])
            already = tuple(g for g in slot.gpus if g in free)
            if already:
                self.state.take_exact(node, already)


# ---------------------------------------------------------------- phase 1: plans in flight


def _resolve_plans(cy: Cycle) -> None:
    plans = cy.snapshot.plans
    if not plans:
        return
    pending_ids = {j.job_id for q in cy.snapshot.pending for j in q.jobs} if plans else set()
    runs = {r.run_id: r for r in cy.snapshot.running}
    state = cy.state
    for plan in plans:
        if plan.preemptor_job_id not in pending_ids:
            continue
        victim_gpus: set[tuple[str, int]] = set()
        for run_id in plan.victim_run_ids:
            run = runs.get(run_id)
            if run is not None:
                cy.taken.add(run_id)
                victim_gpus.update((s.node, g) for s in run.placement for g in s.gpus)
        complete, broken = True, False
        for slot in plan.target:
            node = state.index.get(slot.node)
            if node is None:
                broken = True
                break
            free = set(state.free[node])
            for g in slot.gpus:
                if g in free:
                    continue
                complete = False
                if (slot.node, g) not in victim_gpus:
                    broken = True
        if broken:
            cy.abandoned.append(plan.preemptor_job_id)
            continue
        for slot in plan.target:
            node = state.index[slot.node]
            free = set(state.free[node])
            held = tuple(g for g in slot.gpus if g in free)
            if held:
                state.take_exact(node, held)
        cy.planned[plan.preemptor_job_id] = plan.target if complete else None
        gpus = sum(len(s.gpus) for s in plan.target)
        flavor = state.node_flavor[state.index[plan.target[0].node]] if plan.target else ""
        team = next(
            (j.team for q in cy.snapshot.pending for j in q.jobs if j.job_id == plan.preemptor_job_id), ""
        )
        cy.quota.add(team, flavor, gpus)


# ---------------------------------------------------------------- phases 2-5


def _key(cy: Cycle) -> tuple[Callable[[PendingJob], float], bool]:
    return cy.order_key(), cy.rules.order == "score" and cy.scorer.dynamic


def _walk(cy: Cycle) -> None:
    rules, config, state, quota = cy.rules, cy.config, cy.state, cy.quota
    key, dynamic = _key(cy)
    limit = rules.reservations if rules.reservations is not None else config.backfill_reservations
    planner = rules.planner if config.preemption else None
    attempts = config.max_preemption_attempts if planner is not None else 0
    ready = {j for j, t in cy.planned.items() if t is not None}
    blocked_flavors: set[str] = set()
    all_blocked = False
    misses: dict[tuple[str, str, str], int] = {}
    free_total = state.free_total

    def quota_version() -> int:
        return quota.version

    def reservations_full(flavor: str) -> bool:
        book = cy.books.get(flavor)
        return book is not None and len(book.reservations) >= limit

    def reserved_out(q: PendingQueue) -> bool:
        # Every job of the queue would delay a reservation: too big for its spare GPUs, and
        # (even the shortest) still running at its start. Spare only shrinks within a cycle.
        book = cy.books.get(q.flavor)
        if book is None:
            return False
        end = cy.now + (q.min_runtime_s if q.min_runtime_s > 0 else 0.0)
        return any(end > r.start and q.min_gpus > r.spare for r in book.reservations)

    def hopeless(q: PendingQueue) -> bool:
        # Nothing in this queue can start now and it cannot preempt: skip it whole, unless it
        # may still hold the line (no backfill) or earn a reservation (backfill with reserve).
        if attempts > 0 or ready:
            return False
        if q.min_gpus <= free_total.get(q.flavor, 0):
            return rules.backfill == "reserve" and reservations_full(q.flavor) and reserved_out(q)
        if rules.backfill == "none":
            return all_blocked or q.flavor in blocked_flavors
        if rules.backfill == "reserve":
            return reservations_full(q.flavor)
        return True

    groups = (
        [list(cy.snapshot.pending)]
        if rules.order == "submit"
        else list(tier_queues(cy.snapshot.pending).values())
    )
    for queues in groups:
        walk = QueueWalk(queues, key, dynamic=dynamic, hopeless=hopeless, version=quota_version)
        for job in walk:
            f, g = job.flavor, job.gpus
            if job.job_id in cy.planned:
                planned = cy.planned[job.job_id]
                if planned is not None:
                    cy.admit(job, planned, via_plan=True)
                    ready.discard(job.job_id)
                else:
                    cy.block(job, Code.WAITING_FOR_PREEMPTION)
                continue
            if f not in state.flavors:
                cy.block(job, Code.NO_MATCHING_FLAVOR)
                continue
            if not state.can_ever_fit(job):
                cy.block(job, Code.EXCEEDS_CLUSTER)
                continue
            if all_blocked or f in blocked_flavors:
                cy.block(job, Code.PRIORITY, cy.head_of_line)
                continue
            code: Code
            detail = ""
            if rules.quotas and not quota.allows(job.team, f, g):
                code, detail = Code.QUOTA_EXCEEDED, quota.check(job.team, f, g).message
            elif free_total.get(f, 0) >= g:
                end = cy.now + cy.runtime(job)
                book = cy.books.get(f)
                res = book.blocking(g, end) if book is not None else None
                if res is None:
                    fit = state.find(job)
                    if fit is not None:
                        cy.admit(job, state.allocate(fit), via_plan=False)
                        continue
                    code = Code.FRAGMENTATION
                else:
                    code, detail = Code.RESERVED_FOR_HIGHER_PRIORITY, res.job_id
            else:
                code = Code.INSUFFICIENT_CAPACITY
            # Blocked. Phase 4: preempt, if this job may and it really helps.
            if attempts > 0 and planner is not None and code is not Code.RESERVED_FOR_HIGHER_PRIORITY:
                attempts -= 1
                plan = planner(job, cy.preemption, cy)
                if plan is not None:
                    cy.accept_plan(job, plan)
                    cy.block(job, Code.WAITING_FOR_PREEMPTION, plan.message)
                    continue
            cy.block(job, code, detail)
            # Phase 5: hold the line behind it, or reserve, or let others pass.
            if code is Code.QUOTA_EXCEEDED:
                pass
            elif rules.backfill == "none":
                cy.head_of_line = cy.head_of_line or job.job_id
                if rules.order == "submit":
                    all_blocked = True
                    break
                blocked_flavors.add(f)
            elif rules.backfill == "reserve" and code is not Code.RESERVED_FOR_HIGHER_PRIORITY:
                book = cy.book(f)
                if len(book.reservations) < limit:
                    book.reserve(job.job_id, job.tier.rank, g, free_total.get(f, 0), cy.now, cy.runtime(job))
            qkey = (job.tier.value, job.team, f)
            misses[qkey] = misses.get(qkey, 0) + 1
            if misses[qkey] >= rules.per_queue_depth:
                walk.drop_current()
            if (
                attempts <= 0
                and not ready
                and not any(free_total.values())
                and (rules.backfill != "reserve" or all(reservations_full(fl) for fl in state.flavors))
            ):
                break
        if all_blocked and attempts <= 0 and not ready:
            break


def run_cycle(snapshot: Snapshot, now: float, config: PolicyConfig, rules: Rules) -> Decisions:
    cy = Cycle(snapshot, now, config, rules)
    _resolve_plans(cy)
    _walk(cy)
    pending, diagnoses = explain(cy)
    return Decisions(
        admissions=tuple(cy.admissions),
        plans=tuple(cy.plans),
        pending=pending,
        diagnoses=diagnoses,
        abandoned_plans=tuple(cy.abandoned),
    )
