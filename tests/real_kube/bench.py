"""Rota and the real Kueue on the same KWOK control plane, one at a time, on the same jobs:

    uv run python -m tests.real_kube.bench run --scheduler rota|kueue|both --trace T.csv --nodes N

The trace is a rota-csv file (`rota replay --format rota-csv`; `python -m
tests.real_kube.bench trace ...` writes a synthetic one). Each run gets a fresh cluster of N
KWOK nodes x 8 GPUs (one flavor, `h100`, the nodes split over two zones) and submits each job
at its trace time divided by `--scale` (60: a trace hour is a wall minute): for Kueue, as an
Indexed Job in the team's LocalQueue; for Rota, through its submission stream, run by its
`kubernetes` executor. Each pod's runtime is the trace's duration / scale, carried by the KWOK
stage `pod-run-for`. The figures (see `bench_observe`) are printed as a table and as JSON.

Both sides get the same client limits: Kueue's client, the controller-manager's and the
scheduler's are raised to QPS 100 / burst 200 (Rota's executor, kubernetes-asyncio, has no
client-side limit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rota.config.loader import parse_config
from rota.config.model import RotaConfig
from rota.k8s.kueue import kueue_job, kueue_objects
from rota_replay.rotacsv import HEADER, load_rota_csv

from tests.real_kube import bench_observe as obs
from tests.real_kube import bench_shapes
from tests.real_kube.bench_rota import RotaSide
from tests.real_kube.cluster import GpuNode, KubeCluster, start_cluster
from tests.real_kube.kueue import BURST, QPS, start_kueue

NAMESPACE = "bench"
FLAVOR = "h100"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
CHECKPOINT_S = 1800.0  # the trace's checkpoint interval (rota-csv: every 1,800 s of run time)
# Each component's first --extra-args pair before any second one: kwokctl v0.8.0 indexes its
# component patches by the flag's position, and panics when the two differ.
CLIENT_LIMITS = (f"kube-controller-manager=kube-api-qps={QPS}", f"kube-scheduler=kube-api-qps={QPS}",
                 f"kube-controller-manager=kube-api-burst={BURST}", f"kube-scheduler=kube-api-burst={BURST}")


def bench_nodes(n: int) -> list[GpuNode]:
    return [GpuNode(f"gpu-{i}", 8, PRODUCT, f"zone-{i % 2}") for i in range(n)]


def bench_config(nodes: list[GpuNode], teams: list[str], *, scale: float,
                 borrowing_limit: int | None = None) -> RotaConfig:
    """The nodes, one flavor, the trace's teams with equal quotas and the borrowing limit
    (none by default); Rota's minimum runtime and notice grace scaled like the trace."""
    total = 8 * len(nodes)
    quota = total // len(teams)
    team: dict[str, Any] = {"quota": {FLAVOR: quota}}
    if borrowing_limit is not None:
        team["borrowing_limit"] = {FLAVOR: borrowing_limit}
    grace = max(1.0, 60 / scale)
    return parse_config({
        "cluster": {"flavors": [{"name": FLAVOR}],
                    "nodes": [{"name": n.name, "flavor": FLAVOR, "gpus": n.gpus, "rack": n.zone} for n in nodes]},
        "queues": {t: {"preemption_grace_s": grace} for t in ("production", "training", "experiment")},
        "teams": {t: dict(team) for t in teams},
        "preemption": {"min_runtime_s": round(300 / scale, 3), "default_grace_s": grace},
    })


def load_trace(path: Path, scale: float) -> list[obs.BenchJob]:
    return [obs.BenchJob(job_id=j.job_id, submit_s=j.submit / scale, runtime_s=j.duration / scale,
                         workers=j.workers, gpus_per_worker=j.gpus_per_worker, tier=j.tier.value,
                         team=j.team, resumable=j.resumable)
            for j in sorted(load_rota_csv(path), key=lambda j: j.submit)]


def synthetic_trace(out: Path, *, jobs: int, teams: int, seed: int, span_s: float = 3600.0,
                    resumable: float = 0.7) -> Path:
    """A rota-csv trace: jobs of 1, 4, 8 and 2x8 GPUs over `span_s`, 5 to 30 minutes long,
    tiers 20/50/30 % production/training/experiment, a `resumable` share of them resumable;
    the last team submits twice as often as each other one (so it borrows, and is reclaimed
    from). The same seed gives the same jobs whatever `resumable` is."""
    rng = random.Random(seed)
    names = [f"team-{chr(ord('a') + i)}" for i in range(teams)]
    weights = [1.0] * (teams - 1) + [2.0]
    shapes = [(1, 1), (1, 4), (1, 8), (2, 8)]
    rows = [",".join(HEADER)]
    for i in range(jobs):
        workers, gpus = rng.choices(shapes, weights=[4, 3, 2, 1])[0]
        tier = rng.choices(["production", "training", "experiment"], weights=[2, 5, 3])[0]
        rows.append(",".join([f"j{i:05d}", f"{rng.uniform(0, span_s):.1f}", f"{rng.uniform(300, 1800):.0f}",
                              str(workers), str(gpus), FLAVOR, tier, rng.choices(names, weights)[0],
                              "true" if rng.random() < resumable else "false"]))
    out.write_text("\n".join(rows) + "\n")
    return out


def runtime_annotations(job: obs.BenchJob) -> dict[str, str]:
    return {obs.JOB_ANNOTATION: job.job_id, obs.RUNTIME_ANNOTATION: f"{job.runtime_s:.3f}s"}


def k8s_name(job_id: str) -> str:
    return "bench-" + "".join(c if c.isalnum() else "-" for c in job_id.lower())[:50]


@contextlib.contextmanager
def fresh_cluster(workdir: Path, nodes: list[GpuNode]) -> Iterator[KubeCluster]:
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    policy = workdir / "audit-policy.yaml"
    policy.write_text(obs.AUDIT_POLICY)
    cluster = start_cluster(workdir / "kwok", name="bench", nodes=nodes, extra_args=CLIENT_LIMITS,
                            audit_policy=policy)
    try:
        cluster.namespace(NAMESPACE)
        yield cluster
    finally:
        cluster.stop()


def audit_log(cluster: KubeCluster) -> Path:
    return cluster.workdir / "clusters" / cluster.name / "logs" / "audit.log"


async def submit_kueue(api: Any, jobs: list[obs.BenchJob], start: float, submitted: dict[str, float]) -> None:
    from kubernetes_asyncio import client

    batch = client.BatchV1Api(api)

    async def one(job: obs.BenchJob) -> None:
        await asyncio.sleep(max(0.0, start + job.submit_s - time.monotonic()))
        from rota.contracts.common import Tier

        body = kueue_job(name=k8s_name(job.job_id), namespace=NAMESPACE, team=job.team, tier=Tier(job.tier),
                         workers=job.workers, gpus_per_worker=job.gpus_per_worker,
                         pod_annotations=runtime_annotations(job))
        submitted[job.job_id] = time.monotonic()
        await batch.create_namespaced_job(NAMESPACE, body)

    await asyncio.gather(*(one(j) for j in jobs))


async def drive(cluster: KubeCluster, jobs: list[obs.BenchJob], submit: Any, *, timeout_s: float,
                say: Any) -> tuple[dict[str, float], obs.PodWatch, float, float]:
    """Watch pods, submit at trace times, wait until every job is done (or the timeout)."""
    from rota.k8s.api import kube_client

    api = await kube_client(cluster.kubeconfig, None)
    api.user_agent = "rota-bench"
    watcher = obs.PodWatch(NAMESPACE)
    watching = asyncio.create_task(watcher.run(api))
    submitted: dict[str, float] = {}
    start = time.monotonic()
    try:
        await submit(api, jobs, start, submitted)
        say(f"submitted {len(jobs)} jobs in {time.monotonic() - start:.1f} s")
        deadline = start + timeout_s
        by_id = {j.job_id: j for j in jobs}
        last_said = 0.0
        while time.monotonic() < deadline:
            # One pass over the pods (a shape run has tens of thousands of them).
            succeeded = Counter(p.job_id for p in watcher.pods.values() if p.succeeded)
            finished = sum(1 for jid, n in succeeded.items() if jid in by_id and n >= by_id[jid].workers)
            if finished == len(jobs):
                break
            if time.monotonic() - last_said > 15:
                say(f"{finished}/{len(jobs)} jobs done after {time.monotonic() - start:.0f} s")
                last_said = time.monotonic()
            watcher.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.changed.wait(), 2)
        end = time.monotonic()
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await api.close()
    return submitted, watcher, start, end


def run_one(scheduler: str, jobs: list[obs.BenchJob], nodes: list[GpuNode], config: RotaConfig, *,
            workdir: Path, scale: float, timeout_s: float, say: Any,
            borrow_within_cohort: bool = True) -> dict[str, Any]:
    with fresh_cluster(workdir / scheduler, nodes) as cluster:
        control_plane = obs.processes(markers=[str(cluster.workdir)])
        side_pids: list[int] = []
        kueue = rota = None
        try:
            if scheduler == "kueue":
                kueue = start_kueue(cluster, workdir / scheduler / "kueue")
                cluster.apply(kueue_objects(config, NAMESPACE, borrow_within_cohort=borrow_within_cohort))
                side_pids = [kueue.process.pid]
                submit: Any = submit_kueue
            else:
                rota = RotaSide(workdir / scheduler / "rota", config, cluster.kubeconfig, NAMESPACE, say=say)
                rota.start()
                side_pids = rota.pids()
                submit = rota.submitter(runtime_annotations)
            say(f"{scheduler}: ready; {len(jobs)} jobs on {len(nodes)} nodes")
            procs = control_plane + obs.processes(pids=side_pids)
            cpu_before = obs.cpu_seconds(procs)
            offset = obs.audit_offset(audit_log(cluster))
            submitted, watcher, start, end = asyncio.run(drive(cluster, jobs, submit, timeout_s=timeout_s, say=say))
            cpu_after = obs.cpu_seconds(procs)
            requests = obs.requests_by_agent(audit_log(cluster), offset)
        finally:
            if kueue is not None:
                kueue.stop()
            if rota is not None:
                rota.stop()
    by_job: dict[str, list[obs.PodSeen]] = {}
    for pod in watcher.pods.values():
        by_job.setdefault(pod.job_id, []).append(pod)
    figures = {j.job_id: obs.job_figures(j, by_job.get(j.job_id, []), submitted.get(j.job_id, start), end=end,
                                         checkpoint_s=CHECKPOINT_S / scale) for j in jobs}
    n = len(jobs)
    cpu = {name: round((cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0)) / n, 4) for name in sorted(cpu_after)}
    result = {"scheduler": scheduler, "nodes": len(nodes), "gpus": 8 * len(nodes), "scale": scale,
              **obs.summary(jobs, figures, start=start, gpus=8 * len(nodes), scale=scale),
              "api_requests_per_job": {agent: round(c / n, 2) for agent, c in requests.most_common()},
              "cpu_s_per_job": cpu,
              "client_limits": {"qps": QPS, "burst": BURST},
              "jobs_detail": {jid: {"submitted": round(f.submitted - start, 3),
                                    "admitted": None if f.admitted is None else round(f.admitted - start, 3),
                                    "all_running": None if f.all_running is None else round(f.all_running - start, 3),
                                    "completed": None if f.completed is None else round(f.completed - start, 3),
                                    "preemptions": f.preemptions} for jid, f in figures.items()}}
    return result


def table(results: list[dict[str, Any]]) -> str:
    rows: list[tuple[str, list[str]]] = []

    def flat(prefix: str, value: Any, out: dict[str, str]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                flat(f"{prefix}.{k}" if prefix else k, v, out)
        else:
            out[prefix] = "-" if value is None else str(value)

    flats = []
    for r in results:
        out: dict[str, str] = {}
        flat("", {k: v for k, v in r.items() if k != "jobs_detail"}, out)
        flats.append(out)
    keys = list(dict.fromkeys(k for f in flats for k in f))
    rows = [(k, [f.get(k, "-") for f in flats]) for k in keys]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  " + "  ".join(f"{v:>14}" for v in vals) for k, vals in rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.real_kube.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    t = sub.add_parser("trace", help="write a synthetic rota-csv trace")
    t.add_argument("--jobs", type=int, default=200)
    t.add_argument("--teams", type=int, default=2)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--span-s", type=float, default=3600.0, help="submissions over this many trace seconds")
    t.add_argument("--resumable", type=float, default=0.7, help="the share of resumable jobs")
    t.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("shape", help="write one of Kueue's performance-test shapes as a trace (bench_shapes)")
    s.add_argument("--shape", choices=bench_shapes.SHAPES, required=True)
    s.add_argument("--jobs", type=int, default=bench_shapes.BASELINE_JOBS)
    s.add_argument("--scale", type=float, default=60.0, help="trace seconds per wall second, as `run --scale`")
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run", help="run the trace on a fresh KWOK cluster per scheduler")
    r.add_argument("--scheduler", choices=["rota", "kueue", "both"], default="both")
    r.add_argument("--trace", type=Path, required=True)
    r.add_argument("--nodes", type=int, default=8)
    r.add_argument("--scale", type=float, default=60.0, help="trace seconds per wall second")
    r.add_argument("--timeout-s", type=float, default=1800.0)
    r.add_argument("--workdir", type=Path, default=Path("/tmp/rota-kube-bench"))
    r.add_argument("--borrowing-limit", type=int, help="every team's borrowing limit, GPUs (default: none)")
    r.add_argument("--no-borrow-within-cohort", action="store_true",
                   help="Kueue's ClusterQueues without borrowWithinCohort (as the `kueue` replay baseline)")
    r.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.command == "trace":
        synthetic_trace(args.out, jobs=args.jobs, teams=args.teams, seed=args.seed, span_s=args.span_s,
                        resumable=args.resumable)
        print(json.dumps({"trace": str(args.out), "jobs": args.jobs}))
        return 0
    if args.command == "shape":
        count = bench_shapes.shape_trace(args.out, shape=args.shape, jobs=args.jobs, scale=args.scale)
        print(json.dumps({"trace": str(args.out), "shape": args.shape, "jobs": count}))
        return 0
    if args.command != "run":
        parser.print_help()
        return 2
    jobs = load_trace(args.trace, args.scale)
    nodes = bench_nodes(args.nodes)
    config = bench_config(nodes, sorted({j.team for j in jobs}), scale=args.scale,
                          borrowing_limit=args.borrowing_limit)

    def say(text: str) -> None:
        print(f"bench: {text}", file=sys.stderr, flush=True)

    results = []
    for scheduler in (["rota", "kueue"] if args.scheduler == "both" else [args.scheduler]):
        results.append(run_one(scheduler, jobs, nodes, config, workdir=args.workdir, scale=args.scale,
                               timeout_s=args.timeout_s, say=say,
                               borrow_within_cohort=not args.no_borrow_within_cohort))
    print(table(results), file=sys.stderr)
    text = json.dumps({"benchmark": "kube", "trace": str(args.trace), "results": results}, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
