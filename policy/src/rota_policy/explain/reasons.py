"""Phase 6: why each pending job waits, when it should start, and queue-level diagnoses.

Every pending job asked about gets every reason that applies, the primary one first, each with
a message that gives the numbers. The ETA comes from list-scheduling the queue in policy order
against the expected ends of running work (declared or estimated runtimes, scaled by what the
caller has observed); gangs are counted in GPUs, then, for a wait on a shape (fragmentation, a
level a gang needs whole), no earlier than one node or domain has room (`eta_shape`). A quota
wait's ETA is when the team's own runs free enough of its quota (`eta_quota`); the rules that
hold a preemptor back say so, with when they end (`holds`, `protection`). A job that can never
start gets no ETA but a named blocker (`details.blocker`) in its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.admission.block import NO_ETA, Block
from rota_policy.admission.ladder import admission_block, choose
from rota_policy.cycle.state import Cycle
from rota_policy.explain.budget_reasons import block_of, budget_details, budget_start, idle_only_reasons
from rota_policy.explain.diagnosis import diagnose, wider_flavor
from rota_policy.explain.eta import EXACT_DEPTH, DeepQueues, Eta
from rota_policy.explain.eta_quota import QuotaEta, QuotaWait, ReleaseCurve
from rota_policy.explain.eta_shape import ShapeEta, fragmentation
from rota_policy.explain.holds import Holds
from rota_policy.explain.protection import Borrowers, clock, delay_reason, protected_borrowers, reclaim_reason
from rota_policy.explain.wording import elastic, in_one, more, need_of, over_flavors, restarting, with_wider
from rota_policy.model.decisions import Diagnosis, PendingExplanation, Reason, ScoreBreakdown
from rota_policy.model.keys import LaneKey
from rota_policy.model.snapshot import PendingJob, PendingQueue
from rota_policy.nominate.ordering import QueueWalk, submit_key, tier_queues

__all__ = ["explain", "score_factors"]


_PRIORITY = Block(Code.PRIORITY)


def score_factors(cy: Cycle, job: PendingJob) -> ScoreBreakdown:
    """The job's score, factor by factor, under the cycle's rules."""
    return _factors(cy, job)


def _factors(cy: Cycle, job: PendingJob) -> ScoreBreakdown:
    if cy.rules.order == "score":
        return cy.scorer.breakdown(job)
    age = cy.scorer.age(job)
    if cy.rules.order == "slurm":
        return ScoreBreakdown(
            age=age, fairshare=cy.config.weights.fairshare * cy.fairshare().get(job.team, 0.0)
        )
    return ScoreBreakdown(age=age)


Details = tuple[tuple[str, int | float | str], ...]


@dataclass(slots=True)
class _Shared:
    """Immutable parts that many jobs' reasons have in common within one cycle.

    With a million jobs waiting, most of them carry the same capacity numbers and the same
    INSUFFICIENT_CAPACITY reason; one shared object instead of a copy per job is most of the
    memory an explain-everything cycle needs.
    """

    details: dict[tuple[int, int, int], Details]
    capacity_reasons: dict[tuple[str, str, int, int], Reason]
    quota: QuotaEta
    shape: ShapeEta
    holds: Holds
    waits: dict[str, QuotaWait] = field(default_factory=dict)
    """Quota waits booked in the exact walk, for the explanations of the jobs asked about."""
    assumed: dict[str, str] = field(default_factory=dict)
    """Per job asked about, the job with no declared runtime whose assumed end set its ETA."""
    protected: Borrowers | None = None
    """Borrowed runs that only their minimum runtime protects (`protection.reclaim_reason`)."""

    def base(self, gpus: int, free: int, capacity: int) -> Details:
        key = (gpus, free, capacity)
        found = self.details.get(key)
        if found is None:
            found = self.details[key] = (("gpus", gpus), ("free", free), ("capacity", capacity))
        return found

    def capacity_reason(self, need: str, flavor: str, gpus: int, free: int, capacity: int) -> Reason:
        key = (need, flavor, free, capacity)
        found = self.capacity_reasons.get(key)
        if found is None:
            found = self.capacity_reasons[key] = Reason(
                Code.INSUFFICIENT_CAPACITY,
                f"needs {need} {flavor} GPUs; {free} of {capacity} are free",
                self.base(gpus, free, capacity),
            )
        return found


def _reasons(
    cy: Cycle, shared: _Shared, job: PendingJob, block: Block | None, ahead: int, gpus_ahead: int
) -> tuple[Reason, ...]:
    f, g, state = job.flavor, job.gpus, cy.capacity.state
    free, cap = state.free_total.get(f, 0), state.layout.capacity.get(f, 0)
    need = need_of(job)
    if block is None:
        # No turn recorded a block (the walk never reached it, or it was not asked about):
        # the ladder answers now; a job that could start waits only on those ahead of it.
        block = admission_block(cy, job) or _PRIORITY
    code = block.code
    msg: str
    details = shared.base(g, free, cap) + ((("gpu_share", job.demand),) if job.share else ())
    if code is Code.NO_MATCHING_FLAVOR:
        offered = ", ".join(sorted(state.layout.flavors)) or "none"
        msg = block.detail or f"no node offers flavor {f}; the cluster has {offered}: it can never start"
        details += (("blocker", "no_matching_flavor"),)
    elif code is Code.EXCEEDS_CLUSTER:
        msg = (
            f"needs {need} {f} GPUs{in_one(state.layout, job)}; the cluster"
            f" has {cap} on nodes of at most {state.layout.max_node.get(f, 0)}: it can never start"
        )
        details += (("blocker", "exceeds_cluster"),)
    elif code is Code.QUOTA_EXCEEDED:
        msg = block.detail or f"team {job.team} is at its {f} quota"
        quota = cy.capacity.quota
        details += (("in_use", quota.in_use(job.team, f)), ("quota", quota.limits(job.team, f).quota))
    elif code is Code.INSUFFICIENT_CAPACITY:
        msg = ""  # the shared reason below
    elif code is Code.FRAGMENTATION:
        msg, more = fragmentation(state, job, need, free)
        details += more
    elif code is Code.RESERVED_FOR_HIGHER_PRIORITY:
        msg = (
            f"{free} {f} GPUs are free, but starting now would delay job {block.detail},"
            " which holds a reservation"
        )
        details += (("reserved_for", block.detail),)
    elif code is Code.WAITING_FOR_PREEMPTION:
        msg = block.detail or "waiting for preempted runs to save a checkpoint and stop"
    elif code is Code.BUDGET_EXHAUSTED:
        msg, details = block.detail, budget_details(cy, job)
    else:
        msg = f"{ahead} job(s) asking for {gpus_ahead} {f} GPUs are ahead in the queue"
        details += (("jobs_ahead", ahead), ("gpus_ahead", gpus_ahead))
    out = [shared.capacity_reason(need, f, g, free, cap) if code is Code.INSUFFICIENT_CAPACITY
           else Reason(code, msg, details)]
    if (
        code is not Code.PRIORITY
        and ahead > 0
        and code not in NO_ETA
        and code is not Code.WAITING_FOR_PREEMPTION
    ):
        out.append(_ahead(f, ahead, gpus_ahead))
    if code in (Code.QUOTA_EXCEEDED, Code.PRIORITY) and free < g:
        out.append(shared.capacity_reason(need, f, g, free, cap))
    return tuple(out) if not cy.capacity.budget.idle_only else (*out, *idle_only_reasons(cy, job))


def _ahead(flavor: str, ahead: int, gpus_ahead: int) -> Reason:
    """PRIORITY as a second reason: the jobs ahead in the flavor's queue."""
    return Reason(
        Code.PRIORITY,
        f"{ahead} job(s) asking for {gpus_ahead} {flavor} GPUs are ahead in the queue",
        (("jobs_ahead", ahead), ("gpus_ahead", gpus_ahead)),
    )


def _groups(cy: Cycle) -> list[list[PendingQueue]]:
    queues = cy.snapshot.pending
    if cy.rules.order == "submit":
        return [list(queues)]
    return list(tier_queues(queues).values())


def _targets(cy: Cycle, remaining: set[str]) -> list[PendingJob]:
    """The pending jobs named in `remaining`: a caller that asks about new submissions finds
    them at the tails of their queues, so look there before scanning everything."""
    found: list[PendingJob] = []
    missing = set(remaining)
    for q in cy.snapshot.pending:
        for job in reversed(q.jobs):
            if job.job_id not in missing:
                break
            missing.discard(job.job_id)
            found.append(job)
    if missing:
        for q in cy.snapshot.pending:
            found.extend(j for j in q.jobs if j.job_id in missing)
    return found


def explain(cy: Cycle) -> tuple[tuple[PendingExplanation, ...], tuple[Diagnosis, ...]]:
    wanted = cy.snapshot.explain
    if wanted is not None and not wanted:
        return (), ()
    admitted = {a.job_id for a in cy.outcome.admissions}
    remaining = None if wanted is None else set(wanted) - admitted
    if remaining is not None and not remaining:
        return (), ()
    # Jobs asked about that lie past EXACT_DEPTH of their flavor are answered from prefix
    # sums once the exact walk has gone that deep in every flavor asked about.
    targets = _targets(cy, remaining) if remaining is not None else []
    shallow = {j.flavor for j in targets}
    stop = bool(shallow)
    eta = Eta(cy)
    shared = _Shared({}, {}, QuotaEta(cy, ReleaseCurve(cy)), ShapeEta(cy), Holds(cy))
    position: dict[str, int] = {}
    gpus_ahead: dict[str, int] = {}
    done: dict[LaneKey, int] = {}
    out: list[tuple[PendingJob, PendingExplanation]] = []
    groups = _groups(cy)
    key = submit_key if cy.rules.order == "submit" else cy.order_key()
    for group in groups:
        for job in QueueWalk(group, key):
            f = job.flavor
            qkey = LaneKey(job.tier, job.team, f)
            done[qkey] = done.get(qkey, 0) + 1
            if job.job_id in admitted:
                continue
            pos = position.get(f, 0)
            ahead_gpus = gpus_ahead.get(f, 0)
            position[f] = pos + 1
            gpus_ahead[f] = ahead_gpus + job.gpus
            block = block_of(cy, job)
            eta.assumed = ""
            start = _start(cy, eta, shared.shape, job, block.code if block is not None else None)
            if eta.assumed and (remaining is None or job.job_id in remaining):
                shared.assumed[job.job_id] = eta.assumed
            if block is not None and block.code is Code.QUOTA_EXCEEDED and not job.fallback:
                # Booked for the jobs behind it as deep as the list schedule is exact.
                wait = shared.quota.start(job, book=eta.depth.get(f, 0) < EXACT_DEPTH)
                if remaining is None or job.job_id in remaining:
                    shared.waits[job.job_id] = wait
            if remaining is None:
                out.append((job, _explanation(cy, shared, job, block, start, pos, ahead_gpus)))
            elif job.job_id in remaining:
                out.append((job, _explanation(cy, shared, job, block, start, pos, ahead_gpus)))
                remaining.discard(job.job_id)
                if not remaining:
                    return tuple(ex for _, ex in out), diagnose(cy, out)
            if f in shallow and eta.depth.get(f, 0) >= EXACT_DEPTH:
                shallow.discard(f)
                if not shallow:
                    break
        if stop and not shallow:
            break
    if remaining:
        deep = [j for j in targets if j.job_id in remaining]
        out.extend(_deep(cy, shared, deep, groups, done, key, eta, position, gpus_ahead))
    return tuple(ex for _, ex in out), diagnose(cy, out)


def _start(cy: Cycle, eta: Eta, shape: ShapeEta, job: PendingJob, code: Code | None) -> float | None:
    """The job's ETA in the exact walk, from the block its turn gave it: a wait on a shape
    starts no earlier than one node or domain has room for it."""
    if code is Code.WAITING_FOR_PREEMPTION:
        return eta.start_by_plan(job, cy.in_flight.plan_ready_at.get(job.job_id, cy.now))
    if code is Code.BUDGET_EXHAUSTED:
        return budget_start(cy, job)  # nor does it take GPUs ahead of others in the schedule
    if code in NO_ETA:
        return None
    if job.fallback:
        return eta.start_any(job)
    start = eta.start(job)
    if start is not None and _on_shape(cy, job, code):
        fits = shape.start(job)
        start = start if fits is None else max(start, fits)
    return start


def _on_shape(cy: Cycle, job: PendingJob, code: Code | None) -> bool:
    """Whether the job's wait is on a shape: fragmentation, or a level it needs whole."""
    return code is Code.FRAGMENTATION or cy.capacity.state.layout.chain(job.need)[1]


def _explanation(
    cy: Cycle,
    shared: _Shared,
    job: PendingJob,
    block: Block | None,
    start: float | None,
    pos: int,
    ahead_gpus: int,
) -> PendingExplanation:
    on = job
    if job.fallback:
        on, block = _flavor_of_block(cy, job, block)
    reasons = _reasons(cy, shared, on, block, pos, ahead_gpus)
    if job.fallback:
        reasons = over_flavors(job, on.flavor, reasons)
    restart = cy.in_flight.restarting.get(job.job_id)
    if restart is not None and reasons[0].code is Code.WAITING_FOR_PREEMPTION:
        reasons = (restarting(restart, reasons[0]), *reasons[1:])
    elif job.elastic:
        reasons = (elastic(job, reasons[0]), *reasons[1:])
    code = reasons[0].code
    if code is Code.QUOTA_EXCEEDED:
        wait = shared.waits.pop(job.job_id, None) or shared.quota.start(on, book=False)
        start = wait.eta
        reasons = (more(reasons[0], wait.message, wait.details), *reasons[1:])
    elif code in NO_ETA:
        start = None
    elif code is Code.FRAGMENTATION and not job.fallback:
        fits = shared.shape.start(on)
        if fits is not None:
            level = reasons[0].detail("level")
            where = f"one {level}" if isinstance(level, str) else "one node"
            reasons = (more(reasons[0], f"{where} should have room for it by {clock(fits)}",
                            (("eta_basis", "one_node_frees"),)), *reasons[1:])
    assumed = shared.assumed.pop(job.job_id, "")
    if assumed and start is not None:
        default = cy.config.default_runtime_s
        reasons = (more(reasons[0], f"its ETA assumes that job {assumed}, which declared no runtime, runs"
                        f" the default {default:g} s", (("eta_assumes", assumed),)), *reasons[1:])
    if code not in (Code.NO_MATCHING_FLAVOR, Code.EXCEEDS_CLUSTER):
        start, reasons = _holds(cy, shared, on, start, reasons, pos)
    wider = wider_flavor(cy, job, reasons[0].code, start)
    if wider is not None:
        reasons = (with_wider(reasons[0], *wider), *reasons[1:])
    return PendingExplanation(job.job_id, reasons, start, pos + 1, _factors(cy, job))


def _holds(
    cy: Cycle, shared: _Shared, on: PendingJob, start: float | None, reasons: tuple[Reason, ...], pos: int
) -> tuple[float | None, tuple[Reason, ...]]:
    """The rules that hold a preemptor back, as the reasons after the primary one, and the ETA
    they imply: borrowed runs its team may take back, its queue's preemption delay, its
    victims' minimum runtime or preemption budget, its wait target."""
    code = reasons[0].code
    reclaim = None
    if code is Code.INSUFFICIENT_CAPACITY and cy.rules.planner is not None:
        if shared.protected is None:
            shared.protected = protected_borrowers(cy)
        reclaim = reclaim_reason(cy, on, shared.protected)
        if reclaim is not None:
            at, reason = reclaim
            reasons = (reason, *reasons[1:])
            start = at if start is None else min(start, at)
    delayed = delay_reason(cy, on, start)
    if delayed is not None:
        # Over its quota, only its own runs it stops give it room: the delay's end is no ETA.
        start = start if code is Code.QUOTA_EXCEEDED else delayed[0]
        return start, (reasons[0], delayed[1], *reasons[1:])
    if reclaim is None:
        held = shared.holds.victims(on, code, pos, start)
        if held is not None:
            ends, reason = held
            if ends is not None:
                start = ends if start is None else min(start, ends)
            return start, (reasons[0], reason, *reasons[1:])
    waits = shared.holds.wait_target(on, code, start)
    if waits is not None:
        reasons = (reasons[0], waits, *reasons[1:])
    return start, reasons


def _flavor_of_block(cy: Cycle, job: PendingJob, block: Block | None) -> tuple[PendingJob, Block | None]:
    """A multi-flavor job on the flavor its block is about: the one its turn recorded, the one
    its plan in flight is on, or the ladder's answer now."""
    if block is None:
        choice = choose(cy, job)
        return choice.job, choice.outcome if isinstance(choice.outcome, Block) else None
    flavor = cy.outcome.block_flavor.get(job.job_id)
    if flavor is None:
        hold = cy.in_flight.plan_holds.get(job.job_id)
        flavor = hold.flavor if hold is not None else job.flavor
    return job.on(flavor), block


def _deep(
    cy: Cycle,
    shared: _Shared,
    targets: list[PendingJob],
    groups: list[list[PendingQueue]],
    done: dict[LaneKey, int],
    key: Callable[[PendingJob], float],
    eta: Eta,
    position: dict[str, int],
    gpus_ahead: dict[str, int],
) -> list[tuple[PendingJob, PendingExplanation]]:
    """Jobs past the exact walk: what is ahead comes from prefix sums, the ETA from the fluid."""
    skipped = [(j, False) for j in cy.outcome.admitted_jobs]
    skipped.extend((j, True) for j in cy.outcome.no_eta)
    deep = DeepQueues(groups, done, key, skipped)
    default = cy.config.default_runtime_s
    out: list[tuple[PendingJob, PendingExplanation]] = []
    for job in targets:
        f = job.flavor
        count, gpus, work = deep.ahead(job, default)
        pos = position.get(f, 0) + count
        block = block_of(cy, job)
        code = block.code if block is not None else None
        start: float | None = None
        if code is Code.WAITING_FOR_PREEMPTION:
            start = cy.in_flight.plan_ready_at.get(job.job_id, cy.now)
        elif code is Code.BUDGET_EXHAUSTED:
            start = budget_start(cy, job)
        elif code not in NO_ETA:
            capacity = cy.capacity.state.layout.capacity.get(f, 0) or 1
            start = eta.clock.get(f, cy.now) + work * eta.scale / capacity
        out.append((job, _explanation(cy, shared, job, block, start, pos, gpus_ahead.get(f, 0) + gpus)))
    return out
