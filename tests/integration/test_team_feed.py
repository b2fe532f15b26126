"""Each team's live feed, against the real submission service on real NATS and PostgreSQL: a
team follows its own jobs' events without reading any stream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.job import WorkerPlacement
from rota.db.engine import make_engine
from rota.endpoints import Endpoints
from rota.flushed import flushed
from rota.ids import new_id
from rota_submission import store
from rota_submission.feed import Feeder

from tests.builders import submit_job
from tests.integration.harness import ServiceProcess, api, eventually, publish_command


class Feed:
    """Everything a team's feed delivered, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.sub: Subscription | None = None

    async def follow(self, nc: Client, team: str) -> Feed:
        async def record(msg: Msg) -> None:
            self.got.append((msg.subject, json.loads(msg.data)))

        self.sub = await nc.subscribe(s.team_feed(team), cb=record)
        await flushed(nc)
        return self

    def of(self, job_id: str) -> list[tuple[str, str]]:
        return [(subject, doc["type"]) for subject, doc in self.got if doc["job_id"] == job_id]


async def test_a_team_sees_its_own_jobs_events_once_and_no_other_teams(
    nc: Client, submission: ServiceProcess
) -> None:
    nlp, vision = await Feed().follow(nc, "nlp"), await Feed().follow(nc, "vision")
    reply = await api(nc, s.api_submit("nlp"), submit_job(name="followed"))
    assert reply.ok, reply.error
    job_id = reply.result["job_id"]

    async def submitted() -> list[tuple[str, str]]:
        return nlp.of(job_id)

    await eventually(submitted)
    run_id = new_id()
    started = envelope(m.RunStarted(
        run_id=run_id, job_id=job_id, attempt=1,
        placement=[WorkerPlacement(worker=0, node="h100-0", gpus=list(range(8)))],
    ), source="executor", job_id=job_id, run_id=run_id)
    # The same event twice under two stream message ids: the read model records it once,
    # and so the feed hands it on once.
    for _ in range(2):
        await nc.jetstream().publish(s.EVENT_SUBJECTS["RunStarted"], started.to_bytes(),
                                     stream=s.STREAM_EVT, headers={"Nats-Msg-Id": new_id()})

    async def both() -> list[tuple[str, str]]:
        seen = nlp.of(job_id)
        return seen if len(seen) >= 2 else []

    await eventually(both)
    await asyncio.sleep(0.5)  # room for a wrong second copy to arrive
    assert nlp.of(job_id) == [("rota.feed.nlp.job.submitted", "JobSubmitted"),
                              ("rota.feed.nlp.run.started", "RunStarted")]
    [(_, doc)] = [(subj, d) for subj, d in nlp.got if d["id"] == started.id]
    assert doc == json.loads(started.to_bytes())  # the event as published, unchanged
    assert vision.of(job_id) == []


async def test_a_refused_submission_reaches_its_teams_feed(
    nc: Client, submission: ServiceProcess
) -> None:
    nlp = await Feed().follow(nc, "nlp")
    env = json.loads(envelope(submit_job(name="too-big"), source="test").to_bytes())
    env["data"]["gpus_per_worker"] = 10_000
    await publish_command(nc, s.submit("nlp"), json.dumps(env).encode(), env["id"])

    async def rejected() -> list[dict[str, Any]]:
        return [d for _, d in nlp.got if d["type"] == "JobRejected"]

    [event] = await eventually(rejected)
    assert event["data"]["field"] == "data.gpus_per_worker"
    assert event["data"]["team"] == "nlp"


async def test_an_event_twice_in_one_batch_is_fed_once_in_stream_order(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints
) -> None:
    """The feeder against the real read model's jobs table: a job it has not seen (its
    `JobSubmitted` went by before it started) finds its team there; a repeated event, in a
    batch or in a redelivery, is fed once; the rest in the order given."""
    reply = await api(nc, s.api_submit("nlp"), submit_job(name="twice"))
    assert reply.ok, reply.error
    job_id, run_id = reply.result["job_id"], new_id()
    placement = [WorkerPlacement(worker=0, node="h100-0", gpus=list(range(8)))]
    started = envelope(m.RunStarted(run_id=run_id, job_id=job_id, attempt=1,
                                    placement=placement),
                       source="executor", job_id=job_id, run_id=run_id).to_bytes()
    finished = envelope(m.RunFinished(run_id=run_id, job_id=job_id), source="executor",
                        job_id=job_id, run_id=run_id).to_bytes()
    engine = make_engine(endpoints.database_url)
    published: list[tuple[str, str]] = []

    async def teams_of(job_ids: list[str]) -> dict[str, str]:
        async with engine.connect() as conn:
            return await store.teams_of(conn, job_ids)

    async def publish(subject: str, body: bytes, headers: dict[str, str]) -> None:
        published.append((subject, json.loads(body)["type"]))

    feeder = Feeder(teams_of, publish, 65_536)
    try:
        await feeder.feed([_msg(started), _msg(started), _msg(finished)])
        await feeder.feed([_msg(started)])  # a redelivery
    finally:
        await engine.dispose()
    assert published == [("rota.feed.nlp.run.started", "RunStarted"),
                         ("rota.feed.nlp.run.finished", "RunFinished")]


def _msg(body: bytes) -> Msg:
    return Msg(_client=None, subject="rota.evt.x", data=body, headers={"Nats-Msg-Id": "x"})  # type: ignore[arg-type]
