"""Two submission replicas (`ROTA_REPLICAS=2`) over real NATS JetStream and PostgreSQL: the
submissions are shared out and each recorded once; each job's events are folded by one
replica, in stream order, so a job's history never lands out of order; a stopped replica's
jobs wait for it (no one else folds them) and it continues from its durable."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
import sqlalchemy as sa
from nats.aio.client import Client
from rota.bus.partition import Partition
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.job import WorkerPlacement
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_CMD, STREAM_EVT
from rota.db.engine import async_url
from rota.endpoints import Endpoints
from rota.ids import new_id
from sqlalchemy.ext.asyncio import create_async_engine

from tests.builders import submit_job
from tests.integration.harness import (
    ServiceProcess,
    events,
    eventually,
    fresh_consumers,
    publish_command,
    stream_last_seq,
)

JOBS = 40
PARTITIONED = tuple(
    (stream, f"{durable}-p{i}of2", subject)
    for stream, durable, subject in ((STREAM_CMD, "submission-cancel", "rota.cmd.cancel.*"),
                                     (STREAM_EVT, "submission-projection", "rota.evt.>"))
    for i in range(2))


@pytest.fixture
async def replicas(endpoints: Endpoints, nc: Client, tmp_path: Path
                   ) -> AsyncIterator[list[ServiceProcess]]:
    # Only this test's messages: the server may hold other sessions' (see fresh_consumers).
    await fresh_consumers(nc, PARTITIONED)
    started = [ServiceProcess("submission", endpoints, tmp_path / f"replica-{i}",
                              {"ROTA_REPLICAS": "2", "ROTA_REPLICA": str(i)}).start()
               for i in range(2)]
    try:
        for service in started:
            await service.wait_ready(nc)
        yield started
    finally:
        for service in started:
            service.stop()
        js = nc.jetstream()
        for stream, durable, _ in PARTITIONED:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_consumer(stream, durable)


async def job_history(endpoints: Endpoints, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    engine = create_async_engine(async_url(endpoints.database_url))
    try:
        async with engine.connect() as conn:
            jobs = await conn.execute(sa.text(
                "SELECT job_id, state, attempts, started_at, ended_at, run_id"
                " FROM submission.jobs WHERE job_id = ANY(:ids)"), {"ids": job_ids})
            rows = {r.job_id: dict(r._mapping) for r in jobs}
            counts = await conn.execute(sa.text(
                "SELECT job_id, type, count(*) AS n FROM submission.job_events"
                " WHERE job_id = ANY(:ids) GROUP BY job_id, type"), {"ids": job_ids})
            for r in counts:
                rows[r.job_id].setdefault("events", {})[r.type] = r.n
        return rows
    finally:
        await engine.dispose()


def _event(data: Any, source: str, job_id: str, run_id: str) -> tuple[str, bytes, str]:
    env = envelope(data, source=source, job_id=job_id, run_id=run_id)
    return EVENT_SUBJECTS[env.type], env.to_bytes(), env.id


async def test_two_replicas_record_each_submission_once_and_fold_each_job_in_order(
    nc: Client, endpoints: Endpoints, replicas: list[ServiceProcess],
) -> None:
    since = await stream_last_seq(nc)
    specs = [submit_job(name=f"replica-{i}") for i in range(JOBS)]
    for spec in specs:
        command = envelope(spec, source="test")
        await publish_command(nc, s.submit("nlp"), command.to_bytes(), command.id)
    ours = {spec.submission_id for spec in specs}

    async def submitted() -> list[dict[str, Any]]:
        found = [e for e in await events(nc, "rota.evt.job.submitted", since_seq=since)
                 if e["data"]["spec"]["submission_id"] in ours]
        return found if len({e["data"]["spec"]["submission_id"] for e in found}) == JOBS else []

    recorded = await eventually(submitted, timeout=30)
    # Shared out, and each recorded once: one JobSubmitted per submission.
    assert len(recorded) == JOBS
    job_ids = [e["job_id"] for e in recorded]
    # Both replicas own jobs (the hash spreads them), so both must fold.
    assert {Partition(0, 2).owner(j) for j in job_ids} == {0, 1}

    # Replica 1 stops: the jobs it owns wait for it, the others are folded by replica 0.
    replicas[1].stop()
    mine = [j for j in job_ids if Partition(0, 2).owns(j)]
    theirs = [j for j in job_ids if not Partition(0, 2).owns(j)]

    # Each job's run, published interleaved across jobs, as an executor's outbox would: the
    # order matters; a RunFinished folded before its RunStarted would leave attempts at 0.
    runs = {job_id: new_id() for job_id in job_ids}
    batches = [
        [_event(m.RunStarted(run_id=runs[j], job_id=j, attempt=1,
                             placement=[WorkerPlacement(worker=0, node="h-0", gpus=[0])]),
                "executor", j, runs[j]) for j in job_ids],
        [_event(m.RunCheckpointed(run_id=runs[j], job_id=j, checkpoint_uri=f"file:///c/{j}"),
                "executor", j, runs[j]) for j in job_ids],
        [_event(m.RunFinished(run_id=runs[j], job_id=j), "executor", j, runs[j])
         for j in job_ids],
    ]
    js = nc.jetstream()
    for batch in batches:
        for subject, body, msg_id in batch:
            await js.publish(subject, body, stream=STREAM_EVT, headers={"Nats-Msg-Id": msg_id})

    def folded(ids: list[str]) -> Any:
        async def check() -> dict[str, dict[str, Any]]:
            found = await job_history(endpoints, ids)
            return found if all(r["state"] == "finished" for r in found.values()) else {}

        return check

    await eventually(folded(mine), timeout=30)
    await asyncio.sleep(1.0)
    # Nobody else folds replica 1's jobs: they are as submitted, their events in its durable.
    waiting = await job_history(endpoints, theirs)
    assert {r["state"] for r in waiting.values()} == {"pending"}, waiting
    assert all(r["events"] == {"JobSubmitted": 1} for r in waiting.values())
    replicas[1].start()  # ... and continues from it when it is back
    await replicas[1].wait_ready(nc)
    history = await eventually(folded(job_ids), timeout=30)
    for job_id, row in history.items():
        assert row["attempts"] == 1 and row["started_at"] is not None, (job_id, row)
        assert row["ended_at"] is not None and row["run_id"] == runs[job_id]
        # No duplicate effect: each event in each job's history once.
        assert row["events"] == {"JobSubmitted": 1, "RunStarted": 1, "RunCheckpointed": 1,
                                 "RunFinished": 1}, row
    # Each replica's durable read everything and acked it (its own jobs folded, others skipped).
    for stream, durable, _ in PARTITIONED[2:]:
        info = await js.consumer_info(stream, durable)
        assert info.num_ack_pending == 0 and info.num_pending == 0, (durable, info)
