"""The scheduler process on a NATS server of its own (its view is the whole stream, so a
shared server's history from other tests would be scheduled too) and the session's database.
The test plays the ledger and the executor by publishing their events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from rota.bus.broker import ensure_streams, publish_headers
from rota.contracts import JobSpec, envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, RUN_START, STREAM_CMD, STREAM_EVT
from rota.embedded import EmbeddedNats
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.builders import spec_doc
from tests.integration.harness import ServiceProcess, events, eventually

SETTINGS = {"ROTA_SCHEDULER_TICK_S": "0.5", "ROTA_SCHEDULER_LEASE_TTL_S": "2"}


@pytest.fixture
async def private(endpoints: Endpoints, tmp_path: Path) -> AsyncIterator[tuple[Endpoints, Client]]:
    server = EmbeddedNats(tmp_path / "nats-home")
    url = server.start()
    client = await nats.connect(url)
    await ensure_streams(client.jetstream())
    try:
        yield Endpoints(url, endpoints.database_url), client
    finally:
        await client.close()
        server.stop()


async def publish(nc: Client, data: Any, job_id: str | None = None, run_id: str | None = None) -> None:
    env = envelope(data, source="test", job_id=job_id, run_id=run_id)
    await nc.jetstream().publish(EVENT_SUBJECTS[env.type], env.to_bytes(), stream=STREAM_EVT,
                                 headers=publish_headers(env))


async def submit(nc: Client, **spec: Any) -> str:
    from datetime import UTC, datetime

    job_id = new_id()
    await publish(nc, m.JobSubmitted(job_id=job_id, spec=JobSpec.model_validate(spec_doc(**spec)),
                                     submitted_at=datetime.now(UTC)), job_id=job_id)
    return job_id


async def proposals(nc: Client, job_id: str) -> list[dict[str, Any]]:
    return [e for e in await events(nc, EVENT_SUBJECTS["AllocationProposed"]) if e["job_id"] == job_id]


async def starts(nc: Client, job_id: str) -> list[dict[str, Any]]:
    return [e for e in await events(nc, RUN_START, stream=STREAM_CMD) if e["job_id"] == job_id]


async def test_propose_start_and_fail_over_without_repeating(
    private: tuple[Endpoints, Client], tmp_path: Path
) -> None:
    endpoints, nc = private
    leader = ServiceProcess("scheduler", endpoints, tmp_path / "a", SETTINGS).start()
    standby: ServiceProcess | None = None
    try:
        await leader.wait_ready(nc)
        job = await submit(nc, workers=2)
        [proposal] = await eventually(lambda: proposals(nc, job))
        data = proposal["data"]
        granted = m.AllocationGranted(**{k: data[k] for k in (
            "proposal_id", "job_id", "run_id", "team", "flavor", "placement", "gpus")})
        await publish(nc, granted, job_id=job, run_id=data["run_id"])
        [start] = await eventually(lambda: starts(nc, job))
        assert start["data"]["run_id"] == data["run_id"]
        assert "run_token" not in start["data"]  # the executor mints it; no stream holds it
        assert start["data"]["spec"]["workers"] == 2

        standby = ServiceProcess("scheduler", endpoints, tmp_path / "b", SETTINGS).start()
        await standby.wait_ready(nc)
        await eventually(lambda: _logged(standby, "standing by"), timeout=30)
        assert "view rebuilt" not in standby.log()
        assert leader.process is not None
        leader.process.kill()  # kill -9: no lease release, the TTL must expire
        await eventually(lambda: _logged(standby, "view rebuilt"), timeout=30)

        second = await submit(nc, workers=1, team="vision", user="carol")
        await eventually(lambda: proposals(nc, second))
        await asyncio.sleep(1.5)  # three ticks of the new leader: room to repeat, if it would
        assert len(await proposals(nc, job)) == 1
        assert len(await starts(nc, job)) == 1
    finally:
        leader.stop()
        if standby is not None:
            standby.stop()


async def _logged(service: ServiceProcess, text: str) -> bool:
    return text in service.log()


async def test_an_elastic_gang_is_proposed_at_the_largest_size_that_fits(
    private: tuple[Endpoints, Client], tmp_path: Path
) -> None:
    """`workers: {min: 2, max: 8}` of 8 GPUs on the 4 h100 nodes of the default config: the
    proposal holds 4 workers and says 32 GPUs, what the ledger checks against the placement."""
    endpoints, nc = private
    scheduler = ServiceProcess("scheduler", endpoints, tmp_path / "a", SETTINGS).start()
    try:
        await scheduler.wait_ready(nc)
        job = await submit(nc, workers={"min": 2, "max": 8}, gpus_per_worker=8)
        [proposal] = await eventually(lambda: proposals(nc, job))
        data = proposal["data"]
        assert len(data["placement"]) == 4
        assert data["gpus"] == sum(len(w["gpus"]) for w in data["placement"]) == 32
    finally:
        scheduler.stop()


async def _waits(nc: Client, job_id: str) -> list[dict[str, Any]]:
    return [e for e in await events(nc, EVENT_SUBJECTS["JobPending"]) if e["job_id"] == job_id]


async def test_a_job_no_running_executor_can_run_waits_until_one_that_can_announces_itself(
    private: tuple[Endpoints, Client], tmp_path: Path
) -> None:
    """The local executor announced: a job with only a `sim` section is not proposed (its
    StartRun would fail there) but waits with NO_EXECUTOR, which says what to do, while a job
    with a command is proposed. The simulator announced in the same replica's place: the held
    job is proposed."""
    endpoints, nc = private
    scheduler = ServiceProcess("scheduler", endpoints, tmp_path / "a", SETTINGS).start()
    try:
        await scheduler.wait_ready(nc)
        await publish(nc, m.ExecutorAnnounced(backend="local", needs="local", instance=new_id(),
                                              valid_for_s=600.0))
        sim_only = await submit(nc, sim={"duration_s": 60.0})
        with_command = await submit(nc, local={"command": ["python", "train.py"]})
        await eventually(lambda: proposals(nc, with_command))

        async def held() -> dict[str, Any] | None:
            waits = await _waits(nc, sim_only)
            return waits[-1] if waits else None

        wait = (await eventually(held))["data"]
        [reason] = wait["reasons"]
        assert reason["code"] == "NO_EXECUTOR" and wait["eta"] is None and wait["position"] == 0
        assert reason["details"]["executors"] == "local" and reason["details"]["sections"] == "sim"
        assert "it has only a `sim` section; the local executor runs jobs with a `local`" \
            " section (a command)" in reason["message"]
        await asyncio.sleep(1.5)  # three ticks: room to propose it, if it would
        assert await proposals(nc, sim_only) == []

        await publish(nc, m.ExecutorAnnounced(backend="sim", instance=new_id(), valid_for_s=600.0))
        [proposal] = await eventually(lambda: proposals(nc, sim_only))
        assert proposal["data"]["job_id"] == sim_only
    finally:
        scheduler.stop()
