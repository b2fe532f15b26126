"""`rota bench flood`: one team floods the front door while another submits a fitting job every
second, on the live stack with the intake limits as shipped.

Team `flood` publishes its commands on `rota.cmd.submit.flood` as fast as JetStream acks them
(its jobs wait: each asks for more than the team may hold at once). Team `steady` publishes one
job a second on `rota.cmd.submit.steady` from before the flood until after it has been
answered; each fits at once. The figures: how many of the flood's commands were accepted and
refused (by code) and how fast they were sent and answered, and for `steady`'s jobs submit ->
recorded (its `JobSubmitted`) and submit -> granted (`AllocationGranted`), p50/p99/max, over
every job and over those sent while the flood was being answered.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg

from rota.bench.e2e import Latency
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_CMD, submit

CONFIG = Path(__file__).with_name("flood.rota.yaml")
FLOOD_TEAM, STEADY_TEAM = "flood", "steady"
IN_FLIGHT = 1000
"""Unacknowledged publishes the flood keeps at once."""


@dataclass
class Seen:
    """When each of the bench's commands was answered, by submission id."""

    sent: dict[str, float] = field(default_factory=dict)
    recorded: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, tuple[float, str]] = field(default_factory=dict)
    granted: dict[str, float] = field(default_factory=dict)
    job_of: dict[str, str] = field(default_factory=dict)

    def answered(self, sids: list[str]) -> int:
        return sum(1 for sid in sids if sid in self.recorded or sid in self.rejected)


def _job(team: str, sid: str, gpus: int, duration_s: float) -> m.SubmitJob:
    return m.SubmitJob(name=sid[-20:], team=team, user="bench", queue="training", flavor="gpu",
                       workers=1, gpus_per_worker=gpus, submission_id=sid,
                       sim={"duration_s": duration_s})


async def run(nats_url: str, *, flood: int, creds: str | None = None, lead_s: float = 5.0,
              tail_s: float = 10.0, progress: Callable[[str], None] | None = None,
              ) -> dict[str, Any]:
    """`lead_s`: steady submits alone this long first; `tail_s`: and this long after the
    flood has been answered (or its last command has waited 120 s)."""
    say = progress or (lambda _text: None)
    nc = await nats.connect(nats_url, user_credentials=creds)
    js = nc.jetstream()
    seen = Seen()
    tag = uuid.uuid4().hex[:8]

    async def on_submitted(msg: Msg) -> None:
        doc = json.loads(msg.data)
        sid = doc["data"]["spec"]["submission_id"]
        if sid in seen.sent:
            seen.recorded.setdefault(sid, time.perf_counter())
            seen.job_of[doc["job_id"]] = sid

    async def on_rejected(msg: Msg) -> None:
        data = json.loads(msg.data)["data"]
        sid = data.get("submission_id")
        if sid in seen.sent:
            seen.rejected.setdefault(sid, (time.perf_counter(), data["code"]))

    async def on_granted(msg: Msg) -> None:
        sid = seen.job_of.get(json.loads(msg.data)["job_id"])
        if sid is not None:
            seen.granted.setdefault(sid, time.perf_counter())

    for subject, handler in ((EVENT_SUBJECTS["JobSubmitted"], on_submitted),
                             (EVENT_SUBJECTS["JobRejected"], on_rejected),
                             (EVENT_SUBJECTS["AllocationGranted"], on_granted)):
        await nc.subscribe(subject, cb=handler)

    async def publish(team: str, spec: m.SubmitJob) -> Any:
        env = envelope(spec, source="bench")
        seen.sent[spec.submission_id] = time.perf_counter()
        return js.publish(submit(team), env.to_bytes(), stream=STREAM_CMD,
                          headers={"Nats-Msg-Id": env.id})

    flooding = asyncio.Event()
    flood_over = asyncio.Event()
    window: dict[str, float] = {}
    steady_sids: list[str] = []

    async def steady() -> None:
        i = 0
        start = time.perf_counter()
        stop_at: float | None = None
        while stop_at is None or time.perf_counter() < stop_at:
            sid = f"steady-{tag}-{i}"
            await (await publish(STEADY_TEAM, _job(STEADY_TEAM, sid, 1, 5.0)))
            steady_sids.append(sid)
            if flooding.is_set() and not flood_over.is_set():
                window[sid] = seen.sent[sid]
            i += 1
            if i == round(lead_s):
                flooding.set()
            if flood_over.is_set() and stop_at is None:
                stop_at = time.perf_counter() + tail_s
            await asyncio.sleep(max(0.0, start + i - time.perf_counter()))

    steady_task = asyncio.create_task(steady())
    await flooding.wait()
    say(f"flooding {flood} commands")
    flood_sids = [f"flood-{tag}-{i}" for i in range(flood)]
    flood_start = time.perf_counter()
    in_flight: list[Any] = []
    for sid in flood_sids:
        in_flight.append(await publish(FLOOD_TEAM, _job(FLOOD_TEAM, sid, 8, 3600.0)))
        if len(in_flight) >= IN_FLIGHT:
            await asyncio.gather(*in_flight)
            in_flight.clear()
    await asyncio.gather(*in_flight)
    sent_s = time.perf_counter() - flood_start
    say(f"flood sent in {sent_s:.1f} s; waiting for its answers")
    await _until(lambda: seen.answered(flood_sids) >= flood, timeout_s=120.0)
    answered_s = max((t for sid in flood_sids for t in (
        seen.recorded.get(sid), seen.rejected.get(sid, (None,))[0]) if t is not None),
        default=flood_start) - flood_start
    flood_over.set()
    await steady_task
    await _until(lambda: seen.granted.keys() >= set(steady_sids), timeout_s=30.0)
    await nc.close()
    return figures(seen, flood_sids, steady_sids, window, sent_s=sent_s, answered_s=answered_s)


async def _until(done: Callable[[], bool], *, timeout_s: float, poll_s: float = 0.2) -> None:
    """Until `done()`, looking every `poll_s`, or `timeout_s` at most (then the figures say
    what was missing)."""
    for _ in range(int(timeout_s / poll_s)):
        if done():
            return
        await asyncio.sleep(poll_s)


def figures(seen: Seen, flood_sids: list[str], steady_sids: list[str],
            window: dict[str, float], *, sent_s: float, answered_s: float) -> dict[str, Any]:
    accepted = sum(1 for sid in flood_sids if sid in seen.recorded)
    codes = Counter(seen.rejected[sid][1] for sid in flood_sids if sid in seen.rejected)
    refused = sum(codes.values())
    steady_sent = {sid: seen.sent[sid] for sid in steady_sids}
    recorded = Latency.of(steady_sent, seen.recorded)
    granted = Latency.of(steady_sent, seen.granted)
    during = {sid: seen.sent[sid] for sid in window}
    return {
        "benchmark": "flood",
        "flood": {
            "commands": len(flood_sids), "accepted": accepted, "rejected": refused,
            "rejected_by_code": dict(sorted(codes.items())),
            "unanswered": len(flood_sids) - accepted - refused,
            "sent_s": round(sent_s, 2), "sent_per_s": round(len(flood_sids) / sent_s, 1),
            "answered_s": round(answered_s, 2),
            "answered_per_s": round((accepted + refused) / max(answered_s, 1e-9), 1),
        },
        "steady": {
            "jobs": len(steady_sids), "recorded": recorded.count, "granted": granted.count,
            **recorded.as_json("recorded"), **granted.as_json("granted"),
            "during_flood": {"jobs": len(during),
                             **Latency.of(during, seen.recorded).as_json("recorded"),
                             **Latency.of(during, seen.granted).as_json("granted")},
        },
    }
