"""What is in flight when a cycle starts, besides the runs and the queues (`Snapshot.plans`,
`Snapshot.restarts`): GPUs promised to a job that does not hold them yet. Re-exported by
`model`, whose input they are part of.
"""

from __future__ import annotations

from dataclasses import dataclass

from rota_policy.model.slot import Slot

__all__ = ["PlanInFlight", "Restart"]


@dataclass(frozen=True, slots=True)
class PlanInFlight:
    """A preemption already requested: the victims still stopping and where the preemptor goes.

    Every GPU of `target` that is free is held for the preemptor; once all are free, the
    preemptor is admitted on exactly that placement.
    """

    preemptor_job_id: str
    victim_run_ids: tuple[str, ...]
    target: tuple[Slot, ...]
    requested_at: float | None = None
    """When the victims were told to stop; None: unknown, taken as now."""


@dataclass(frozen=True, slots=True)
class Restart:
    """A run that restarts at another size on GPUs held for it (DECISIONS 81): an elastic
    victim shrunk to the workers it keeps, or a run that grows onto added GPUs.

    While `run_id` holds GPUs, the free GPUs of `target` are held for the job; once the job
    waits again (its run saved and stopped) and every GPU of `target` is free, it is admitted
    on exactly `target`, whatever the queue ahead of it: the GPUs were its own, or held for it.
    """

    job_id: str
    run_id: str
    """The run that saves and stops first; its GPUs are the job's until it does."""
    target: tuple[Slot, ...]
    requested_at: float | None = None
    """When the run was asked to save; None: unknown, taken as now."""
    grow: bool = False
    """A grow (DECISIONS 74, 82); False: a shrink (DECISIONS 73, 81)."""
