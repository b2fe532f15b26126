"""The Philly trace, enriched by the fixed rule in `shared/data/philly/README.md`.

The rule is applied exactly, so that replays of other months in the same format compare:
  1. drop rows with num_gpus < 1 or duration <= 0; stable sort by timestamp; number k = 0, 1, ...
  2. submit = seconds since the first kept row; team = user = cluster
  3. tier by k % 10: 0 production; 7, 8, 9 experiment; otherwise training
  4. workers = ceil(num_gpus / 8), gpus_per_worker = num_gpus / workers; one flavor, `gpu`
  5. resumable when k % 5 != 4: checkpoint every 1,800 s of run time, save on request in 60 s,
     resume costs 60 s of restart; a job that is not resumable loses everything when stopped
  6. declared runtime = 2 x duration, rounded up to a whole hour
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rota.contracts.common import Tier

__all__ = [
    "CHECKPOINT_INTERVAL_S",
    "CHECKPOINT_SAVE_S",
    "FLAVOR",
    "RESTART_S",
    "TraceJob",
    "load_philly",
    "scenario_quotas",
]

FLAVOR = "gpu"
CHECKPOINT_INTERVAL_S = 1800.0
CHECKPOINT_SAVE_S = 60.0
RESTART_S = 60.0
GPUS_PER_NODE = 8
MIN_JOBS_FOR_QUOTA = 10


@dataclass(frozen=True, slots=True)
class TraceJob:
    k: int
    job_id: str
    submit: float
    duration: float
    gpus: int
    """workers x gpus_per_worker: what the job holds (equal to num_gpus in the Philly trace)."""
    team: str
    user: str
    tier: Tier
    workers: int
    gpus_per_worker: int
    resumable: bool
    declared_runtime_s: float
    flavors: tuple[str, ...] = (FLAVOR,)
    """The flavors it accepts, the preferred first; empty: any flavor of the cluster."""
    share: int = 0
    """Quarters (1-3) of one GPU it asks for, a GPU share (DECISIONS 66), with one worker of one
    GPU; 0: it holds `gpus` whole GPUs."""
    workers_min: int = 0
    """An elastic gang's fewest workers, `workers` its most (DECISIONS 72); 0: a rigid gang.
    `duration` is its run time at `workers`, the size the trace recorded."""

    @property
    def demand(self) -> float:
        """What it uses: `gpus`, or its share as a fraction of one GPU (busy time, quota, usage,
        lost work)."""
        return self.share / 4 if self.share else self.gpus

    @property
    def elastic(self) -> bool:
        return 0 < self.workers_min < self.workers


def _tier(k: int) -> Tier:
    rest = k % 10
    if rest == 0:
        return Tier.production
    if rest >= 7:
        return Tier.experiment
    return Tier.training


def load_philly(path: Path) -> list[TraceJob]:
    rows: list[tuple[datetime, float, int, str]] = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            gpus = float(row["num_gpus"])
            duration = float(row["duration"])
            if gpus < 1 or duration <= 0:
                continue
            rows.append((datetime.fromisoformat(row["timestamp"]), duration, int(gpus), row["cluster"]))
    rows.sort(key=lambda r: r[0])  # stable: ties keep file order
    if not rows:
        return []
    origin = rows[0][0]
    jobs: list[TraceJob] = []
    for k, (stamp, duration, num_gpus, cluster) in enumerate(rows):
        workers = math.ceil(num_gpus / GPUS_PER_NODE)
        # The rule divides exactly for every size in the trace; a size that does not divide
        # rounds up per worker rather than invent a fractional GPU.
        per_worker = math.ceil(num_gpus / workers)
        jobs.append(
            TraceJob(
                k=k,
                job_id=f"j{k:06d}",
                submit=(stamp - origin).total_seconds(),
                duration=duration,
                gpus=workers * per_worker,
                team=cluster,
                user=cluster,
                tier=_tier(k),
                workers=workers,
                gpus_per_worker=per_worker,
                resumable=k % 5 != 4,
                declared_runtime_s=math.ceil(2 * duration / 3600.0) * 3600.0,
            )
        )
    return jobs


def scenario_quotas(jobs: list[TraceJob], capacity: int) -> dict[str, int]:
    """floor(C x the team's share of GPU-hours / 8) x 8, at least 8; 0 under 10 jobs."""
    gpu_time: dict[str, float] = {}
    count: Counter[str] = Counter()
    for job in jobs:
        gpu_time[job.team] = gpu_time.get(job.team, 0.0) + job.duration * job.gpus
        count[job.team] += 1
    total = sum(gpu_time.values())
    quotas: dict[str, int] = {}
    for team in sorted(gpu_time):
        if count[team] < MIN_JOBS_FOR_QUOTA:
            quotas[team] = 0
            continue
        share = gpu_time[team] / total
        quotas[team] = max(GPUS_PER_NODE, math.floor(capacity * share / GPUS_PER_NODE) * GPUS_PER_NODE)
    return quotas
