"""The replay metrics, exactly as the issue defines them (so that policies compare).

wait      all pending time: before the first start, plus after each stop until the restart
JCT       finish - submit
lost      GPUs x the run time whose progress was discarded, / 3600
overhead  GPUs x (notice or SIGTERM to stop, plus restart overhead), / 3600
util      busy GPU-seconds between the first and the last submission / (capacity x that span)
fairness  Armada's fairness error, sampled every 300 s while demand >= capacity
long-term among teams with unmet demand, half the summed gap between each one's share of their
          decayed usage (the policy's half-life) and its share of their quota weights; every
          300 s over the whole simulation, 0 while fewer than two teams wait
goodput   busy GPU-seconds neither lost nor overhead, over the same capacity x span
eta_waited  over jobs whose first start came 60 s or more after submit: the median and p90
          of |ETA at submit - start| / wait, and the share within 25%
eta       median over jobs of |ETA at submit - actual start| / max(actual wait, 60 s)
"""

from __future__ import annotations

import statistics
from typing import Any

from rota.contracts.common import TIER_ORDER

from rota_policy.sim.simulator import Simulator

__all__ = ["METRIC_KEYS", "metrics"]

METRIC_KEYS = (
    "policy", "jobs", "completed", "wall_s", "avg_jct_s", "avg_wait_s", "avg_wait_s_by_tier",
    "p50_wait_s_by_tier", "p95_wait_s_by_tier", "max_wait_s", "utilization", "goodput", "preemptions",
    "lost_gpu_hours", "preemption_overhead_gpu_hours", "fairness_error",
    "long_term_fairness_error", "eta_median_rel_error", "eta_waited_p50_rel_error",
    "eta_waited_p90_rel_error", "eta_waited_within_25pct",
)  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 1)) - 1))
    return ordered[rank]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def metrics(sim: Simulator, wall_s: float) -> dict[str, Any]:
    jobs = sim.jobs
    done = [j for j in jobs if j.finish is not None]
    waits = [j.wait for j in jobs]
    by_tier: dict[str, list[float]] = {t.value: [] for t in TIER_ORDER}
    for j in jobs:
        by_tier[j.t.tier.value].append(j.wait)
    errors = [
        abs(j.eta - j.first_start) / max(j.first_start - j.t.submit, 60.0)
        for j in jobs
        if j.eta is not None and j.first_start is not None
    ]
    waited = [
        abs(j.eta - j.first_start) / (j.first_start - j.t.submit)
        for j in jobs
        if j.eta is not None and j.first_start is not None and j.first_start - j.t.submit >= 60.0
    ]
    start, end = sim.window
    span = max(end - start, 1e-9)
    return {
        "policy": sim.policy_name,
        "jobs": len(jobs),
        "completed": len(done),
        "wall_s": round(wall_s, 2),
        "avg_jct_s": _mean([j.finish - j.t.submit for j in done if j.finish is not None]),
        "avg_wait_s": _mean(waits),
        "avg_wait_s_by_tier": {k: _mean(v) for k, v in by_tier.items()},
        "p50_wait_s_by_tier": {k: _percentile(v, 0.50) for k, v in by_tier.items()},
        "p95_wait_s_by_tier": {k: _percentile(v, 0.95) for k, v in by_tier.items()},
        "max_wait_s": max(waits, default=0.0),
        "utilization": sim.busy_gpu_s / (sim.capacity * span),
        "goodput": max(0.0, sim.busy_gpu_s - sim.lost_gpu_s - sim.overhead_gpu_s) / (sim.capacity * span),
        "preemptions": sim.preemptions,
        "lost_gpu_hours": sim.lost_gpu_s / 3600.0,
        "preemption_overhead_gpu_hours": sim.overhead_gpu_s / 3600.0,
        "fairness_error": sim.fairness.value,
        "long_term_fairness_error": sim.long_term_fairness.value,
        "eta_median_rel_error": statistics.median(errors) if errors else 0.0,
        "eta_waited_p50_rel_error": _percentile(waited, 0.50),
        "eta_waited_p90_rel_error": _percentile(waited, 0.90),
        "eta_waited_within_25pct": sum(e <= 0.25 for e in waited) / len(waited) if waited else 0.0,
    }
