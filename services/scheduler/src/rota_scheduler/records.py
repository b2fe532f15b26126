"""What the scheduler's view holds, as plain records: a job, the GPUs a run holds, a plan and a
restart in flight, and the parts of the last snapshot kept for the next. Apart from the view
(`rota_scheduler.view`) so that what reads them (the snapshot, the pending index, the actions)
does not import the view that folds them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rota.contracts import JobSpec
from rota.contracts.lifecycle import Phase
from rota_policy import NodeState, RunningRun, Slot
from rota_policy.model.layout import Layout

from rota_scheduler.staleness import WaitPrint


@dataclass
class Allocation:
    """GPUs a run holds in the ledger, from proposal until the ledger releases them."""

    run_id: str
    job_id: str
    placement: tuple[Slot, ...]
    borrowed_gpus: int
    granted: bool = False
    flavor: str = ""
    """The flavor granted (one of the job's flavors); empty in events from before flavor lists,
    which were all on the job's `flavor`."""


@dataclass
class JobRecord:
    job_id: str
    spec: JobSpec
    submitted_at: float
    phase: Phase = Phase.PENDING
    """Where it is in its lifecycle (`rota.contracts.lifecycle`), as the events about its
    current run moved it."""
    run_id: str | None = None
    attempt: int = 0
    started_at: float | None = None
    last_checkpoint_at: float | None = None
    last_checkpoint_uri: str | None = None
    resume_from: str | None = None
    preemptions: int = 0
    cancelled: bool = False
    """Its cancel was asked (`next_phase`'s `cancel_requested`): it never goes back to its
    queue, and a run it holds is stopped."""
    stop_requested: bool = False
    pending_fingerprint: WaitPrint | None = None
    """What its last JobPending said (`rota_scheduler.staleness`); None: never explained."""
    requeued_at: float | None = None
    """When a preemption put it back in its queue; its wait restarts there (metrics)."""
    ran_s: float = 0.0
    """Time its ended runs ran, for what it really takes against what it declared."""

    @property
    def queued_since(self) -> float:
        return self.submitted_at if self.requeued_at is None else self.requeued_at


@dataclass
class PlanRecord:
    plan_id: str
    preemptor_job_id: str
    victim_run_ids: tuple[str, ...]
    target: tuple[Slot, ...]
    requested_at: float | None = None


@dataclass
class RestartRecord:
    """A run that restarts at another size on GPUs held for its job (`rota_policy.Restart`):
    a shrunk victim on the workers it keeps (DECISIONS 81), a growing run on its own and the
    added ones (DECISIONS 82). Folded from events only, so a new leader that replays the
    stream holds the same GPUs."""

    run_id: str
    target: tuple[Slot, ...]
    requested_at: float
    grow: bool = False


RunningMemo = dict[str, tuple[tuple[Any, ...], RunningRun]]
"""Run id → what its `RunningRun` was built from, and the `RunningRun`."""


@dataclass
class SnapshotMemo:
    """Parts of the last snapshot, with what each was built from (`rota_scheduler.snapshot`)."""

    running: RunningMemo = field(default_factory=dict)
    nodes_from: tuple[Any, ...] | None = None
    nodes: tuple[NodeState, ...] = ()
    node_states: dict[str, tuple[tuple[Any, ...], NodeState]] = field(default_factory=dict)
    """Node name → what its `NodeState` was built from (withdrawn, GPUs held, shares), and
    the `NodeState`: when a cycle admits a job, only the nodes it went to are built again."""
    layout: Layout | None = None
    """The nodes' layout, which the policy uses only if it matches them (compared in full):
    building it again each cycle cost a third of an idle cycle on 2,500 nodes."""
