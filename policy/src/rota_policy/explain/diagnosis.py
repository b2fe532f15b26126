"""Queue-level diagnoses for phase 6: why a queue's long waits are not simply "too few GPUs",
and which waiting jobs a wider flavor list would start sooner."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType

from rota.contracts.common import TIER_ORDER
from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.admission.ladder import admission_block, within_quota
from rota_policy.cycle.state import Cycle
from rota_policy.model.decisions import Diagnosis, PendingExplanation
from rota_policy.model.snapshot import PendingJob

__all__ = ["diagnose", "wider_flavor"]

_CAUSE: Mapping[Code, str] = MappingProxyType({
    Code.QUOTA_EXCEEDED: "quota_too_low",
    Code.NO_MATCHING_FLAVOR: "flavor_too_narrow",
    Code.EXCEEDS_CLUSTER: "request_too_large",
    Code.FRAGMENTATION: "fragmentation",
    Code.PRIORITY: "queue_weight",
    Code.BUDGET_EXHAUSTED: "budget_exhausted",
})


def diagnose(cy: Cycle, explained: list[tuple[PendingJob, PendingExplanation]]) -> tuple[Diagnosis, ...]:
    groups: dict[tuple[int, str, str], list[tuple[PendingJob, PendingExplanation]]] = {}
    for job, ex in explained:
        if cy.now - job.submitted_at > cy.config.tier(job.tier).long_wait_s:
            groups.setdefault((job.tier.rank, job.team, job.flavor), []).append((job, ex))
    out: list[Diagnosis] = []
    for (rank, team, flavor), members in sorted(groups.items()):
        tier = TIER_ORDER[rank]
        counts = Counter(ex.primary for _, ex in members)
        top, n = counts.most_common(1)[0]
        cap = cy.capacity.state.layout.capacity.get(flavor, 0)
        big = [j for j, _ in members if cap and j.gpus * 2 > cap]
        oldest = max(cy.now - j.submitted_at for j, _ in members)
        if len(big) * 2 >= len(members) and top is not Code.EXCEEDS_CLUSTER:
            cause = "request_too_large"
            msg = (
                f"{len(big)} of {len(members)} long waiters ask for more than half of the {cap} {flavor} GPUs"
            )
        elif top in _CAUSE:
            cause = _CAUSE[top]
            msg = f"{n} of {len(members)} long waiters in {tier.value}/{team} wait on {top.value}"
            if top is Code.QUOTA_EXCEEDED:
                lim = cy.capacity.quota.limits(team, flavor)
                msg += f": quota {lim.quota}, borrowing limit {lim.borrowing_limit}"
            elif top is Code.PRIORITY:
                msg += f": queue weight {cy.config.tier(tier).weight} ranks them behind other work"
            elif top is Code.FRAGMENTATION:
                msg += _blocking_levels(members)
        else:
            cause = "capacity"
            msg = f"{len(members)} long waiter(s) in {tier.value}/{team}: too few free {flavor} GPUs"
        out.append(Diagnosis(tier, team, flavor, cause, len(members), oldest, msg))
    out.extend(_narrow_lists(cy, explained))
    return tuple(out)


_SOONER_S = 60.0
"""Less gain than this is not worth a diagnosis: the next cycles may start the job anyway."""


def wider_flavor(cy: Cycle, job: PendingJob, code: Code, eta: float | None) -> tuple[str, bool] | None:
    """A flavor the job does not list that would start it now (the ladder admits it there,
    quota included), and whether within its team's quota; None if there is none, if the job
    waits for its own preemption, or if its ETA is less than a minute away. Only on clusters of
    two flavors or more."""
    if code is Code.WAITING_FOR_PREEMPTION or (eta is not None and eta - cy.now < _SOONER_S):
        return None
    flavors = cy.capacity.state.layout.flavors
    if len(flavors) < 2:
        return None
    for flavor in sorted(flavors):
        if flavor not in job.flavors and admission_block(cy, job.on(flavor)) is None:
            return flavor, within_quota(cy, job.team, flavor, job.gpus)
    return None


def _narrow_lists(cy: Cycle, explained: list[tuple[PendingJob, PendingExplanation]]) -> list[Diagnosis]:
    """Per queue, the waiting jobs whose primary reason says another flavor, one they do not
    list, would start them now (`wider_flavor`), and by how much sooner than their ETA."""
    found: dict[tuple[int, str, str], list[tuple[float, PendingJob, str, bool]]] = {}
    for job, ex in explained:
        other = ex.reasons[0].detail("wider_flavor")
        if not isinstance(other, str):
            continue
        gain = math.inf if ex.eta is None else ex.eta - cy.now
        within = ex.reasons[0].detail("wider_within_quota") == "yes"
        found.setdefault((job.tier.rank, job.team, job.flavor), []).append((gain, job, other, within))
    out = []
    for (rank, team, flavor), members in sorted(found.items()):
        gain, job, other, within = max(members, key=lambda m: (m[0], m[1].job_id))
        sooner = "instead of waiting with no ETA" if math.isinf(gain) else f"{_span(gain)} before its ETA"
        msg = (
            f"{len(members)} waiting job(s) in {TIER_ORDER[rank].value}/{team} list only"
            f" {', '.join(job.flavors)} but would start now on {other}"
            f" ({'within quota' if within else 'by borrowing'}): job {job.job_id} {sooner};"
            f" adding {other} to their flavors would start them"
        )
        oldest = max(cy.now - j.submitted_at for _, j, _, _ in members)
        out.append(Diagnosis(TIER_ORDER[rank], team, flavor, "flavor_too_narrow", len(members), oldest, msg))
    return out


def _span(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{max(minutes, 1)}m"


def _blocking_levels(members: list[tuple[PendingJob, PendingExplanation]]) -> str:
    """Which topology level the fragmented waiters need whole, from their reasons' details."""
    levels = Counter(
        level for _, ex in members if ex.primary is Code.FRAGMENTATION
        and isinstance(level := ex.reasons[0].detail("level"), str)
    )
    if not levels:
        return ""
    named = ", ".join(f"{n} need one {level}" for level, n in sorted(levels.items()))
    return f" ({named}: the free GPUs are spread across that level's domains)"
