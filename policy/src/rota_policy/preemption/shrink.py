"""Shrinking an elastic victim instead of stopping it (DECISIONS 73).

A resumable elastic run above its min may give up workers: it saves a checkpoint, as any
victim does, and restarts at the smaller size on the GPUs it keeps, which are held for it. Only
the dropped workers' GPUs go to the preemptor. Who may be shrunk for whom is who may be stopped
(`victimrules.victim_category`; `victimpool` protects the young and the often preempted), and a
shrink counts as a preemption of the run.

Rota asks for a shrink before it searches for runs to stop (`core`): the victim keeps running,
so for the same preemptor it is the gentler plan, and like any notice-and-save of a resumable
run it destroys nothing. The search is greedy: victims in Rota's order (category, then the
least work since its checkpoint), each dropping workers from its last, until the preemptor
fits; then each victim keeps every worker the preemptor's placement does not need.
"""

from __future__ import annotations

from rota_policy.admission.placement import ClusterState, Fit, fit_on_counts
from rota_policy.model.decisions import PreemptionPlan, VictimChoice
from rota_policy.model.snapshot import PendingJob, RunningRun, Slot
from rota_policy.preemption.victimpool import PoolRun, PreemptionContext, expected_loss, victim_pool
from rota_policy.preemption.victimrules import WHY, may_reclaim_for, victim_category

__all__ = ["shrink_plan", "shrinkable"]

Option = tuple[int, float, str, RunningRun]
"""A run that may be shrunk for the preemptor: (category, unsaved GPU-seconds, run id, run)."""


def shrinkable(ctx: PreemptionContext, flavor: str) -> list[PoolRun]:
    """The pool runs of `flavor` that could give up a worker: elastic, resumable, above their
    min. Memoized per cycle; empty (the common case: no elastic run) at the cost of one pass."""
    found = ctx.shrinkable.get(flavor)
    if found is None:
        found = ctx.shrinkable[flavor] = [
            (run, rank) for run, rank in victim_pool(ctx, flavor)
            if run.workers_range is not None and run.resumable
            and len(run.placement) > run.workers_range[0]
        ]
    return found


def _options(job: PendingJob, ctx: PreemptionContext, pool: list[PoolRun]) -> list[Option]:
    may_reclaim = may_reclaim_for(job, ctx)
    shielded = ctx.config.protection(job.tier).shielded_from
    borrowing: dict[str, float] = {}
    options = []
    for run, rank in pool:
        if run.run_id in ctx.taken:
            continue
        category = victim_category(job, run, rank, may_reclaim, borrowing, ctx.quota, shielded)
        if category is not None:
            options.append((category, expected_loss(run, ctx.now), run.run_id, run))
    options.sort(key=lambda o: o[:3])
    return options


def shrink_plan(job: PendingJob, ctx: PreemptionContext) -> PreemptionPlan | None:
    """A plan that fits `job` by shrinking elastic runs towards their min, or None."""
    pool = shrinkable(ctx, job.flavor)
    if not pool:
        return None
    state = ctx.state
    layout = state.layout
    counts = state.counts()
    nodes = layout.flavor_nodes.get(job.flavor, [])
    if fit_on_counts(counts, nodes, layout, job.workers, job.gpus_per_worker, job.need) is not None:
        return None  # it fits the free GPUs: what blocks it, no shrink lifts
    freed: dict[int, list[int]] = {}
    picked: list[Option] = []
    for option in _options(job, ctx, pool):
        run = option[3]
        picked.append(option)
        for slot in reversed(run.placement[run.workers_range[0] if run.workers_range else 0:]):
            node = layout.index[slot.node]
            counts[node] += len(slot.gpus)
            freed.setdefault(node, []).extend(slot.gpus)
            fit = fit_on_counts(counts, nodes, layout, job.workers, job.gpus_per_worker, job.need)
            if fit is not None:
                return _plan(job, picked, _target(state, fit, freed))
    return None


def _target(state: ClusterState, fit: Fit, freed: dict[int, list[int]]) -> tuple[Slot, ...]:
    """Exact GPUs for the fit: each node's free GPUs first, then the dropped workers'."""
    names = state.layout.names
    pools = {node: sorted(state.free[node]) + sorted(freed.get(node, ())) for node, _ in fit}
    slots = []
    for worker, (node, gpus) in enumerate(fit):
        pool = pools[node]
        slots.append(Slot(worker, names[node], tuple(pool[:gpus])))
        del pool[:gpus]
    return tuple(slots)


def _keeps(run: RunningRun, wanted: set[tuple[str, int]]) -> int:
    """How many workers the run keeps: all before its first worker the target needs a GPU of
    (workers go from the last), never fewer than its min."""
    for worker, slot in enumerate(run.placement):
        if any((slot.node, g) in wanted for g in slot.gpus):
            return worker
    return len(run.placement)


def _plan(job: PendingJob, picked: list[Option], target: tuple[Slot, ...]) -> PreemptionPlan | None:
    wanted = {(slot.node, g) for slot in target for g in slot.gpus}
    victims = []
    for category, _, _, run in picked:
        keep = _keeps(run, wanted)
        if keep == len(run.placement):
            continue  # the target took none of its GPUs: it is left alone
        dropped = sum(len(slot.gpus) for slot in run.placement[keep:])
        victims.append(VictimChoice(run.run_id, run.job_id, run.team, run.tier, dropped, 0.0,
                                    run.team != job.team, WHY[category], shrink_to=keep))
    if not victims:
        return None
    shrunk = ", ".join(f"{v.job_id} to {v.shrink_to} workers" for v in victims)
    return PreemptionPlan(
        preemptor_job_id=job.job_id,
        preemptor_tier=job.tier,
        victims=tuple(victims),
        target=target,
        expected_lost_gpu_s=0.0,
        reason=f"shrink:{victims[0].why}",
        message=(
            f"{job.tier.value} job {job.job_id} needs {job.gpus} {job.flavor} GPUs; shrinking"
            f" {len(victims)} elastic run(s) ({shrunk}) frees them; they save first and lose"
            " nothing"
        ),
    )
