"""The baselines' victim search, greedy by order (Kueue's and Slurm's way). Their searches count
whole GPUs: GPU shares are no victims of theirs and stop nobody (DECISIONS 84)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rota_policy.admission.placement import Fit, fit_on_counts
from rota_policy.model.decisions import PreemptionPlan
from rota_policy.model.snapshot import PendingJob
from rota_policy.preemption.search import Candidate, make_plan, slots_from
from rota_policy.preemption.victimpool import PreemptionContext

__all__ = ["greedy_plan"]


def greedy_plan(
    job: PendingJob,
    ctx: PreemptionContext,
    candidates: Sequence[Candidate],
    allowed: Callable[[Candidate, dict[str, int], int], bool],
    style: str,
    *,
    quotas: bool,
    within: Callable[[int], bool] | None = None,
) -> PreemptionPlan | None:
    """Kueue's and Slurm's way: add victims in order until the job fits, then drop the unneeded.

    `allowed(candidate, taken_per_team, own_released)` re-checks a candidate against the victims
    chosen so far (Kueue only reclaims from a team while it is still borrowing); `within(own_released)`
    is a further quota test to fit (Kueue's attempt without borrowing)."""
    state, index = ctx.state, ctx.state.layout.index
    nodes, counts = state.layout.flavor_nodes.get(job.flavor, []), state.counts()
    per_worker, workers = job.gpus_per_worker, job.workers

    def fits(own: int) -> Fit | None:
        if not _quota_allows(job, ctx, own, quotas, within):
            return None
        if sum(counts[n] for n in nodes) < job.gpus:
            return None
        return fit_on_counts(counts, nodes, state.layout, workers, per_worker, job.need)

    def apply(c: Candidate, sign: int) -> None:
        for slot in c.run.placement:
            counts[index[slot.node]] += sign * len(slot.gpus)

    chosen: list[Candidate] = []
    taken: dict[str, int] = {}
    own = 0
    fit: Fit | None = None
    for c in candidates:
        if not allowed(c, taken, own):
            continue
        chosen.append(c)
        taken[c.run.team] = taken.get(c.run.team, 0) + c.run.gpus
        own += c.run.gpus if c.run.team == job.team else 0
        apply(c, +1)
        fit = fits(own)
        if fit is not None:
            break
    if fit is None or not chosen:
        return None
    for c in reversed(chosen[:-1]):
        apply(c, -1)
        trial_own = own - (c.run.gpus if c.run.team == job.team else 0)
        trial = fits(trial_own)
        if trial is None:
            apply(c, +1)
            continue
        chosen.remove(c)
        own, fit = trial_own, trial
    freed: dict[int, list[int]] = {}
    for c in chosen:
        for slot in c.run.placement:
            freed.setdefault(index[slot.node], []).extend(slot.gpus)
    return make_plan(job, chosen, slots_from(state, fit, freed), style)


def _quota_allows(
    job: PendingJob, ctx: PreemptionContext, own: int, quotas: bool, within: Callable[[int], bool] | None
) -> bool:
    """Whether the job's team may take its GPUs once its own victims' `own` GPUs are released."""
    if quotas and not ctx.quota.check(job.team, job.flavor, job.gpus, released=own).ok:
        return False
    return within is None or within(own)
