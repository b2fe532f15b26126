"""The policy's input (`Snapshot`): plain frozen dataclasses (its output is in `decisions`).

They are dataclasses rather than pydantic models because the simulator builds one snapshot per
scheduling cycle, tens of thousands of times per replay; validation belongs at the service edge,
where events are parsed, not in the hot loop. Time is float seconds on the caller's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import accumulate

from rota.contracts.common import Tier
from rota.contracts.job import RackAffinity

from rota_policy.model.inflight import PlanInFlight, Restart
from rota_policy.model.layout import Layout
from rota_policy.model.slot import Slot
from rota_policy.model.topology import Need, TopologyNeed, need_of

__all__ = [
    "QUARTERS",
    "NoExecutor",
    "NodeState",
    "PendingJob",
    "PendingQueue",
    "PlanInFlight",
    "QueueSums",
    "Restart",
    "RunningRun",
    "Slot",
    "Snapshot",
    "expected_ends",
    "group_pending",
]

QUARTERS = 4
"""A GPU share is a whole number of quarters of one GPU (DECISIONS 66): sums stay exact."""


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    flavor: str
    rack: str
    gpus: int
    free: tuple[int, ...]
    """Indices of the GPUs that no run holds, ascending."""
    levels: tuple[tuple[str, str], ...] = ()
    """(level, value) for each topology level the cluster declares, outermost first, `rack`
    included if declared; empty: the cluster declares none, and `rack` is the one level."""
    shared: tuple[tuple[int, int], ...] = ()
    """(GPU index, quarters held) of each GPU that GPU shares hold in part, ascending; such a
    GPU is not in `free`, so no whole-GPU placement ever meets a share (DECISIONS 66)."""


@dataclass(frozen=True, slots=True)
class RunningRun:
    """A run that holds GPUs, including one that has been told to stop and has not yet."""

    run_id: str
    job_id: str
    team: str
    tier: Tier
    flavor: str
    placement: tuple[Slot, ...]
    gpus: int
    started_at: float
    last_checkpoint_at: float | None
    """When the run last saved a checkpoint; None if it has saved none in this run."""
    resumable: bool
    preemptions: int
    """How many times the job was preempted before this run."""
    borrowed_gpus: int = 0
    """As recorded by the ledger at grant; the policy recomputes borrowing from live usage."""
    expected_end: float | None = None
    """Declared or estimated end of this run; None means `started_at + default estimate`."""
    checkpoint_interval_s: float | None = None
    """If set, the run also checkpoints every interval after `last_checkpoint_at`, so a caller
    need not rebuild the snapshot at every periodic checkpoint."""
    share: int = 0
    """Quarters (1-3) of one GPU that the run holds (a GPU share, DECISIONS 66), with `gpus` 0:
    it holds no whole GPU, and stopping it frees none. 0: it holds `gpus` whole GPUs."""
    workers_range: tuple[int, int] | None = None
    """An elastic gang's (min, max) workers (DECISIONS 70); None: a rigid gang."""

    @property
    def demand(self) -> float:
        """What quota and fair share count: its whole GPUs, or its share as a fraction."""
        return self.share / QUARTERS if self.share else self.gpus

    def last_checkpoint(self, now: float) -> float | None:
        last, every = self.last_checkpoint_at, self.checkpoint_interval_s
        if last is None or every is None or now <= last:
            return last
        return last + ((now - last) // every) * every


def expected_ends(runs: Iterable[RunningRun], now: float, default_runtime_s: float) -> list[float]:
    """When each run is expected to free its GPUs: its expected end, or `started_at` plus the
    default runtime when it declared none; never before `now`. For many runs at once, as the
    reservation book and the ETAs ask it of every run in most cycles."""
    out = []
    for run in runs:
        end = run.expected_end
        if end is None:
            end = run.started_at + default_runtime_s
        out.append(end if end >= now else now)
    return out


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: str
    team: str
    tier: Tier
    flavor: str
    workers: int
    gpus_per_worker: int
    submitted_at: float
    """The original submit time; a preempted job keeps it when it goes back to its queue."""
    runtime_estimate_s: float | None = None
    """Declared remaining runtime; None means the config's default estimate."""
    rack: RackAffinity = RackAffinity.none
    resumable: bool = False
    preemptions: int = 0
    fallback: tuple[str, ...] = ()
    """Further flavors the job accepts after `flavor`, in order of preference (DECISIONS 54).
    Empty: `flavor` only, exactly as a job that names one flavor."""
    topology: TopologyNeed | None = None
    """The levels its workers must or would best share (DECISIONS 61); None: `rack` says."""
    share: int = 0
    """Quarters (1-3) of one GPU it asks for (a GPU share, DECISIONS 66), with one worker of one
    GPU: what it holds is at most one GPU, which is what every GPU count reads (`gpus`). 0: it
    asks for `gpus` whole GPUs."""
    workers_max: int = 0
    """An elastic gang (DECISIONS 70): `workers` is its min, what every rung, reason, ETA and
    reservation reads; the ladder then admits it at the largest size up to this that fits now
    (`ladder.widest`). 0 (or `workers`): a rigid gang of `workers`."""
    _on: dict[str, PendingJob] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def demand(self) -> float:
        """What quota and fair share count: `gpus`, or its share as a fraction of one GPU."""
        return self.share / QUARTERS if self.share else self.workers * self.gpus_per_worker

    @property
    def elastic(self) -> bool:
        return self.workers_max > self.workers

    def sized(self, workers: int) -> PendingJob:
        """The elastic job as a rigid gang of `workers`, its runtime estimate scaled linearly
        from its min's (the declared runtime is for `workers`, the min: DECISIONS 71)."""
        est = self.runtime_estimate_s
        scaled = None if est is None else est * self.workers / workers
        return replace(self, workers=workers, workers_max=0, runtime_estimate_s=scaled)

    @property
    def need(self) -> Need:
        """(required, preferred) topology level: what placement reads, rack affinity included."""
        return need_of(self.rack, self.topology)

    @property
    def flavors(self) -> tuple[str, ...]:
        """Every flavor the job accepts, the preferred first."""
        return (self.flavor, *self.fallback)

    def on(self, flavor: str) -> PendingJob:
        """The job as if it named `flavor` alone: what the ladder asks about one of its flavors.
        Kept per job object: the walk asks it of a waiting job's flavors in every cycle."""
        if flavor == self.flavor and not self.fallback:
            return self
        made = self._on
        if made is None:
            made = {}
            object.__setattr__(self, "_on", made)
        found = made.get(flavor)
        if found is None:
            found = made[flavor] = replace(self, flavor=flavor, fallback=())
        return found


@dataclass(frozen=True, slots=True)
class QueueSums:
    """Prefix sums of a queue, read through `between`. Entry `offset + i` of each list covers
    the queue's first i jobs (plus jobs that have left its head since the lists were built)."""

    gpus: list[int]
    work: list[float]
    """GPU-seconds of the jobs with a runtime estimate."""
    unknown_gpus: list[int]
    """GPUs of the jobs without one (their runtime is the config's default)."""
    offset: int = 0

    def between(self, lo: int, hi: int) -> tuple[int, float, int]:
        """GPUs, GPU-seconds with an estimate, and GPUs without one, of jobs lo..hi-1."""
        a, b = lo + self.offset, hi + self.offset
        return (
            self.gpus[b] - self.gpus[a],
            self.work[b] - self.work[a],
            self.unknown_gpus[b] - self.unknown_gpus[a],
        )

    def extended(self, jobs: Iterable[PendingJob]) -> QueueSums:
        gpus, work, unknown = list(self.gpus), list(self.work), list(self.unknown_gpus)
        _accumulate(jobs, gpus, work, unknown)
        return QueueSums(gpus, work, unknown, self.offset)


def _accumulate(jobs: Iterable[PendingJob], gpus: list[int], work: list[float], unknown: list[int]) -> None:
    for j in jobs:
        g = j.gpus
        est = j.runtime_estimate_s
        gpus.append(gpus[-1] + g)
        if est is not None and est > 0:
            work.append(work[-1] + g * est)
            unknown.append(unknown[-1])
        else:
            work.append(work[-1])
            unknown.append(unknown[-1] + g)


_HEAD_LOOKAHEAD = 8
"""How many jobs may leave a queue's head between two snapshots for its sums to carry over."""


@dataclass(frozen=True, slots=True)
class PendingQueue:
    """The pending jobs of one (tier, team, flavor), oldest submit first.

    Within such a queue every job shares its team's fair-share and headroom factors, so the
    score order is the submit order; the caller keeps each queue sorted (as Kueue's queue
    manager keeps one heap per ClusterQueue) and the policy merges heads lazily. That is what
    lets a cycle cost O(jobs examined) instead of O(all pending).
    """

    tier: Tier
    team: str
    flavor: str
    jobs: tuple[PendingJob, ...]
    min_gpus: int = 0
    """The smallest request in the queue; 0 means unknown (computed on construction)."""
    min_runtime_s: float = -1.0
    """The shortest runtime estimate in the queue, 0 if a job has none (the config default
    applies); negative means unknown (computed on construction). With `min_gpus` it lets a
    cycle skip a queue that a backfill reservation blocks whole."""
    fallback: tuple[str, ...] | None = None
    """The flavors its jobs accept beyond the queue's `flavor`, sorted; None: unknown (computed
    on construction). Empty, the common case, lets every shortcut treat the queue as one flavor."""
    shares: bool | None = None
    """Whether some job of it asks for a GPU share; None: unknown (computed on construction).
    The shortcuts that count whole free GPUs step aside for such a queue (DECISIONS 67)."""

    _sums: QueueSums | None = field(default=None, init=False, repr=False, compare=False)
    _ids: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)
    _least: tuple[list[int], list[float]] | None = field(default=None, init=False, repr=False, compare=False)

    def ids(self) -> frozenset[str]:
        """The queue's job ids, computed once per queue object (as `sums`)."""
        ids = self._ids
        if ids is None:
            ids = frozenset(j.job_id for j in self.jobs)
            object.__setattr__(self, "_ids", ids)
        return ids

    def sums(self) -> QueueSums:
        """Prefix sums over the jobs, computed once per queue object: a caller that keeps an
        unchanged queue across cycles (the simulator does) pays for them once."""
        sums = self._sums
        if sums is None:
            gpus, work, unknown = [0], [0.0], [0]
            _accumulate(self.jobs, gpus, work, unknown)
            sums = QueueSums(gpus, work, unknown)
            object.__setattr__(self, "_sums", sums)
        return sums

    def least_from(self, pos: int) -> tuple[int, float]:
        """The smallest request and the shortest runtime estimate (0 for a job without one, as
        `min_runtime_s`) among the jobs from `pos` on, each over all of them (they may be two
        jobs'). Suffix minima, computed once per queue object at C speed: they tell in one
        step that no job past a queue's window can start (`ordering.next_fitting`)."""
        least = self._least
        if least is None:
            jobs = self.jobs
            gpus = list(accumulate(reversed([j.gpus for j in jobs]), min))
            gpus.reverse()
            runtimes = [j.runtime_estimate_s or 0.0 for j in jobs]
            shortest = list(accumulate(reversed(runtimes), min))
            shortest.reverse()
            least = (gpus, shortest)
            object.__setattr__(self, "_least", least)
        return least[0][pos], least[1][pos]

    def followed_by(
        self,
        jobs: tuple[PendingJob, ...],
        min_gpus: int = 0,
        min_runtime_s: float = -1.0,
        fallback: tuple[str, ...] | None = None,
        shares: bool | None = None,
    ) -> PendingQueue:
        """The same queue after some jobs left its head and others joined its tail: the prefix
        sums carry over instead of being computed again (under overload a queue holds
        thousands of jobs and changes a little in each cycle). Any other change: a new queue."""
        queue = PendingQueue(
            self.tier, self.team, self.flavor, jobs, min_gpus, min_runtime_s, fallback, shares
        )
        sums, old = self._sums, self.jobs
        if sums is None or not jobs:
            return queue
        first = jobs[0]
        left = next((k for k in range(min(_HEAD_LOOKAHEAD, len(old))) if old[k] is first), None)
        if left is None:
            return queue
        kept = len(old) - left
        # Tuples compare element identity first, so this is a C-speed check of the kept part.
        if len(jobs) < kept or jobs[:kept] != old[left:]:
            return queue
        sums = QueueSums(sums.gpus, sums.work, sums.unknown_gpus, sums.offset + left)
        if len(jobs) > kept:
            sums = sums.extended(jobs[kept:])
        object.__setattr__(queue, "_sums", sums)
        return queue

    def __post_init__(self) -> None:
        if self.min_gpus <= 0 and self.jobs:
            object.__setattr__(self, "min_gpus", min(j.gpus for j in self.jobs))
        if self.min_runtime_s < 0:
            object.__setattr__(
                self,
                "min_runtime_s",
                min((j.runtime_estimate_s or 0.0 for j in self.jobs), default=0.0),
            )
        if self.fallback is None:
            object.__setattr__(self, "fallback", tuple(sorted({f for j in self.jobs for f in j.fallback})))
        if self.shares is None:
            object.__setattr__(self, "shares", any(j.share for j in self.jobs))


def group_pending(jobs: list[PendingJob] | tuple[PendingJob, ...]) -> tuple[PendingQueue, ...]:
    """Group loose pending jobs into sorted queues (for tests and small callers)."""
    buckets: dict[tuple[Tier, str, str], list[PendingJob]] = {}
    for job in jobs:
        buckets.setdefault((job.tier, job.team, job.flavor), []).append(job)
    return tuple(
        PendingQueue(tier, team, flavor, tuple(sorted(q, key=lambda j: (j.submitted_at, j.job_id))))
        for (tier, team, flavor), q in sorted(buckets.items(), key=lambda kv: (kv[0][0].rank, kv[0][1:]))
    )


@dataclass(frozen=True, slots=True)
class NoExecutor:
    """Why no running executor can run a pending job: the facts, which the policy words
    (`explain.executors`). The caller, which knows the jobs' specs and the executors, decides
    which jobs these are; the policy leaves them waiting."""

    sections: tuple[str, ...]
    """The job's run sections (`local`, `kubernetes`, `sim`) that it has, sorted."""
    executors: tuple[tuple[str, str], ...]
    """Each running executor's backend and the section it needs to run a job, sorted."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeState, ...]
    running: tuple[RunningRun, ...]
    pending: tuple[PendingQueue, ...]
    usage: dict[str, float] = field(default_factory=dict)
    """Per team: GPU-seconds decayed with the configured half-life, as the ledger keeps them."""
    plans: tuple[PlanInFlight, ...] = ()
    explain: frozenset[str] | None = None
    """Pending job ids that need reasons and an ETA this cycle; None means all of them.

    A live cycle explains everything; the simulator asks only for new submissions (the ETA at
    submit is what it measures), which keeps a replay cycle proportional to what changed.
    """
    runtime_scale: float = 1.0
    """Observed actual ÷ declared runtime, learned from finished jobs; scales ETA estimates only."""
    in_use: Mapping[tuple[str, str], float] | None = None
    """GPUs that `running` holds per (team, flavor); None: the cycle adds them up. A caller
    that keeps these totals as runs start and stop (the simulator) passes them, so that a
    cycle's cost does not grow with the number of runs just to count them again."""
    layout: Layout | None = None
    """The layout of `nodes` as a caller kept it from an earlier cycle (`rota_policy.model.layout`);
    used only if it matches `nodes`, compared in full. None: the cycle builds its own."""
    budget_used: Mapping[tuple[str, str], float] | None = None
    """GPU-seconds each (team, flavor) with a budget has used in its current period, running
    runs up to now (`rota.budget.BudgetMeter`); a pair left out has used none."""
    restarts: tuple[Restart, ...] = ()
    """Runs restarting at another size on GPUs held for them (`Restart`); the live scheduler's.
    The replay restarts such a run at the instant it stops, so it never needs one."""
    unrunnable: Mapping[str, NoExecutor] | None = None
    """Pending jobs, by id, that no running executor can run: they wait (`NO_EXECUTOR`) out
    of every queue's line, as if not submitted yet, so no job waits behind them. None or
    empty: every job can run (the simulator's replay, or no executor has announced itself)."""


# ---------------------------------------------------------------- decisions
