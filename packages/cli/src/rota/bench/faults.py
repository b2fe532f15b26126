"""`rota bench faults`: the live stack on a NATS cluster of 3 (streams at R3) under a steady
load of jobs, through two faults, one per phase: the server leading ROTA_EVT killed with
SIGKILL and restarted; then PostgreSQL's postmaster killed with SIGKILL and restarted.

Each phase submits `jobs` jobs (each admitted at once: the e2e bench's cluster) at `rate` per
second and injects its fault once a third of them are sent. Afterwards it reads ROTA_EVT
itself (not a core subscription, which misses what is sent while it reconnects) and reports:
- lost: submissions with no `JobSubmitted`, jobs with no `AllocationGranted`;
- doubled: submissions recorded as two jobs, jobs granted twice, a GPU granted to two runs;
- stuck: the durable consumers with messages pending or unacknowledged once the load is over;
- the stall: the longest gap between two consecutive `JobSubmitted` and between two
  `AllocationGranted` (stream times) while the fault lasted, against the gap before it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import STREAM_CMD, STREAM_EVT, submit
from rota.embedded import EmbeddedNatsCluster, EmbeddedPostgres

TEAM = "bench"
JS_TIMEOUT_S = 30.0
"""The bench's own JetStream requests wait this long: on a loaded machine, and right after a
fault, 5 s (nats-py's default) is not always enough, and a figure lost to it is no figure."""


_T = TypeVar("_T")


async def again(request: Callable[[], Awaitable[_T]], within_s: float = 60.0) -> _T:
    """`request()`, asked again while JetStream times out or has no leader to answer: right
    after a server is killed and restarted, its streams elect leaders and catch up, and a
    request in that window fails though the next one will not."""
    give_up = time.monotonic() + within_s
    while True:
        try:
            return await request()
        except (TimeoutError, nats.errors.Error):
            if time.monotonic() > give_up:
                raise
            await asyncio.sleep(1.0)


async def read_stream(nc: Client, since_seq: int) -> list[tuple[dict[str, Any], datetime]]:
    """Every event on ROTA_EVT after `since_seq`, with its stream time."""
    sub = await nc.jetstream(timeout=JS_TIMEOUT_S).pull_subscribe(
        "rota.evt.>", stream=STREAM_EVT,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                              opt_start_seq=since_seq + 1))
    found = []
    try:
        while True:
            try:
                batch = await sub.fetch(512, timeout=2)
            except Exception:
                break
            for msg in batch:
                found.append((json.loads(msg.data), msg.metadata.timestamp))
                await msg.ack()
    finally:
        await sub.unsubscribe()
    return found


def _gap_s(times: list[float], start: float, end: float) -> float:
    inside = sorted(t for t in times if start <= t <= end)
    return max((b - a for a, b in itertools.pairwise(inside)), default=0.0)


def verdict(events: list[tuple[dict[str, Any], datetime]], sids: list[str],
            fault_at: float, recovered_at: float) -> dict[str, Any]:
    sid_set = set(sids)
    jobs_of: dict[str, set[str]] = {}
    submitted_at, granted_at = [], []
    grants: Counter[str] = Counter()
    holders: dict[tuple[str, int], set[str]] = {}
    ours: set[str] = set()
    for doc, at in events:
        data, stamp = doc["data"], at.timestamp()
        if doc["type"] == "JobSubmitted" and data["spec"]["submission_id"] in sid_set:
            jobs_of.setdefault(data["spec"]["submission_id"], set()).add(doc["job_id"])
            ours.add(doc["job_id"])
            submitted_at.append(stamp)
        elif doc["type"] == "AllocationGranted" and doc["job_id"] in ours:
            grants[doc["job_id"]] += 1
            granted_at.append(stamp)
            for worker in data["placement"]:
                for gpu in worker["gpus"]:
                    holders.setdefault((worker["node"], gpu), set()).add(data["run_id"])
    before = (min(submitted_at, default=fault_at), fault_at)
    return {
        "submitted": len(jobs_of), "granted": len(grants),
        "lost_submissions": len(sid_set - jobs_of.keys()),
        "lost_grants": len(ours - grants.keys()),
        "submissions_recorded_twice": sum(1 for jobs in jobs_of.values() if len(jobs) > 1),
        "jobs_granted_twice": sum(1 for n in grants.values() if n > 1),
        "gpus_granted_to_two_runs": sum(1 for runs in holders.values() if len(runs) > 1),
        "stall_submitted_s": round(_gap_s(submitted_at, fault_at, recovered_at + 30), 2),
        "stall_granted_s": round(_gap_s(granted_at, fault_at, recovered_at + 30), 2),
        "normal_gap_submitted_s": round(_gap_s(submitted_at, *before), 2),
        "normal_gap_granted_s": round(_gap_s(granted_at, *before), 2),
    }


async def unsettled_consumers(nc: Client) -> tuple[dict[str, dict[str, int]], float]:
    """The durable consumers with messages pending or unacknowledged, and the longest ack wait
    among all of them."""
    js = nc.jetstream(timeout=JS_TIMEOUT_S)
    unsettled, ack_wait = {}, 0.0
    for stream in (STREAM_CMD, STREAM_EVT):
        for info in await js.consumers_info(stream):
            ack_wait = max(ack_wait, float(info.config.ack_wait or 0.0))
            if info.num_pending or info.num_ack_pending:
                unsettled[f"{stream}/{info.name}"] = {"pending": info.num_pending or 0,
                                                      "ack_pending": info.num_ack_pending or 0}
    return unsettled, ack_wait


async def stuck_consumers(nc: Client) -> tuple[dict[str, dict[str, int]], float]:
    """The consumers still unsettled once every one of them has had its ack wait (plus 10 s)
    to redeliver what a fault left unacknowledged, and how long settling took. A delivery
    whose ack was lost with a server is redelivered after the ack wait: only what is still
    there after it is stuck."""
    start = time.monotonic()
    unsettled, ack_wait = await again(lambda: unsettled_consumers(nc))
    while unsettled and time.monotonic() - start < ack_wait + 10.0:
        await asyncio.sleep(1.0)
        unsettled, ack_wait = await again(lambda: unsettled_consumers(nc))
    return unsettled, round(time.monotonic() - start, 1)


async def phase(nats_urls: list[str], creds: str | None, *, name: str, jobs: int, rate: float,
                fault: Callable[[], Any], heal: Callable[[], Any], down_s: float,
                say: Callable[[str], None]) -> dict[str, Any]:
    nc = await nats.connect(nats_urls, user_credentials=creds, max_reconnect_attempts=-1,
                            connect_timeout=10,
                            reconnect_time_wait=0.2)
    js = nc.jetstream(timeout=JS_TIMEOUT_S)
    since = (await js.stream_info(STREAM_EVT)).state.last_seq
    tag = uuid.uuid4().hex[:8]
    sids = [f"{name}-{tag}-{i}" for i in range(jobs)]
    fault_at = recovered_at = 0.0
    healer: asyncio.Task[None] | None = None

    async def healing(after_s: float) -> None:
        nonlocal recovered_at
        await asyncio.sleep(after_s)
        await asyncio.to_thread(heal)
        recovered_at = time.time()
        say(f"{name}: restarted {recovered_at - fault_at:.1f} s after the fault")

    start = time.time()
    for i, sid in enumerate(sids):
        if i == jobs // 3:
            say(f"{name}: fault after {i} jobs")
            fault_at = time.time()
            await asyncio.to_thread(fault)
            healer = asyncio.create_task(healing(down_s))
        spec = m.SubmitJob(name=sid[-20:], team=TEAM, user="bench", queue="training",
                           flavor="gpu", workers=1, gpus_per_worker=1, submission_id=sid,
                           sim={"duration_s": 3600.0})
        env = envelope(spec, source="bench")
        while True:  # as a producer should: the same command again until JetStream acks it
            try:
                await js.publish(submit(TEAM), env.to_bytes(), stream=STREAM_CMD, timeout=2,
                                 headers={"Nats-Msg-Id": env.id})
                break
            except Exception:
                await asyncio.sleep(0.1)
        await asyncio.sleep(max(0.0, start + (i + 1) / rate - time.time()))
    if healer is not None:
        await healer
    say(f"{name}: all sent; waiting for every grant")
    for _ in range(120):
        events = await again(lambda: read_stream(nc, since))
        found = verdict(events, sids, fault_at, recovered_at)
        if found["granted"] >= jobs:
            break
        await asyncio.sleep(2)
    await asyncio.sleep(5)
    stuck, settled_after_s = await stuck_consumers(nc)
    result = {"phase": name, "jobs": jobs, "offered_per_s": rate, **found,
              "stuck_consumers": stuck, "consumers_settled_after_s": settled_after_s}
    await nc.close()
    return result


def kill_evt_leader(cluster: EmbeddedNatsCluster, nats_url: str, creds: str | None
                    ) -> Callable[[], int]:
    """A fault that SIGKILLs the server leading ROTA_EVT; returns its index."""

    def fault() -> int:
        async def leader() -> str:
            nc = await nats.connect(nats_url, user_credentials=creds, connect_timeout=10)
            try:
                info = await nc.jetstream(timeout=JS_TIMEOUT_S).stream_info(STREAM_EVT)
                assert info.cluster is not None and info.cluster.leader is not None
                return info.cluster.leader
            finally:
                await nc.close()

        name = asyncio.run(leader())
        index = next(i for i, node in enumerate(cluster.nodes) if node.name == name)
        process = cluster.nodes[index].process
        assert process is not None
        process.kill()
        process.wait()
        fault.killed = index  # type: ignore[attr-defined]
        return index

    return fault


async def run(cluster: EmbeddedNatsCluster, postgres: EmbeddedPostgres, creds: str | None, *,
              jobs: int, rate: float, down_s: float = 3.0,
              say: Callable[[str], None] = lambda _text: None) -> dict[str, Any]:
    kill = kill_evt_leader(cluster, cluster.url, creds)

    def restart_killed() -> None:
        cluster.nodes[kill.killed].restart()  # type: ignore[attr-defined]

    nats_phase = await phase(cluster.urls, creds, name="nats-leader-kill", jobs=jobs,
                             rate=rate, fault=kill, heal=restart_killed, down_s=down_s, say=say)
    def kill_postgres() -> None:
        assert postgres.pid is not None
        os.kill(postgres.pid, signal.SIGKILL)  # the postmaster; its backends then exit

    pg_phase = await phase(cluster.urls, creds, name="postgres-kill", jobs=jobs, rate=rate,
                           fault=kill_postgres, heal=postgres.restart, down_s=down_s, say=say)
    return {"benchmark": "faults", "nats_servers": len(cluster.nodes),
            "phases": [nats_phase, pg_phase]}
