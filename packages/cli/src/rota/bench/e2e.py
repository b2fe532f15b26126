"""`rota bench e2e`: sustained submit -> AllocationGranted throughput and latency, on the live
stack, beside the raw JetStream publish+consume rate of the same server as the ceiling.

Jobs are submitted on `rota.cmd.submit.bench` (JetStream, the producers' path) at an offered
rate; the clock for each job runs from its publish to the `AllocationGranted` that names it.
With `pending`, a deep queue is submitted and measured first (`rota.bench.deep`). With `burst`,
all jobs are published at once, as a sweep is, and the figures are when the last one was
recorded (its `JobSubmitted`) and granted. Beside submit -> granted, each job's submit ->
recorded, submit -> proposed (the scheduler's first `AllocationProposed` for it) and submit ->
started (its first `RunStarted`) say at which stage a slow job waited: the submission service,
the scheduler, the ledger or the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import yaml
from nats.aio.client import Client
from nats.aio.msg import Msg

from rota.bench.deep import BACKLOG_FLAVOR, BACKLOG_TEAM, DeepQueue, cpu_of, measure_backlog
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_CMD, STREAM_EVT, submit

CONFIG = Path(__file__).with_name("bench.rota.yaml")
CEILING_STREAM = "ROTA_BENCH"
BACKLOG_NODES = 16
"""Nodes of the flavor the `--pending` backlog waits on, in the shipped bench config."""


def config_with_backlog_nodes(nodes: int, out: Path) -> Path:
    """The bench config with `nodes` 8-GPU nodes for the backlog (and the backlog team's
    quota all of them), written to `out`; the shipped one when `nodes` is its own."""
    if nodes == BACKLOG_NODES:
        return CONFIG
    doc = yaml.safe_load(CONFIG.read_text())
    for pool in doc["cluster"]["node_pools"]:
        if pool["flavor"] == BACKLOG_FLAVOR:
            pool["count"], pool["racks"] = nodes, max(1, nodes // 8)
    doc["teams"][BACKLOG_TEAM]["quota"][BACKLOG_FLAVOR] = 8 * nodes
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


@dataclass(frozen=True)
class Latency:
    """Milliseconds from each job's publish to one of its events, over the jobs that got it."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, sent: Mapping[str, float], reached: Mapping[str, float]) -> Latency:
        values = [(reached[sid] - t) * 1000 for sid, t in sent.items() if sid in reached]
        return cls(count=len(values),
                   p50_ms=statistics.median(values) if values else float("nan"),
                   p99_ms=percentile(values, 0.99), max_ms=max(values, default=float("nan")))

    def as_json(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_p50_ms": round(self.p50_ms, 1), f"{prefix}_p99_ms": round(self.p99_ms, 1),
                f"{prefix}_max_ms": round(self.max_ms, 1)}


@dataclass(frozen=True)
class Result:
    jobs: int
    granted: int
    offered_per_s: float | None
    jobs_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    jetstream_ceiling_msgs_per_s: float
    messages_per_job: float
    wall_s: float
    cpu_s_per_job: dict[str, float]
    server_cpu_s_per_job: dict[str, float] | None = None
    """NATS and PostgreSQL (with its backends), when they are the embedded ones."""
    deep: DeepQueue | None = None
    burst: bool = False
    all_recorded_s: float | None = None
    all_granted_s: float | None = None
    recorded: Latency | None = None
    proposed: Latency | None = None
    started: Latency | None = None

    def as_json(self) -> dict[str, Any]:
        deep = self.deep.as_json() if self.deep is not None else {"pending": 0}
        return {**deep,
            "jobs": self.jobs, "granted": self.granted, "offered_per_s": self.offered_per_s,
            "jobs_per_s": round(self.jobs_per_s, 1), "p50_ms": round(self.p50_ms, 1),
            "p99_ms": round(self.p99_ms, 1), "max_ms": round(self.max_ms, 1),
            **(self.recorded.as_json("recorded") if self.recorded else {}),
            **(self.proposed.as_json("proposed") if self.proposed else {}),
            **({"started": self.started.count, **self.started.as_json("started")}
               if self.started else {}),
            "jetstream_ceiling_msgs_per_s": round(self.jetstream_ceiling_msgs_per_s, 1),
            "ratio_to_ceiling": round(self.jobs_per_s * self.messages_per_job
                                      / self.jetstream_ceiling_msgs_per_s, 3),
            "messages_per_job": round(self.messages_per_job, 2),
            "wall_s": round(self.wall_s, 1),
            "cpu_s_per_job": {name: round(s, 5) for name, s in per_service(
                self.cpu_s_per_job).items()},
            **({"cpu_s_per_job_by_replica": {name: round(s, 5) for name, s in
                                             self.cpu_s_per_job.items()}}
               if per_service(self.cpu_s_per_job).keys() != self.cpu_s_per_job.keys() else {}),
            **({"server_cpu_s_per_job": {name: round(s, 5) for name, s in
                                         self.server_cpu_s_per_job.items()}}
               if self.server_cpu_s_per_job else {}),
            **({"burst": self.jobs, "all_recorded_s": _round(self.all_recorded_s),
                "all_granted_s": _round(self.all_granted_s)} if self.burst else {}),
        }


def per_service(by_process: Mapping[str, float]) -> dict[str, float]:
    """Each service's figure: its replicas' (`<service>-<i>`) summed."""
    out: dict[str, float] = {}
    for name, value in by_process.items():
        head, _, tail = name.rpartition("-")
        service = head if head and tail.isdigit() else name
        out[service] = out.get(service, 0.0) + value
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def jetstream_ceiling(nc: Client, messages: int = 20_000, size: int = 600) -> float:
    """Publish then consume `messages` on a scratch stream: msgs/s of both halves together."""
    js = nc.jetstream()
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_stream(CEILING_STREAM)
    await js.add_stream(name=CEILING_STREAM, subjects=["rota_bench.>"])
    payload = b"x" * size
    start = time.perf_counter()
    window = 500
    for base in range(0, messages, window):
        acks = [js.publish("rota_bench.x", payload, headers={"Nats-Msg-Id": f"{base}-{i}"})
                for i in range(min(window, messages - base))]
        await asyncio.gather(*acks)
    sub = await js.pull_subscribe("rota_bench.x", durable="bench", stream=CEILING_STREAM)
    received = 0
    while received < messages:
        batch = await sub.fetch(min(500, messages - received), timeout=10)
        received += len(batch)
        await asyncio.gather(*(msg.ack() for msg in batch))
    elapsed = time.perf_counter() - start
    await js.delete_stream(CEILING_STREAM)
    return 2 * messages / elapsed  # each message was published once and consumed once


async def _stream_messages(nc: Client) -> int:
    js = nc.jetstream()
    total = 0
    for stream in (STREAM_CMD, STREAM_EVT):
        total += (await js.stream_info(stream)).state.messages
    return total


async def run(nats_url: str, jobs: int, rate: float | None, progress: Any = None,
              creds: str | None = None, *, pending: int = 0, burst: bool = False,
              pids: Mapping[str, int] | None = None,
              server_pids: Mapping[str, int] | None = None) -> Result:
    """`creds`: the admin's, when the stack's NATS has auth on (it submits for a team of its
    own and reads the events). `pids`: the services' processes, for their CPU per job;
    `server_pids`: the embedded servers' (each with its child processes)."""
    pids = pids or {}
    server_pids = server_pids or {}
    nc = await nats.connect(nats_url, user_credentials=creds)
    deep = None
    if pending:
        deep = await measure_backlog(nc, pending, pids.get("scheduler"), progress=progress)
    js = nc.jetstream()
    sent: dict[str, float] = {}
    proposed: dict[str, float] = {}
    granted: dict[str, float] = {}
    started: dict[str, float] = {}
    submission_of_job: dict[str, str] = {}
    recorded: dict[str, float] = {}
    done, all_started = asyncio.Event(), asyncio.Event()

    async def on_submitted(msg: Msg) -> None:
        doc = json.loads(msg.data)
        sid = doc["data"]["spec"]["submission_id"]
        if sid in sent:
            submission_of_job[doc["job_id"]] = sid
            recorded.setdefault(sid, time.perf_counter())

    async def on_proposed(msg: Msg) -> None:
        job = json.loads(msg.data)["job_id"]
        if job in submission_of_job:  # not the backlog's
            proposed.setdefault(job, time.perf_counter())

    async def on_granted(msg: Msg) -> None:
        doc = json.loads(msg.data)
        if doc["data"]["team"] != "bench":
            return  # the backlog's
        granted.setdefault(doc["job_id"], time.perf_counter())
        if len(granted) >= jobs:
            done.set()

    async def on_started(msg: Msg) -> None:
        job = json.loads(msg.data)["job_id"]
        if job in submission_of_job:  # not the backlog's
            started.setdefault(job, time.perf_counter())
            if len(started) >= jobs:
                all_started.set()

    await nc.subscribe(EVENT_SUBJECTS["JobSubmitted"], cb=on_submitted)
    await nc.subscribe(EVENT_SUBJECTS["AllocationProposed"], cb=on_proposed)
    await nc.subscribe(EVENT_SUBJECTS["AllocationGranted"], cb=on_granted)
    await nc.subscribe(EVENT_SUBJECTS["RunStarted"], cb=on_started)
    before = await _stream_messages(nc)
    cpu_before = cpu_of(pids, server_pids)
    run_id = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    interval = 1.0 / rate if rate and not burst else 0.0
    in_flight: list[Any] = []
    for i in range(jobs):
        sid = f"bench-{run_id}-{i}"
        spec = m.SubmitJob(name=f"bench-{i}", team="bench", user="bench", queue="training",
                           flavor="gpu", workers=1, gpus_per_worker=1, submission_id=sid,
                           sim={"duration_s": 3600.0})
        env = envelope(spec, source="bench")
        due = start + i * interval
        if interval and (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        sent[sid] = time.perf_counter()
        publish = js.publish(submit("bench"), env.to_bytes(), stream=STREAM_CMD,
                             headers={"Nats-Msg-Id": env.id})
        if burst:  # all at once: only the client's own window of unacknowledged publishes
            in_flight.append(publish)
            if len(in_flight) >= 1000:
                await asyncio.gather(*in_flight)
                in_flight.clear()
        else:
            await publish
        if progress and i % 500 == 0:
            progress(f"submitted {i}/{jobs}")
    await asyncio.gather(*in_flight)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), timeout=max(60.0, jobs / 20))
    with contextlib.suppress(TimeoutError):  # a run starts soon after its grant
        await asyncio.wait_for(all_started.wait(), timeout=10.0)
    await asyncio.sleep(1.0)  # let the last events land before counting messages
    cpu_after = cpu_of(pids, server_pids)
    def by_submission(at: dict[str, float]) -> dict[str, float]:
        return {submission_of_job[job]: t for job, t in at.items() if job in submission_of_job}

    to_grant = Latency.of(sent, by_submission(granted))
    last = max(granted.values(), default=start)
    messages = await _stream_messages(nc) - before
    if progress:
        progress("measuring the JetStream ceiling")
    ceiling = await jetstream_ceiling(nc)
    await nc.close()
    return Result(
        jobs=jobs, granted=to_grant.count, offered_per_s=rate,
        jobs_per_s=to_grant.count / max(1e-9, last - start),
        p50_ms=to_grant.p50_ms, p99_ms=to_grant.p99_ms, max_ms=to_grant.max_ms,
        jetstream_ceiling_msgs_per_s=ceiling, messages_per_job=messages / max(1, jobs),
        wall_s=time.perf_counter() - start,
        cpu_s_per_job={name: (cpu_after[name] - cpu_before[name]) / max(1, jobs)
                       for name in pids},
        server_cpu_s_per_job={name: (cpu_after[name] - cpu_before[name]) / max(1, jobs)
                              for name in server_pids},
        deep=deep,
        burst=burst,
        all_recorded_s=max(recorded.values()) - start if len(recorded) >= jobs else None,
        all_granted_s=last - start if to_grant.count >= jobs else None,
        recorded=Latency.of(sent, recorded), proposed=Latency.of(sent, by_submission(proposed)),
        started=Latency.of(sent, by_submission(started)),
    )
