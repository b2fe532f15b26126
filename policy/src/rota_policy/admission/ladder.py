"""The admission ladder: whether a job can start now, and if not, the first rung that stops it.

    1. flavor       some node offers the job's flavor               else NO_MATCHING_FLAVOR
    2. ever fits    its gang fits the empty cluster                 else EXCEEDS_CLUSTER
    2b. budget      its team has GPU-hours left this period, or its
                    budget lets it run on idle GPUs (`idle_only`)    else BUDGET_EXHAUSTED
    -  the line     no blocked job ahead holds the line             else PRIORITY
                    (only policies without backfill; the walk says which job holds it)
    3. quota        its team's quota allows its GPUs                else QUOTA_EXCEEDED
    1b. shares      a GPU share asks for a shareable flavor          else NO_MATCHING_FLAVOR
    4. free GPUs    enough GPUs of its flavor are free (a share: or
                    room on a GPU already shared)                   else INSUFFICIENT_CAPACITY
    5. reservation  starting now delays no backfill reservation     else RESERVED_FOR_HIGHER_PRIORITY
    6. fit          a best-fit gang placement exists now            else FRAGMENTATION

An elastic gang goes down the ladder at its min; once admitted, it takes the largest size up to
its max that the rungs from quota on also admit now (`widest`): sizes from max down, the first
that admits wins, so it is never admitted below min nor above max.

A job that accepts several flavors goes down the ladder once per flavor (`choose`): it starts
on the first flavor that admits it within its team's quota, else on the first that admits it
by borrowing, in its order of preference (Kueue's flavor fungibility with whenCanBorrow:
TryNextFlavor); if none admits it, the flavor that got furthest down the ladder answers.

The walk asks it at each job's turn, the reasons ask it for a job that had no turn, and every
shortcut of the walk (`shortcuts`) is written in terms of its rungs. A new rule is a new rung
here, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.admission.block import Block
from rota_policy.admission.placement import Fit
from rota_policy.cycle.state import Cycle
from rota_policy.model.snapshot import PendingJob

__all__ = [
    "Choice",
    "admission",
    "admission_block",
    "budget_block",
    "choose",
    "quota_block",
    "reservation_block",
    "widest",
    "within_quota",
]

_NO_FLAVOR = Block(Code.NO_MATCHING_FLAVOR)
_NEVER_FITS = Block(Code.EXCEEDS_CLUSTER)
_SHORT = Block(Code.INSUFFICIENT_CAPACITY)
_FRAGMENTED = Block(Code.FRAGMENTATION)


def admission(cy: Cycle, job: PendingJob, held_by: str | None = None) -> Fit | Block:
    """Where the job fits now, or the first rung of the ladder it fails. `held_by`, if given,
    is the job that holds the line ahead of it (policies without backfill)."""
    state, flavor = cy.capacity.state, job.flavor
    if flavor not in state.layout.flavors:
        return _NO_FLAVOR
    if job.share and flavor not in cy.config.shareable:
        return cy.outcome.shared_block(Code.NO_MATCHING_FLAVOR, _not_shareable(flavor))
    if not state.can_ever_fit(job):
        return _NEVER_FITS
    if cy.capacity.budget.waiting:
        spent = budget_block(cy, job)
        if spent is not None:
            return spent
    if held_by is not None:
        return cy.outcome.shared_block(Code.PRIORITY, held_by)
    refused = quota_block(cy, job)
    if refused is not None:
        return refused
    if job.share:
        return _share_fit(cy, job)
    if state.free_total.get(flavor, 0) < job.gpus:
        return _SHORT
    reserved = reservation_block(cy, job) if cy.capacity.books else None
    if reserved is not None:
        return reserved
    fit = state.find(job)
    return fit if fit is not None else _FRAGMENTED


def _not_shareable(flavor: str) -> str:
    return f"flavor {flavor} does not allow GPU shares (set shareable: true on {flavor} in cluster.flavors)"


def _share_fit(cy: Cycle, job: PendingJob) -> Fit | Block:
    """Rungs 4-6 for a GPU share (DECISIONS 67): room on a GPU already shared needs no free GPU
    and delays no reservation (it takes no whole GPU); else it is a 1-GPU job."""
    state = cy.capacity.state
    if not state.share_room(job.flavor, job.share):
        if state.free_total.get(job.flavor, 0) < 1:
            return _SHORT
        reserved = reservation_block(cy, job) if cy.capacity.books else None
        if reserved is not None:
            return reserved
    fit = state.find_share(job)
    return fit if fit is not None else _FRAGMENTED


def admission_block(cy: Cycle, job: PendingJob) -> Block | None:
    """The ladder's answer as a block; None if the job could start now (on any of its flavors)."""
    outcome = choose(cy, job).outcome if job.fallback else admission(cy, job)
    return outcome if isinstance(outcome, Block) else None


def budget_block(cy: Cycle, job: PendingJob) -> Block | None:
    """Rung 2b: BUDGET_EXHAUSTED, if the job's team has used its budget of the flavor this
    period and its budget says its jobs wait. Constant within a cycle (`budget`)."""
    spent = cy.capacity.budget.waits(job.team, job.flavor)
    return None if spent is None else cy.outcome.shared_block(Code.BUDGET_EXHAUSTED, spent.message)


_DEPTH: Mapping[Code, int] = MappingProxyType({
    Code.NO_MATCHING_FLAVOR: 0,
    Code.EXCEEDS_CLUSTER: 1,
    Code.BUDGET_EXHAUSTED: 2,
    Code.PRIORITY: 3,
    Code.QUOTA_EXCEEDED: 4,
    Code.INSUFFICIENT_CAPACITY: 5,
    Code.RESERVED_FOR_HIGHER_PRIORITY: 6,
    Code.FRAGMENTATION: 7,
})
"""How far down the ladder a block comes: which of a multi-flavor job's flavors answers."""


class Choice(NamedTuple):
    """The ladder's answer for a job over its flavors."""

    job: PendingJob
    """The job on the flavor that answers (`PendingJob.on`), or the job itself if it names one."""
    outcome: Fit | Block
    tried: tuple[tuple[PendingJob, Block], ...] = ()
    """Each flavor that refused it, in order of preference, with its block (multi-flavor only)."""


def within_quota(cy: Cycle, team: str, flavor: str, gpus: float) -> bool:
    """Whether `gpus` more of `flavor` keep the team within its nominal quota (no borrowing)."""
    return cy.capacity.quota.in_use(team, flavor) + gpus <= cy.capacity.quota.limits(team, flavor).quota


def choose(cy: Cycle, job: PendingJob, held: Callable[[str], str | None] | None = None) -> Choice:
    """The ladder over the job's flavors. `held(flavor)`, if given, is the job that holds the
    line ahead of it on that flavor (policies without backfill)."""
    if not job.fallback:
        return Choice(job, admission(cy, job, held(job.flavor) if held is not None else None))
    tried: list[tuple[PendingJob, Block]] = []
    borrowing: Choice | None = None
    for flavor in job.flavors:
        variant = job.on(flavor)
        outcome = admission(cy, variant, held(flavor) if held is not None else None)
        if isinstance(outcome, Block):
            tried.append((variant, outcome))
        elif not cy.rules.quotas or within_quota(cy, job.team, flavor, job.demand):
            return Choice(variant, outcome, tuple(tried))
        elif borrowing is None:
            borrowing = Choice(variant, outcome)
    if borrowing is not None:
        return Choice(borrowing.job, borrowing.outcome, tuple(tried))
    deepest = max(tried, key=lambda t: _DEPTH.get(t[1].code, 0))  # max keeps the first of equals
    return Choice(deepest[0], deepest[1], tuple(tried))


def quota_block(cy: Cycle, job: PendingJob) -> Block | None:
    """Rung 3: QUOTA_EXCEEDED with quota's message, if the policy has quotas and they refuse."""
    quota = cy.capacity.quota
    demand = job.demand
    if not cy.rules.quotas or quota.allows(job.team, job.flavor, demand):
        return None
    return cy.outcome.shared_block(Code.QUOTA_EXCEEDED, quota.check(job.team, job.flavor, demand).message)


def reservation_block(cy: Cycle, job: PendingJob) -> Block | None:
    """Rung 5: RESERVED_FOR_HIGHER_PRIORITY naming the first reservation that starting now, for
    the job's expected runtime, would delay."""
    book = cy.capacity.books.get(job.flavor)
    if book is None:
        return None
    held = book.blocking(job.gpus, cy.now + cy.runtime(job))
    return None if held is None else cy.outcome.shared_block(Code.RESERVED_FOR_HIGHER_PRIORITY, held.job_id)


def widest(cy: Cycle, job: PendingJob, fit: Fit) -> tuple[PendingJob, Fit]:
    """An elastic job that the ladder admitted at its min, on `fit`: the largest size up to its
    max that quota, free GPUs, reservations and placement admit now, as a rigid job of that
    size with its fit (`PendingJob.sized`); the job and `fit` themselves if none above min does
    or it is rigid. The rungs before quota do not depend on the size, or (ever fits) are asked
    per size here."""
    if not job.elastic:
        return job, fit
    state = cy.capacity.state
    free = state.free_total.get(job.flavor, 0)
    for workers in range(min(job.workers_max, free // job.gpus_per_worker), job.workers, -1):
        variant = job.sized(workers)
        if not state.can_ever_fit(variant) or quota_block(cy, variant) is not None:
            continue
        if cy.capacity.books and reservation_block(cy, variant) is not None:
            continue
        found = state.find(variant)
        if found is not None:
            return variant, found
    return job, fit
