"""What phase 6 says of GPU-hour budgets: the block a job's budget gives it, its details, the
ETA it implies, and the note on a job past an `idle_only` budget (`budget` holds the state)."""

from __future__ import annotations

from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.admission.block import Block
from rota_policy.admission.ladder import budget_block
from rota_policy.cycle.state import Cycle
from rota_policy.model.decisions import Reason
from rota_policy.model.snapshot import PendingJob

__all__ = ["block_of", "budget_details", "budget_start", "idle_only_reasons"]

Details = tuple[tuple[str, int | float | str], ...]


def budget_details(cy: Cycle, job: PendingJob) -> Details:
    budget = cy.capacity.budget
    spent = budget.waits(job.team, job.flavor) or budget.only_idle(job.team, job.flavor)
    if spent is None:
        return ()
    return (
        ("used_gpu_hours", round(spent.used_s / 3600.0, 3)),
        ("budget_gpu_hours", spent.limit.gpu_hours),
        ("period", spent.limit.period.value),
        ("resets_at", spent.resets_at),
    )


def block_of(cy: Cycle, job: PendingJob) -> Block | None:
    """The block the walk recorded, or rung 2b's, which a walk that dropped the job's queue
    whole (`cycle.fast.shortcuts.hopeless`) did not record; it sets the ETA, so it is asked first."""
    block = cy.outcome.blocks.get(job.job_id)
    if block is None and cy.capacity.budget.waiting:
        block = budget_block(cy, job)
    return block


def budget_start(cy: Cycle, job: PendingJob) -> float:
    """A job that waits for its budget starts no earlier than the reset."""
    spent = cy.capacity.budget.waits(job.team, job.flavor)
    return spent.resets_at if spent is not None else cy.now


def idle_only_reasons(cy: Cycle, job: PendingJob) -> tuple[Reason, ...]:
    """A job past an idle_only budget is told so beside what blocks it now."""
    idle = cy.capacity.budget.only_idle(job.team, job.flavor)
    return () if idle is None else (Reason(Code.BUDGET_EXHAUSTED, idle.message, budget_details(cy, job)),)
