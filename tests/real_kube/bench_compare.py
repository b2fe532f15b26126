"""Does Rota's `kueue` replay baseline decide as the real Kueue does? One trace, job by job:

    uv run python -m tests.real_kube.bench_compare --trace T.csv --bench-json K.json

K.json is the output of `python -m tests.real_kube.bench run --scheduler kueue
--no-borrow-within-cohort` on the same trace (the baseline models reclaimWithinCohort and
withinClusterQueue, not borrowWithinCohort). The replay runs the same trace on the same
cluster and quotas (`bench.bench_config`), in trace seconds; the real run's times are scaled
back by its `scale`. A job decided the same when both preempted it or neither did, and its
first start differs by at most `--tolerance-s` trace seconds (the harness's noise: a second of
wall time is a trace minute at scale 60; `harness_latency_s` says what it adds to a start
nothing delays). Admission order: the share of job pairs the two put
in the same order of first start.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

from rota_policy import policy_config_from
from rota_replay.replay import nodes_from, team_quotas
from rota_replay.rotacsv import load_rota_csv
from rota_replay.simulator import Simulator

from tests.real_kube import bench


def replayed(trace: Path, nodes: int, scale: float) -> dict[str, dict[str, Any]]:
    jobs = load_rota_csv(trace)
    config = bench.bench_config(bench.bench_nodes(nodes), sorted({j.team for j in jobs}), scale=scale)
    sim = Simulator(jobs, nodes_from(config), policy_config_from(config), "kueue", quotas=team_quotas(config))
    sim.run()
    return {j.t.job_id: {"submit": j.t.submit, "start": j.first_start, "preemptions": j.preemptions}
            for j in sim.jobs}


def harness_latency(rows: dict[str, dict[str, Any]], sim: dict[str, dict[str, Any]]) -> float | None:
    """Median submit -> all Running, in trace seconds, of the real run's jobs that the replay
    started at once: what the harness adds to a start that nothing delays."""
    at_once = sorted(r["kueue_start_s"] - sim[j]["submit"] for j, r in rows.items()
                     if r["kueue_start_s"] is not None and sim[j]["start"] == sim[j]["submit"])
    return round(at_once[len(at_once) // 2], 1) if at_once else None


def compare(real: dict[str, Any], sim: dict[str, dict[str, Any]], *, tolerance_s: float) -> dict[str, Any]:
    scale = real["scale"]
    detail = real["jobs_detail"]
    rows = {}
    for job_id, s in sim.items():
        d = detail.get(job_id) or {}
        start = None if d.get("all_running") is None else round(d["all_running"] * scale, 1)
        same_preempt = (s["preemptions"] > 0) == (d.get("preemptions", 0) > 0)
        close = start is not None and s["start"] is not None and abs(start - s["start"]) <= tolerance_s
        rows[job_id] = {"kueue_start_s": start, "replay_start_s": None if s["start"] is None else round(s["start"], 1),
                        "kueue_preemptions": d.get("preemptions"), "replay_preemptions": s["preemptions"],
                        "same": bool(same_preempt and close)}
    started = [j for j, r in rows.items() if r["kueue_start_s"] is not None and r["replay_start_s"] is not None]
    pairs = same = 0
    for a, b in combinations(started, 2):
        ra, rb = rows[a], rows[b]
        real_order = _order(ra["kueue_start_s"] - rb["kueue_start_s"], tolerance_s)
        sim_order = _order(ra["replay_start_s"] - rb["replay_start_s"], tolerance_s)
        if real_order == sim_order == 0:
            continue  # together in both, within the noise
        pairs += 1
        same += real_order == sim_order
    return {
        "jobs": len(rows), "decided_same": sum(r["same"] for r in rows.values()),
        "tolerance_s": tolerance_s, "harness_latency_s": harness_latency(rows, sim),
        "same_start": sum(1 for r in rows.values() if r["kueue_start_s"] is not None and r["replay_start_s"] is not None
                          and abs(r["kueue_start_s"] - r["replay_start_s"]) <= tolerance_s),
        "same_preempted_or_not": sum(1 for r in rows.values()
                                     if ((r["kueue_preemptions"] or 0) > 0) == (r["replay_preemptions"] > 0)),
        "preempted": {"kueue": sorted(j for j, r in rows.items() if (r["kueue_preemptions"] or 0) > 0),
                      "replay": sorted(j for j, r in rows.items() if r["replay_preemptions"] > 0)},
        "admission_order_pairs_same": round(same / pairs, 4) if pairs else None,
        "jobs_detail": rows,
    }


def _order(difference: float, tolerance_s: float) -> int:
    """-1, 0 or 1: before, together within the tolerance, after."""
    return 0 if abs(difference) <= tolerance_s else (1 if difference > 0 else -1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.real_kube.bench_compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--bench-json", type=Path, required=True)
    parser.add_argument("--tolerance-s", type=float, default=300.0,
                        help="trace seconds; 300 is 5 wall seconds at scale 60")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    runs = json.loads(args.bench_json.read_text())["results"]
    real = next(r for r in runs if r["scheduler"] == "kueue")
    result = compare(real, replayed(args.trace, real["nodes"], real["scale"]), tolerance_s=args.tolerance_s)
    text = json.dumps(result, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    summary = {k: v for k, v in result.items() if k != "jobs_detail"}
    print(json.dumps(summary, indent=1), file=sys.stderr)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
