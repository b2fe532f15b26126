"""What the replay keeps per job (`SimJob`), how each policy's victims stop (`EVICTIONS`),
and the running mean its samplers use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rota_policy.model.snapshot import PendingJob, RunningRun, Slot

from rota_replay.workload import CHECKPOINT_SAVE_S, TraceJob

__all__ = ["EVICTIONS", "Eviction", "Mean", "SimJob"]


@dataclass(frozen=True, slots=True)
class Eviction:
    """What happens to a victim between the notice (or SIGTERM) and the stop."""

    resumable_stop_s: float
    resumable_saves: bool
    """True: the job saves its progress on the notice; False: it keeps its last periodic one."""
    other_stop_s: float


EVICTIONS: Mapping[str, Eviction] = MappingProxyType({
    # Rota: notice -> save in checkpoint_save_s -> acknowledge -> stop. A job that cannot
    # checkpoint has nothing to wait for, so the coordinator stops it at once.
    "rota": Eviction(CHECKPOINT_SAVE_S, True, 0.0),
    # Kueue: SIGTERM, 30 s grace; the job does not save on SIGTERM.
    "kueue": Eviction(30.0, False, 30.0),
    # Slurm REQUEUE with GraceTime=300: a resumable job saves in its 60 s and exits; another exits.
    "slurm": Eviction(CHECKPOINT_SAVE_S, True, 0.0),
    "fifo": Eviction(0.0, False, 0.0),
})


class Mean:
    """A running mean of samples, each taken `count` times."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def add(self, value: float, count: int = 1) -> None:
        self.total += value * count
        self.count += count

    @property
    def value(self) -> float:
        return self.total / self.count if self.count else 0.0


class SimJob:
    __slots__ = (
        "attempt",
        "epoch",
        "fallback_starts",
        "finish",
        "first_reason",
        "first_start",
        "grow_slots",
        "lost_s",
        "pending",
        "pending_since",
        "preemptions",
        "progress",
        "rate",
        "run",
        "run_base",
        "run_overhead",
        "run_start",
        "saved",
        "shrink_to",
        "size_sum",
        "starts",
        "stop_at",
        "t",
        "wait",
    )

    def __init__(self, t: TraceJob) -> None:
        self.t = t
        self.progress = 0.0
        self.pending: PendingJob | None = None
        self.pending_since = t.submit
        self.wait = 0.0
        self.first_start: float | None = None
        self.first_reason = ""
        self.finish: float | None = None
        self.preemptions = 0
        self.attempt = 0
        self.epoch = 0
        self.run: RunningRun | None = None
        self.run_start = 0.0
        self.run_base = 0.0
        self.run_overhead = 0.0
        self.saved = 0.0
        self.stop_at: float | None = None
        self.lost_s = 0.0
        self.fallback_starts = 0
        """Starts on another flavor than the first it lists."""
        self.rate = 1.0
        """Progress (seconds of the trace's run at `t.workers`) per second of its current run:
        its workers over the trace's, as an elastic gang's work scales linearly (DECISIONS 72)."""
        self.grow_slots: tuple[Slot, ...] = ()
        """The GPUs held for it while it saves before growing onto them (DECISIONS 74)."""
        self.shrink_to = 0
        """Workers it keeps when its stop is a shrink (DECISIONS 73); 0: a stop."""
        self.starts = 0
        self.size_sum = 0
        """Workers summed over its starts (an elastic gang's mean size)."""
