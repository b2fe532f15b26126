"""Elastic gangs live (DECISIONS 81, 82): the scheduler, ledger, coordinator and a `sim`
executor as real processes on a NATS server and a database of their own (the scheduler's view
is the whole stream, and the ledger's GPUs are the whole table, so neither may share them).

A production job shrinks a running elastic gang (2 to 4 workers of 2 GPUs, on one node of 8):
the victim saves, its saga ends `shrunk`, it restarts at 2 workers on the GPUs it kept and the
preemptor runs on the dropped ones. And a gang below its max grows onto GPUs that went idle,
through a grow's saga that preempts nobody.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from nats.aio.client import Client
from rota.bus.broker import ensure_streams, publish_headers
from rota.config import load_config
from rota.contracts import JobSpec, envelope
from rota.contracts import messages as m
from rota.contracts.subjects import (
    EVENT_SUBJECTS,
    LEDGER_ALLOCATIONS,
    PREEMPTION_PLANS,
    STREAM_EVT,
)
from rota.db.engine import async_url
from rota.embedded import EmbeddedNats
from rota.endpoints import Endpoints
from rota.ids import new_id
from sqlalchemy.engine import make_url

from tests.builders import spec_doc
from tests.conftest import _admin
from tests.integration.harness import ServiceProcess, api, events, eventually

CONFIG: dict[str, Any] = {
    "cluster": {"flavors": [{"name": "h100"}],
                "nodes": [{"name": "node-0", "flavor": "h100", "gpus": 8}]},
    "queues": {"production": {"preemptible": False, "preemption_grace_s": 60},
               "training": {"preemption_grace_s": 60},
               "experiment": {"preemption_grace_s": 60}},
    "teams": {"nlp": {"quota": {"h100": 8}}, "research": {"quota": {"h100": 0}}},
    "preemption": {"min_runtime_s": 1, "delay_s": 0},
    "policy": {"grow_after_s": 1},
}
SERVICES = ("ledger", "preemption", "executor", "scheduler")
SETTINGS = {"ROTA_SCHEDULER_TICK_S": "0.5", "ROTA_PREEMPTION_TIMER_INTERVAL_S": "0.2",
            "ROTA_SIM_TICK_S": "0.1", "ROTA_SCHEDULER_LEASE_TTL_S": "2"}


@dataclass
class Stack:
    nc: Client
    services: dict[str, ServiceProcess]

    async def publish(self, data: Any, job_id: str | None = None) -> None:
        env = envelope(data, source="test", job_id=job_id)
        await self.nc.jetstream().publish(EVENT_SUBJECTS[env.type], env.to_bytes(),
                                          stream=STREAM_EVT, headers=publish_headers(env))

    async def submit(self, **spec: Any) -> str:
        job_id = new_id()
        await self.publish(m.JobSubmitted(
            job_id=job_id, spec=JobSpec.model_validate(spec_doc(**spec)),
            submitted_at=datetime.now(UTC)), job_id=job_id)
        return job_id

    async def of(self, kind: str, job_id: str | None = None) -> list[dict[str, Any]]:
        found = await events(self.nc, EVENT_SUBJECTS[kind])
        return [e for e in found if job_id is None or e["job_id"] == job_id]

    async def active_gpus(self) -> list[tuple[str, int, str]]:
        """(node, GPU, run) of every active allocation, as the ledger, the only writer, has it."""
        reply = await api(self.nc, LEDGER_ALLOCATIONS, m.ListAllocations(active_only=True))
        assert reply.ok, reply.error
        return [(w["node"], g, row["run_id"]) for row in reply.result["allocations"]
                for w in row["placement"] for g in w["gpus"]]

    async def kill_scheduler(self) -> None:
        """kill -9 the scheduler, then start another, which replays the stream to lead."""
        old = self.services["scheduler"]
        assert old.process is not None
        old.process.kill()
        old.process.wait()
        new = ServiceProcess("scheduler", old.endpoints, old.log_dir / "again", old.extra_env)
        self.services["scheduler"] = new.start()
        await new.wait_ready(self.nc)

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{s.log()[-3000:]}" for name, s in self.services.items())


@asynccontextmanager
async def live_services(
    server_endpoints: Endpoints, tmp_path: Path, config_doc: dict[str, Any],
    names: tuple[str, ...], prefix: str,
) -> AsyncIterator[tuple[Client, dict[str, ServiceProcess], str]]:
    """`names` as real processes on a NATS server and a database of their own, with
    `config_doc` as their rota.yaml; yields the client, the services and the database URL."""
    server = EmbeddedNats(tmp_path / "nats-home")
    url = server.start()
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    await _admin(server_endpoints.database_url, f'CREATE DATABASE "{name}"')
    database = make_url(async_url(server_endpoints.database_url)).set(database=name)
    endpoints = Endpoints(url, database.render_as_string(hide_password=False))
    config = tmp_path / "rota.yaml"
    config.write_text(yaml.safe_dump(config_doc))
    load_config(config)
    client = await nats.connect(url)
    await ensure_streams(client.jetstream())
    services = {
        svc: ServiceProcess(svc, endpoints, tmp_path / svc, {
            **SETTINGS, "ROTA_CONFIG": str(config), "ROTA_HOME": str(tmp_path / svc)})
        for svc in names
    }
    try:
        for service in services.values():
            service.start()
        for service in services.values():
            await service.wait_ready(client)
        yield client, services, endpoints.database_url
    finally:
        for service in services.values():
            service.stop()
        await client.close()
        server.stop()
        await _admin(server_endpoints.database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
async def stack(server_endpoints: Endpoints, tmp_path: Path) -> AsyncIterator[Stack]:
    async with live_services(server_endpoints, tmp_path, CONFIG, SERVICES, "rota_elastic") as (
        client, services, _,
    ):
        yield Stack(client, services)


def _gpus(placement: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(w["node"], g) for w in placement for g in w["gpus"]}


async def _one(stack: Stack, kind: str, job_id: str, count: int = 1) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        found = await stack.of(kind, job_id)
        return found if len(found) >= count else None

    try:
        found: list[dict[str, Any]] = await eventually(enough, timeout=60)
    except AssertionError:
        raise AssertionError(f"no {count} {kind} for {job_id}:\n{stack.logs()}") from None
    return found


@pytest.mark.parametrize("scheduler_killed", [False, True], ids=["", "scheduler-killed"])
async def test_a_production_job_shrinks_an_elastic_gang_which_restarts_on_the_gpus_it_kept(
    stack: Stack, scheduler_killed: bool,
) -> None:
    """`scheduler-killed`: kill -9 once the plan is out; the next leader, rebuilt from the
    stream, still holds the kept GPUs for the gang's restart."""
    gang = await stack.submit(
        name="elastic-sweep", team="research", user="dave", queue="experiment",
        workers={"min": 2, "max": 4}, gpus_per_worker=2, resumable=True,
        sim={"duration_s": 36_000, "checkpoint_interval_s": 5,
             "checkpoint_save_s": 4 if scheduler_killed else 1})
    [first] = await _one(stack, "RunStarted", gang)
    [proposed] = await _one(stack, "AllocationProposed", gang)
    assert len(proposed["data"]["placement"]) == 4  # all 8 GPUs, borrowed
    await asyncio.sleep(1.5)  # past its minimum runtime

    urgent = await stack.submit(
        name="release", team="nlp", user="alice", queue="production", workers=2,
        gpus_per_worker=2, sim={"duration_s": 600})  # running still when the ledger is read
    [plan] = await _one(stack, "PreemptionRequested", urgent)
    if scheduler_killed:
        await stack.kill_scheduler()
    [victim] = plan["data"]["victims"]
    assert (victim["job_id"], victim["shrink_to"], victim["gpus"]) == (gang, 2, 4)
    [noticed] = await _one(stack, "PreemptionNoticed", gang)
    assert noticed["data"]["shrink_to"] == 2

    [done] = [e for e in await _one(stack, "PreemptionCompleted", urgent)]
    [result] = done["data"]["victims"]
    assert result["outcome"] == "shrunk"
    stopped = [e for e in await _one(stack, "RunStopped", gang)
               if e["run_id"] == first["run_id"]]
    assert stopped[0]["data"]["reason"] == "preempted" and not stopped[0]["data"]["forced"]

    _, again = await _one(stack, "RunStarted", gang, count=2)
    assert again["data"]["attempt"] == 2
    assert again["data"]["resumed_from"] == result["checkpoint_uri"]
    kept = proposed["data"]["placement"][:2]
    assert [(w["node"], w["gpus"]) for w in again["data"]["placement"]] == [
        (w["node"], w["gpus"]) for w in kept]
    [started] = await _one(stack, "RunStarted", urgent)
    dropped = _gpus(proposed["data"]["placement"][2:])
    assert _gpus(started["data"]["placement"]) == dropped
    # While both run, the ledger holds every GPU once: the gang's 4 kept, the preemptor's 4.
    held = await stack.active_gpus()
    owners = {(node, gpu): run for node, gpu, run in held}
    assert len(held) == len(owners)
    assert {k for k, run in owners.items() if run == again["run_id"]} == _gpus(kept)


async def test_an_elastic_gang_grows_onto_gpus_that_went_idle_without_a_preemption(
    stack: Stack,
) -> None:
    first = await stack.submit(name="short", team="nlp", user="alice", queue="production",
                               workers=2, gpus_per_worker=2, sim={"duration_s": 4})
    [busy] = await _one(stack, "RunStarted", first)
    gang = await stack.submit(
        name="elastic-train", team="nlp", user="bob", queue="training",
        workers={"min": 2, "max": 4}, gpus_per_worker=2, resumable=True,
        sim={"duration_s": 36_000, "checkpoint_interval_s": 5, "checkpoint_save_s": 1})
    [small] = await _one(stack, "RunStarted", gang)
    assert len(small["data"]["placement"]) == 2  # the other 4 GPUs are the short job's

    [grow] = await _one(stack, "GrowRequested", gang)
    assert (grow["run_id"], grow["data"]["workers"], grow["data"]["added_gpus"]) == (
        small["run_id"], 4, 4)
    assert _gpus(grow["data"]["target"][2:]) == _gpus(busy["data"]["placement"])
    [done] = await _one(stack, "GrowCompleted", gang)
    assert done["data"]["outcome"] == "grown"
    stopped = [e for e in await _one(stack, "RunStopped", gang) if e["run_id"] == small["run_id"]]
    assert stopped[0]["data"]["reason"] == "resized"

    _, grown = await _one(stack, "RunStarted", gang, count=2)
    assert grown["data"]["resumed_from"] == done["data"]["checkpoint_uri"]
    assert [(w["node"], w["gpus"]) for w in grown["data"]["placement"]] == [
        (w["node"], w["gpus"]) for w in grow["data"]["target"]]
    # No preemption: nothing was asked of the coordinator's preemption plans or noticed.
    assert await stack.of("PreemptionRequested") == []
    assert await stack.of("PreemptionNoticed") == []
    plans = await api(stack.nc, PREEMPTION_PLANS, m.ListPreemptions(job_id=gang))
    assert plans.ok and plans.result == []  # the coordinator lists its grow as no preemption
    held = await stack.active_gpus()
    assert len(held) == len({(node, gpu) for node, gpu, _ in held}) == 8
