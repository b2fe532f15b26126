"""`rota bench e2e --pending P`: a deep queue first, then the same throughput run behind it.

The backlog is P jobs of team `backlog` on the small flavor `deep` (16 nodes x 8 GPUs), each
asking 2-16 GPUs for a day, in the same queue as the measured jobs and submitted before them:
a few start, the rest wait for a day. Once it is recorded and the scheduler has had time to
explain it, the services are left alone for a while and measured (scheduler CPU and RSS, the
list API). The throughput run then shows whether jobs that fit are slowed by jobs that do not.

Process figures come from /proc, so they are Linux only, like the rest of the bench.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from nats.aio.client import Client

from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import API_JOBS_LIST, EVENT_SUBJECTS, STREAM_CMD, STREAM_EVT, submit

BACKLOG_TEAM = "backlog"
BACKLOG_FLAVOR = "deep"
SUBMITTED = EVENT_SUBJECTS["JobSubmitted"]
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (utime and stime of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mb(pid: int) -> float:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * _PAGE / 1e6


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and of its descendants alive now: PostgreSQL's postmaster
    and its backends, one per pooled connection, which live as long as the services do."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def cpu_of(pids: Mapping[str, int], trees: Mapping[str, int] | None = None) -> dict[str, float]:
    """CPU seconds so far of each named process, and of each named process tree."""
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            out[name] = float("nan")  # restarted or gone: no figure rather than a wrong one
    for name, pid in (trees or {}).items():
        try:
            out[name] = tree_cpu_seconds(pid)
        except psutil.Error:
            out[name] = float("nan")
    return out


@dataclass(frozen=True)
class DeepQueue:
    pending: int
    recorded_s: float
    idle_window_s: float
    scheduler_idle_cpu_pct: float
    scheduler_rss_mb: float
    jobs_list_ms_p50: float
    jobs_list_ms_max: float

    def as_json(self) -> dict[str, Any]:
        return {"pending": self.pending, "backlog_recorded_s": round(self.recorded_s, 1),
                "idle_window_s": self.idle_window_s,
                "scheduler_idle_cpu_pct": round(self.scheduler_idle_cpu_pct, 1),
                "scheduler_rss_mb": round(self.scheduler_rss_mb, 1),
                "jobs_list_limit_50_ms_p50": round(self.jobs_list_ms_p50, 1),
                "jobs_list_limit_50_ms_max": round(self.jobs_list_ms_max, 1)}


async def _submitted_so_far(nc: Client) -> int:
    info = await nc.jetstream().stream_info(STREAM_EVT, subjects_filter=SUBMITTED)
    return sum((info.state.subjects or {}).values())


async def submit_backlog(nc: Client, count: int, progress: Callable[[str], None] | None) -> float:
    """Submit `count` backlog jobs; returns the seconds until the last is recorded. Counted on
    the stream, not by a subscription, which a slow reader could lose messages of."""
    js = nc.jetstream()
    before = await _submitted_so_far(nc)
    tag = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    window = 200
    for base in range(0, count, window):
        acks = []
        for i in range(base, min(count, base + window)):
            workers, per_worker = (1, 2 + 2 * (i % 4)) if i % 3 else (2, 8)
            spec = m.SubmitJob(
                name=f"backlog-{i}", team=BACKLOG_TEAM, user="bench", queue="training",
                flavor=BACKLOG_FLAVOR, workers=workers, gpus_per_worker=per_worker,
                submission_id=f"backlog-{tag}-{i}", declared_runtime_s=86_400,
                sim={"duration_s": 86_400.0})
            env = envelope(spec, source="bench")
            acks.append(js.publish(submit(BACKLOG_TEAM), env.to_bytes(), stream=STREAM_CMD,
                                   headers={"Nats-Msg-Id": env.id}))
        await asyncio.gather(*acks)
        if progress and base % 5000 == 0:
            progress(f"backlog: submitted {base}/{count}")
    deadline = start + max(120.0, count / 20)
    while (recorded := await _submitted_so_far(nc) - before) < count:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"backlog: {recorded} of {count} recorded in time")
        await asyncio.sleep(0.5)
    return time.perf_counter() - start


async def list_latency(nc: Client, calls: int = 20) -> list[float]:
    """Round trips of `rota jobs --limit 50` at the API, in ms."""
    body = envelope(m.ListJobs(limit=50), source="bench").to_bytes()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await nc.request(API_JOBS_LIST, body, timeout=30)
        times.append((time.perf_counter() - start) * 1000)
    return times


async def measure_backlog(nc: Client, count: int, scheduler_pid: int | None, *,
                          settle_s: float = 15.0, idle_window_s: float = 30.0,
                          progress: Callable[[str], None] | None = None) -> DeepQueue:
    recorded_s = await submit_backlog(nc, count, progress)
    if progress:
        progress(f"backlog of {count} recorded in {recorded_s:.1f} s; letting it settle")
    await asyncio.sleep(settle_s)  # every job explained once, the first ones started
    before = cpu_seconds(scheduler_pid) if scheduler_pid else float("nan")
    await asyncio.sleep(idle_window_s)
    after = cpu_seconds(scheduler_pid) if scheduler_pid else float("nan")
    listed = await list_latency(nc)
    return DeepQueue(
        pending=count, recorded_s=recorded_s, idle_window_s=idle_window_s,
        scheduler_idle_cpu_pct=100 * (after - before) / idle_window_s,
        scheduler_rss_mb=rss_mb(scheduler_pid) if scheduler_pid else float("nan"),
        jobs_list_ms_p50=statistics.median(listed), jobs_list_ms_max=max(listed))
