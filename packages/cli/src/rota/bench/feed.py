"""`rota bench feed`: how late a team hears of its jobs on its feed, against `rota.evt`.

Team `bench` submits jobs at a steady rate on `rota.cmd.submit.bench` (JetStream), each one
admitted at once (the e2e bench's cluster). The bench listens, as the admin, to `rota.evt.>`
and to the team's feed `rota.feed.bench.>`, and reports:
- submit -> `JobSubmitted` on `rota.evt.job.submitted` and on `rota.feed.bench.job.submitted`
  (p50/p99/max);
- for every event of the bench's jobs: its arrival on `rota.evt` -> its copy on the feed;
- order: the feed copies of each job out of the order of `rota.evt` (pairs), and events
  never fed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.aio.msg import Msg

from rota.bench.e2e import Latency
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import FEED_TYPES, STREAM_CMD, submit, team_feed

TEAM = "bench"


@dataclass
class Heard:
    sent: dict[str, float] = field(default_factory=dict)
    """submission id -> when published"""
    job_of: dict[str, str] = field(default_factory=dict)
    """job id -> submission id"""
    evt_submitted: dict[str, float] = field(default_factory=dict)
    feed_submitted: dict[str, float] = field(default_factory=dict)
    evt_at: dict[str, float] = field(default_factory=dict)
    """event id -> arrival on rota.evt (events of the bench's jobs, of the feed's types)"""
    feed_at: dict[str, float] = field(default_factory=dict)
    evt_order: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    feed_order: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))


def _spec(sid: str) -> m.SubmitJob:
    return m.SubmitJob(name=sid[-20:], team=TEAM, user="bench", queue="training",
                       flavor="gpu", workers=1, gpus_per_worker=1, submission_id=sid,
                       sim={"duration_s": 3600.0})


async def run(nats_url: str, *, jobs: int, rate: float, creds: str | None = None,
              settle_s: float = 3.0, progress: Callable[[str], None] | None = None,
              ) -> dict[str, Any]:
    say = progress or (lambda _text: None)
    nc = await nats.connect(nats_url, user_credentials=creds)
    js = nc.jetstream()
    heard = Heard()
    tag = uuid.uuid4().hex[:8]

    def on(evt: bool) -> Callable[[Msg], Any]:
        async def handle(msg: Msg) -> None:
            now = time.perf_counter()
            doc = json.loads(msg.data)
            if doc["type"] == "JobSubmitted":
                sid = doc["data"]["spec"]["submission_id"]
                if sid not in heard.sent:
                    return
                heard.job_of[doc["job_id"]] = sid
                (heard.evt_submitted if evt else heard.feed_submitted).setdefault(sid, now)
            job_id = doc.get("job_id")
            if doc["type"] in FEED_TYPES and job_id in heard.job_of:
                (heard.evt_at if evt else heard.feed_at).setdefault(doc["id"], now)
                (heard.evt_order if evt else heard.feed_order)[job_id].append(doc["id"])

        return handle

    await nc.subscribe("rota.evt.>", cb=on(True))
    await nc.subscribe(team_feed(TEAM), cb=on(False))
    await nc.flush()
    say(f"submitting {jobs} jobs at {rate:g}/s")
    start = time.perf_counter()
    acks = []
    for i in range(jobs):
        sid = f"feed-{tag}-{i}"
        env = envelope(_spec(sid), source="bench")
        heard.sent[sid] = time.perf_counter()
        acks.append(asyncio.ensure_future(js.publish(
            submit(TEAM), env.to_bytes(), stream=STREAM_CMD, headers={"Nats-Msg-Id": env.id})))
        await asyncio.sleep(max(0.0, start + (i + 1) / rate - time.perf_counter()))
    await asyncio.gather(*acks)
    offered_s = time.perf_counter() - start
    for _ in range(int(30 / 0.2)):
        if len(heard.feed_submitted) >= jobs:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(settle_s)  # the jobs' later events (pending, granted, started)
    await nc.close()
    return figures(heard, jobs=jobs, rate=rate, offered_s=offered_s)


def _out_of_order(evt: list[str], feed: list[str]) -> int:
    """Pairs of a job's feed copies in the other order than on `rota.evt`."""
    rank = {event_id: i for i, event_id in enumerate(evt)}
    ranks = [rank[e] for e in feed if e in rank]
    return sum(1 for i, a in enumerate(ranks) for b in ranks[i + 1:] if b < a)


def figures(heard: Heard, *, jobs: int, rate: float, offered_s: float) -> dict[str, Any]:
    lag = Latency.of(heard.evt_at, heard.feed_at)
    return {
        "benchmark": "feed",
        "jobs": jobs, "offered_per_s": rate,
        "achieved_per_s": round(jobs / max(offered_s, 1e-9), 1),
        "submitted_on_evt": len(heard.evt_submitted),
        "submitted_on_feed": len(heard.feed_submitted),
        **Latency.of(heard.sent, heard.evt_submitted).as_json("evt_submitted"),
        **Latency.of(heard.sent, heard.feed_submitted).as_json("feed_submitted"),
        "events_on_evt": len(heard.evt_at), "events_fed": lag.count,
        "events_never_fed": len(heard.evt_at.keys() - heard.feed_at.keys()),
        **lag.as_json("evt_to_feed"),
        "feed_pairs_out_of_order": sum(_out_of_order(heard.evt_order[job], order)
                                       for job, order in heard.feed_order.items()),
    }
