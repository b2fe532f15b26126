"""What the benchmark of Rota beside Kueue measures, the same way for both: a watch on the
workload namespace's pods, timed on this process's clock as events arrive (the API server's
timestamps have whole seconds only), the API server's audit log counted by user agent, and
the CPU time of the processes of each side.

Every pod of a benchmark job carries the annotation `rota.dev/bench-job` (the trace's job id),
whoever made it: Kueue's Job controller from our Job, or Rota's executor from its pod template.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import statistics
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from kubernetes_asyncio import client, watch

JOB_ANNOTATION = "rota.dev/bench-job"
RUNTIME_ANNOTATION = "rota.dev/kwok-runtime"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


@dataclass
class PodSeen:
    job_id: str
    created: float
    running: float | None = None
    ended: float | None = None
    succeeded: bool = False


@dataclass
class PodWatch:
    """Pods of the namespace, by uid, as first seen in each state (monotonic seconds)."""

    namespace: str
    pods: dict[str, PodSeen] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def see(self, kind: str, pod: dict[str, Any], now: float) -> None:
        meta = pod["metadata"]
        job_id = (meta.get("annotations") or {}).get(JOB_ANNOTATION)
        if job_id is None:
            return
        seen = self.pods.setdefault(meta["uid"], PodSeen(job_id, now))
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running" and seen.running is None:
            seen.running = now
        if seen.ended is None and (phase in ("Succeeded", "Failed") or kind == "DELETED"):
            if seen.running is None and phase == "Succeeded":
                seen.running = now
            seen.ended, seen.succeeded = now, phase == "Succeeded"
        self.changed.set()

    async def run(self, api: client.ApiClient) -> None:
        core = client.CoreV1Api(api)
        while True:
            listed = await core.list_namespaced_pod(self.namespace, _preload_content=False)
            body = json.loads(await listed.read())
            now = time.monotonic()
            for pod in body["items"]:
                self.see("ADDED", pod, now)
            w = watch.Watch()
            try:
                async for event in w.stream(core.list_namespaced_pod, self.namespace,
                                            resource_version=body["metadata"]["resourceVersion"],
                                            timeout_seconds=240, _preload_content=False):
                    raw = event["raw_object"] if isinstance(event, dict) else event
                    if raw.get("kind") == "Status":
                        break  # expired: list again
                    self.see(event["type"], raw, time.monotonic())
            except client.ApiException:
                await asyncio.sleep(0.5)
            finally:
                w.stop()


@dataclass(frozen=True)
class BenchJob:
    job_id: str
    submit_s: float  # after the run's start, already scaled
    runtime_s: float  # scaled
    workers: int
    gpus_per_worker: int
    tier: str
    team: str
    resumable: bool


@dataclass
class JobFigures:
    submitted: float
    admitted: float | None = None
    all_running: float | None = None
    completed: float | None = None
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    held_gpu_s: float = 0.0


def job_figures(job: BenchJob, pods: Iterable[PodSeen], submitted: float, *, end: float,
                checkpoint_s: float) -> JobFigures:
    """One job from its pods: admitted when its first pod appeared, started when `workers` of
    its pods had been Running, done when `workers` pods had succeeded. A pod that ended
    without succeeding was preempted; it loses its run since its last checkpoint (every
    `checkpoint_s`, if the job is resumable), or all of it."""
    out = JobFigures(submitted)
    mine = sorted(pods, key=lambda p: p.created)
    if not mine:
        return out
    out.admitted = mine[0].created
    # Its `workers`-th pod to run: an attempt whose pods were stopped before they all ran (a
    # preemption while starting) does not hide the start of the next.
    ran = sorted(p.running for p in mine if p.running is not None)
    if len(ran) >= job.workers:
        out.all_running = ran[job.workers - 1]
    done = sorted(p.ended for p in mine if p.succeeded and p.ended is not None)
    if len(done) >= job.workers:
        out.completed = done[job.workers - 1]
    broken = 0
    for p in mine:
        if p.running is None:
            continue
        held = (p.ended if p.ended is not None else end) - p.running
        out.held_gpu_s += held * job.gpus_per_worker
        if p.ended is not None and not p.succeeded:
            broken += 1
            lost = held % checkpoint_s if job.resumable else held
            out.lost_gpu_s += lost * job.gpus_per_worker
    out.preemptions = math.ceil(broken / job.workers)
    return out


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(jobs: list[BenchJob], figures: dict[str, JobFigures], *, start: float, gpus: int,
            scale: float) -> dict[str, Any]:
    """The run's figures; times in wall seconds, GPU-hours in trace hours (x scale)."""
    admitted = [f.admitted for f in figures.values() if f.admitted is not None]
    completed = [f.completed for f in figures.values() if f.completed is not None]
    to_running = [f.all_running - f.submitted for f in figures.values() if f.all_running is not None]
    last_admit = max(admitted) - start if admitted else None
    makespan = max(completed) - start if completed else None
    held = sum(f.held_gpu_s for f in figures.values())
    waits: dict[str, list[float]] = {}
    for job in jobs:
        f = figures[job.job_id]
        if f.all_running is not None:
            waits.setdefault(job.tier, []).append(f.all_running - f.submitted)

    def r(x: float | None, n: int = 3) -> float | None:
        return None if x is None else round(x, n)

    return {
        "jobs": len(jobs), "admitted": len(admitted), "completed": len(completed),
        "time_to_admit_all_s": r(last_admit) if len(admitted) == len(jobs) else None,
        "admissions_per_s": r(len(admitted) / last_admit) if last_admit else None,
        "submit_to_all_running_s": {"p50": r(pct(to_running, 0.5)), "p99": r(pct(to_running, 0.99)),
                                    "max": r(max(to_running) if to_running else None)},
        "queue_wait_by_tier_s": {tier: {"mean": r(statistics.fmean(v)), "p50": r(pct(v, 0.5)),
                                        "max": r(max(v))} for tier, v in sorted(waits.items())},
        "utilization": r(held / (gpus * makespan), 4) if makespan else None,
        "makespan_s": r(makespan),
        "preemptions": sum(f.preemptions for f in figures.values()),
        "modelled_gpu_hours_lost": r(sum(f.lost_gpu_s for f in figures.values()) * scale / 3600),
    }


def audit_offset(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def requests_by_agent(path: Path, offset: int) -> Counter[str]:
    """Requests the API server completed since `offset` in its audit log, by the first word of
    their user agent (kueue, kube-controller-manager, kube-scheduler, kwok, ...)."""
    counts: Counter[str] = Counter()
    with path.open("rb") as fh:
        fh.seek(offset)
        for line in fh:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("stage") != "ResponseComplete":
                continue
            agent = (event.get("userAgent") or "none").split("/", 1)[0].split(" ", 1)[0]
            counts[agent] += 1
    return counts


def processes(*, markers: Iterable[str] = (), pids: Iterable[int] = ()) -> list[psutil.Process]:
    """Processes whose command line names one of `markers` (e.g. a cluster's own folder), and
    `pids` with their children."""
    out: dict[int, psutil.Process] = {}
    wanted = list(markers)
    if wanted:
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info.get("cmdline") or [])
            if any(m in line for m in wanted):
                out[proc.pid] = proc
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            out[pid] = proc
            for child in proc.children(recursive=True):
                out[child.pid] = child
    return list(out.values())


def cpu_seconds(procs: Iterable[psutil.Process]) -> dict[str, float]:
    """User + system CPU seconds so far, summed by process name."""
    out: dict[str, float] = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            name = proc.name()
            out[name] = out.get(name, 0.0) + times.user + times.system
    return out
