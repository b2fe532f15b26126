"""Workload shapes modelled on Kueue's own scheduler performance test
(sigs.k8s.io/kueue test/performance/scheduler, the `baseline` generator config), as rota-csv
traces for the benchmark harness:

    uv run python -m tests.real_kube.bench shape --shape small|mixed --jobs N --out T.csv
    uv run python -m tests.real_kube.bench run --trace T.csv --nodes 75 --borrowing-limit 100

Kueue's baseline: 5 cohorts of 6 ClusterQueues, each with a nominal quota of 20 and a
borrowing limit of 100, `reclaimWithinCohort: Any`, `withinClusterQueue: LowerPriority`; into
each queue 350 `small` workloads (request 1, priority 50, run 200 ms, one every 100 ms), 100
`medium` (5, priority 100, 500 ms, one every 500 ms) and 50 `large` (20, priority 200, 1 s, one
every 1.2 s): 15,000 workloads in all, each set created at its own pace from the start.

Here, with GPUs: the request is GPUs, a small job is 1 worker x 1 GPU, a medium one 1 x 5, a
large one 5 workers x 4 GPUs (no node has 20); priorities 50/100/200 are the tiers
experiment/training/production; 30 teams of 20 GPUs' quota are 600 GPUs, 75 nodes x 8. All 30
teams are one cohort (Rota has one; Kueue's five cohorts of six are not reproduced, for either
scheduler). Times are wall times x `scale` in the trace (the harness divides them back).

- `small`: `jobs` small workloads only, spread evenly over the 30 queues at the small set's pace
  (15,000 is the size of Kueue's whole baseline);
- `mixed`: the baseline's mix, each set's count scaled by `jobs` / 15,000.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rota_replay.rotacsv import HEADER

FLAVOR = "h100"
QUEUES = 30
NOMINAL_QUOTA = 20
BORROWING_LIMIT = 100
NODES = QUEUES * NOMINAL_QUOTA // 8
BASELINE_JOBS = 15_000


@dataclass(frozen=True)
class WorkloadSet:
    """One of the baseline's workload sets, per queue."""

    name: str
    count: int
    interval_ms: int
    runtime_ms: int
    tier: str  # Kueue's priority 50 / 100 / 200
    workers: int
    gpus_per_worker: int


SMALL = WorkloadSet("small", 350, 100, 200, "experiment", 1, 1)
MEDIUM = WorkloadSet("medium", 100, 500, 500, "training", 1, 5)
LARGE = WorkloadSet("large", 50, 1200, 1000, "production", 5, 4)
SHAPES = ("small", "mixed")


def team(queue: int) -> str:
    return f"team-{queue:02d}"


def workload_sets(shape: str, jobs: int) -> list[WorkloadSet]:
    """The sets of one queue for `jobs` workloads over all queues."""
    if shape == "small":
        return [WorkloadSet(SMALL.name, max(1, round(jobs / QUEUES)), SMALL.interval_ms, SMALL.runtime_ms,
                            SMALL.tier, SMALL.workers, SMALL.gpus_per_worker)]
    if shape == "mixed":
        factor = jobs / BASELINE_JOBS
        return [WorkloadSet(s.name, max(1, round(s.count * factor)), s.interval_ms, s.runtime_ms, s.tier,
                            s.workers, s.gpus_per_worker) for s in (SMALL, MEDIUM, LARGE)]
    raise ValueError(f"shape: {shape!r} is none of {', '.join(SHAPES)}")


def shape_trace(out: Path, *, shape: str, jobs: int, scale: float = 60.0) -> int:
    """Write the shape as a rota-csv trace; returns how many jobs it holds (a multiple of 30
    near `jobs`). Every job is resumable (nothing is preempted unless a scheduler does)."""
    rows = [",".join(HEADER)]
    for q in range(QUEUES):
        for s in workload_sets(shape, jobs):
            for k in range(s.count):
                submit = k * s.interval_ms / 1000 * scale
                duration = s.runtime_ms / 1000 * scale
                rows.append(",".join([f"{s.name}-{q:02d}-{k:05d}", f"{submit:.3f}", f"{duration:.3f}",
                                      str(s.workers), str(s.gpus_per_worker), FLAVOR, s.tier, team(q), "true"]))
    out.write_text("\n".join(rows) + "\n")
    return len(rows) - 1
