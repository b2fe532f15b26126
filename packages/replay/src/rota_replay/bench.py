"""Core benchmarks: cycle time and admission throughput of `schedule`, and peak memory.

Scenarios (issue 3, §4): 1k, 10k and 100k pending jobs on 128 and 1,250 nodes of 8 GPUs, and
peak memory of one cycle with 1,000,000 pending jobs (measured in a child process, so the
figure is the whole interpreter's peak RSS, not just the policy's allocations).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from rota.contracts.common import TIER_ORDER
from rota_policy import (
    Decisions,
    NodeState,
    PendingJob,
    PolicyConfig,
    RunningRun,
    Slot,
    Snapshot,
    TeamLimits,
    TeamPolicy,
    group_pending,
    schedule,
)
from rota_policy.model.layout import Layout, layout_of

__all__ = ["bench_config", "bench_snapshot", "run_core_bench"]

TEAMS = 10
SIZES = (1, 1, 1, 1, 2, 4, 8, 8, 16, 32)


def bench_config(nodes: int) -> PolicyConfig:
    quota = nodes * 8 // (TEAMS + 2)
    teams = {f"team{i}": TeamPolicy(f"team{i}", 1.0, {"gpu": TeamLimits(quota)}) for i in range(TEAMS)}
    return PolicyConfig(teams=teams)


def _pending(n: int) -> list[PendingJob]:
    jobs = []
    for i in range(n):
        gpus = SIZES[i % len(SIZES)]
        workers = max(1, gpus // 8)
        jobs.append(
            PendingJob(
                job_id=f"p{i:07d}",
                team=f"team{i % TEAMS}",
                tier=TIER_ORDER[i % 3],
                flavor="gpu",
                workers=workers,
                gpus_per_worker=gpus // workers,
                submitted_at=float(i),
                runtime_estimate_s=3600.0 * (1 + i % 8),
                resumable=i % 5 != 4,
            )
        )
    return jobs


def bench_snapshot(
    nodes: int, pending: int, *, full: bool, explain: frozenset[str] | None, layout: Layout | None = None
) -> Snapshot:
    """An empty cluster (`full=False`: measures admissions) or one full of running work;
    `layout` is the nodes' layout as a caller keeps it between cycles (`Snapshot.layout`)."""
    states = []
    running = []
    for i in range(nodes):
        name = f"n{i}"
        if full:
            states.append(NodeState(name, "gpu", f"r{i // 8}", 8, ()))
            running.append(
                RunningRun(
                    run_id=f"r{i}", job_id=f"rj{i}", team=f"team{i % TEAMS}", tier=TIER_ORDER[i % 3],
                    flavor="gpu", placement=(Slot(0, name, tuple(range(8))),), gpus=8,
                    started_at=0.0, last_checkpoint_at=0.0, resumable=i % 5 != 4, preemptions=0,
                    expected_end=3600.0 * (1 + i % 24), checkpoint_interval_s=1800.0,
                )
            )  # fmt: skip
        else:
            states.append(NodeState(name, "gpu", f"r{i // 8}", 8, tuple(range(8))))
    usage = {f"team{i}": 1000.0 * (i + 1) for i in range(TEAMS)}
    return Snapshot(
        tuple(states), tuple(running), group_pending(_pending(pending)), usage, (), explain, layout=layout
    )


def _time(snap: Snapshot, now: float, config: PolicyConfig, repeat: int) -> tuple[float, Decisions]:
    best, out = float("inf"), Decisions()
    for _ in range(repeat):
        started = time.perf_counter()
        out = schedule(snap, now, config)
        best = min(best, time.perf_counter() - started)
    return best, out


def run_core_bench(
    *, quick: bool = False, memory: bool = True, throughput: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    results: list[dict[str, Any]] = []
    for nodes in (128, 1250) if throughput else ():
        config = bench_config(nodes)
        # As the simulator does, keep the layout from one cycle to the next.
        kept = layout_of(bench_snapshot(nodes, 0, full=False, explain=frozenset()).nodes)
        for pending in sizes:
            repeat = 3 if pending <= 10_000 else 1
            empty = bench_snapshot(nodes, pending, full=False, explain=frozenset(), layout=kept)
            admit_s, decisions = _time(empty, 10.0 * pending, config, repeat)
            admitted = len(decisions.admissions)
            full_quiet = bench_snapshot(nodes, pending, full=True, explain=frozenset(), layout=kept)
            quiet_s, _ = _time(full_quiet, 10.0 * pending, config, repeat)
            full_all = bench_snapshot(nodes, pending, full=True, explain=None, layout=kept)
            explain_s, explained = _time(full_all, 10.0 * pending, config, 1)
            row = {
                "nodes": nodes,
                "gpus": nodes * 8,
                "pending": pending,
                "admissions": admitted,
                "admit_cycle_s": round(admit_s, 4),
                "admissions_per_s": round(admitted / admit_s) if admit_s > 0 else None,
                "full_cluster_cycle_s": round(quiet_s, 4),
                "full_cluster_explain_all_cycle_s": round(explain_s, 4),
                "explained": len(explained.pending),
                "plans": len(explained.plans),
            }
            log(json.dumps(row))
            results.append(row)
    out: dict[str, Any] = {"core": results} if throughput else {}
    if memory:
        pending = 200_000 if quick else 1_000_000
        out["memory"] = _memory(pending, log)
    return out


def _memory(pending: int, log: Callable[[str], None]) -> dict[str, Any]:
    code = f"from rota_replay.bench import _memory_child; _memory_child({pending})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    log(json.dumps(row))
    return row


def _memory_child(pending: int) -> None:
    """Builds a 1,250-node snapshot with `pending` jobs and runs one full cycle (explain all)."""
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    config = bench_config(1250)
    started = time.perf_counter()
    snap = bench_snapshot(1250, pending, full=True, explain=None)
    built = time.perf_counter()
    decisions = schedule(snap, 10.0 * pending, config)
    done = time.perf_counter()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "pending": pending,
                "nodes": 1250,
                "peak_rss_mb": round(peak_kib / 1024, 1),
                "baseline_rss_mb": round(base / 1024, 1),
                "snapshot_build_s": round(built - started, 2),
                "cycle_s": round(done - built, 2),
                "explained": len(decisions.pending),
            }
        )
    )


if __name__ == "__main__":
    print(json.dumps(run_core_bench(), indent=2))
