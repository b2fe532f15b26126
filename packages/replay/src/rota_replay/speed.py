"""How fast a replay decides: CPU per job, and per cycle at each queue depth.

Issue 16 asks that the replay with every scheduling feature stay within 1.3x of the
single-flavor replay, per job. Two replays answer to that name, and both are measured:
- the same jobs on the same cluster, each job on its first flavor, its shares whole and its
  elastic gangs rigid (every feature off: what the features cost);
- philly-768, the Philly slice on one flavor of the same 768 GPUs (what the scenario costs too).

Each comparison runs its two replays side by side, one process each, so that both see the
machine as it is in the same minutes.

A cycle's cost grows with the jobs waiting in it, and a heterogeneous cluster of the same size
keeps more jobs waiting (a job pinned to one flavor waits for that flavor). The cost per cycle
at each queue depth tells the two apart: equal costs at equal depths mean the replay is no
slower per unit of work, only given more of it.
"""

from __future__ import annotations

import sys
import time
from bisect import bisect_right
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from rota.config import load_config
from rota.config.model import RotaConfig
from rota_policy.model.config import PolicyConfig, policy_config_from
from rota_policy.model.decisions import Decisions
from rota_policy.model.snapshot import Snapshot

from rota_replay.hetero import hetero_jobs, hetero_shares, whole_gpus
from rota_replay.replay import find_scenario, freeze_heap, nodes_from, team_quotas
from rota_replay.rotacsv import load_rota_csv, write_rota_csv
from rota_replay.simulator import Simulator
from rota_replay.workload import TraceJob, load_philly

__all__ = ["DEPTHS", "TARGET", "ReplaySpeed", "measure_replay", "replay_speed"]

TARGET = 1.3
"""The replay with every feature, per job, against the single-flavor replay (issue 16)."""
FEATURES_SCENARIO = "philly-hetero-blocks"
SINGLE_SCENARIO = "philly-768"

DEPTHS = (10, 100, 1000)
"""Upper bounds (exclusive) of the queue-depth buckets: pending jobs in a cycle's snapshot."""


BUCKETS = ("0-9", "10-99", "100-999", "1000+")
"""The buckets' names, shallowest first: one per bound of `DEPTHS`, and one past the last."""


def _bucket(depth: int) -> str:
    return BUCKETS[bisect_right(DEPTHS, depth)]


@dataclass
class ReplaySpeed:
    """One replay's CPU, in all and per cycle by queue depth."""

    jobs: int
    cycles: int = 0
    cpu_s: float = 0.0
    policy_cpu_s: float = 0.0
    by_depth: dict[str, list[float]] = field(default_factory=dict)
    """Per depth bucket: [cycles, policy CPU seconds]."""

    def figures(self) -> dict[str, Any]:
        by_depth = {}
        for bucket in BUCKETS:
            if bucket in self.by_depth:
                n, spent = self.by_depth[bucket]
                by_depth[bucket] = {"cycles": int(n), "mean_ms": round(1e3 * spent / n, 4)}
        return {
            "jobs": self.jobs,
            "cycles": self.cycles,
            "cpu_s": round(self.cpu_s, 2),
            "cpu_ms_per_job": round(1e3 * self.cpu_s / self.jobs, 4),
            "policy_cpu_s": round(self.policy_cpu_s, 2),
            "cycle_ms_by_depth": by_depth,
        }


def measure_replay(
    trace: list[TraceJob],
    config: RotaConfig,
    policy_config: PolicyConfig,
    *,
    first_flavor: bool = False,
    rigid: bool = False,
    progress: Callable[[float], None] | None = None,
) -> ReplaySpeed:
    """Replay `trace` with Rota's policy and time it: the whole replay's CPU, and each cycle's
    policy CPU by the number of jobs pending in its snapshot."""
    speed = ReplaySpeed(jobs=len(trace))
    sim = Simulator(trace, nodes_from(config), policy_config, "rota", quotas=team_quotas(config),
                    progress=progress, first_flavor=first_flavor, rigid=rigid)
    decide = sim.policy
    by_depth = speed.by_depth

    def timed(snapshot: Snapshot, now: float, cfg: PolicyConfig) -> Decisions:
        started = time.process_time()
        decisions = decide(snapshot, now, cfg)
        spent = time.process_time() - started
        entry = by_depth.setdefault(_bucket(sum(len(q.jobs) for q in snapshot.pending)), [0.0, 0.0])
        entry[0] += 1
        entry[1] += spent
        return decisions

    sim.policy = timed
    started = time.process_time()
    sim.run()
    speed.cpu_s = time.process_time() - started
    speed.cycles = sim.cycles
    speed.policy_cpu_s = sum(spent for _, spent in by_depth.values())
    return speed


PAIRS = (("all_features", "same_jobs_one_flavor"), ("all_features", "philly_768"))
"""Each comparison runs as two processes side by side: this machine's speed drifts from minute
to minute, and replays run one after another gave ratios from 1.22 to 1.48 for the same code."""


def replay_speed(trace: Path, *, jobs: int | None = None, log: Callable[[str], None]) -> dict[str, Any]:
    """The replays of the Philly jobs in `trace` (its first `jobs`, if given), pair by pair, and
    their ratios (see the module's docstring)."""
    pairs = []
    context = get_context("spawn")  # a fresh interpreter each: no state shared with this one
    for pair in PAIRS:
        log(f"replaying {' and '.join(pair)} side by side")
        with ProcessPoolExecutor(max_workers=len(pair), mp_context=context) as pool:
            futures = [pool.submit(_timed_replay, name, trace, jobs) for name in pair]
            figures = dict(zip(pair, (f.result() for f in futures), strict=True))
        for name, replay in figures.items():
            log(f"{name}: {replay['cpu_s']:.1f} s of CPU, {replay['cpu_ms_per_job']:.3f} ms per job")
        pairs.append({**figures, **_ratios(figures, *pair)})
    features_off, single = pairs
    return {
        "target": TARGET,
        "all_features_vs_same_jobs_one_flavor": features_off["per_job"],
        "all_features_vs_philly_768": single["per_job"],
        "cycle_cost_vs_philly_768_by_depth": single["cycle_cost_by_depth"],
        "pairs": pairs,
    }


def _timed_replay(name: str, trace: Path, limit: int | None) -> dict[str, Any]:
    """One replay of the three, in a process of its own (`replay_speed`)."""
    philly = load_philly(trace)[:limit]
    if name == "philly_768":
        jobs, config, features_off = philly, load_config(find_scenario(SINGLE_SCENARIO)), False
    else:
        featured = hetero_shares(hetero_jobs(philly, elastic=True))
        with TemporaryDirectory() as tmp:  # as `rota replay --format rota-csv` reads them
            path = Path(tmp) / "hetero-all.csv"
            write_rota_csv(featured, path)
            featured = load_rota_csv(path)
        features_off = name == "same_jobs_one_flavor"
        jobs = whole_gpus(featured) if features_off else featured
        config = load_config(find_scenario(FEATURES_SCENARIO))
    freeze_heap()  # as `rota replay` does
    speed = measure_replay(jobs, config, policy_config_from(config), first_flavor=features_off,
                           rigid=features_off, progress=_tenths(name, _to_stderr))
    return speed.figures()


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ratios(figures: dict[str, Any], mine: str, other: str) -> dict[str, Any]:
    """`mine` against `other`: CPU per job, and policy CPU per cycle at each queue depth."""
    ours, theirs = figures[mine]["cycle_ms_by_depth"], figures[other]["cycle_ms_by_depth"]
    return {
        "per_job": round(figures[mine]["cpu_ms_per_job"] / figures[other]["cpu_ms_per_job"], 3),
        "cycle_cost_by_depth": {
            bucket: round(ours[bucket]["mean_ms"] / theirs[bucket]["mean_ms"], 3)
            for bucket in ours if bucket in theirs
        },
    }


def _tenths(name: str, log: Callable[[str], None]) -> Callable[[float], None]:
    """Progress every tenth of the jobs submitted."""
    said = [0]

    def progress(fraction: float) -> None:
        tenth = int(fraction * 10)
        if tenth > said[0]:
            said[0] = tenth
            log(f"{name}: {10 * tenth}% of jobs submitted")

    return progress
