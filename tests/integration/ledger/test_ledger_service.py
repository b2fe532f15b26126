"""The real `python -m rota_ledger` process over real NATS JetStream and PostgreSQL.

The streams are shared with other tests and sessions, so every assertion picks events by this
test's own proposal, run or plan ids."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from rota.bus.broker import publish_headers
from rota.contracts import Envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.endpoints import Endpoints
from rota_ledger.api import ALLOCATIONS_SUBJECT
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import ServiceProcess, api, events, eventually, stream_last_seq
from tests.integration.ledger.conftest import ledger_process, rows
from tests.unit.ledger.builders import preemption_requested, proposal, run_ended


@pytest.fixture(scope="module")
async def ledger_service(
    endpoints: Endpoints, nc: Client, ledger_consumers: None, ledger_engine: AsyncEngine,
    ledger_config_file: Path, tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ServiceProcess]:
    """One ledger per module; the crash tests start their own, so it must not linger."""
    service = ledger_process(endpoints, ledger_config_file, tmp_path_factory.mktemp("logs")).start()
    await service.wait_ready(nc)
    yield service
    service.stop()


async def publish(nc: Client, env: Envelope[Any], *, msg_id: str | None = None) -> None:
    headers = publish_headers(env)
    if msg_id is not None:
        headers["Nats-Msg-Id"] = msg_id
    await nc.jetstream().publish(EVENT_SUBJECTS[env.type], env.to_bytes(), stream=STREAM_EVT,
                                 headers=headers)


async def decisions(nc: Client, since: int, proposal_ids: set[str]) -> list[dict[str, Any]]:
    """AllocationGranted / AllocationRejected for these proposals, in stream order."""
    found = await events(nc, "rota.evt.allocation.*", since_seq=since)
    return [e for e in found if e["type"] in ("AllocationGranted", "AllocationRejected")
            and e["data"]["proposal_id"] in proposal_ids]


async def decided(nc: Client, since: int, *proposed: Envelope[Any]) -> list[dict[str, Any]]:
    ids = {p.data.proposal_id for p in proposed}

    async def all_decided() -> list[dict[str, Any]]:
        found = await decisions(nc, since, ids)
        return found if {e["data"]["proposal_id"] for e in found} == ids else []

    return list(await eventually(all_decided))


async def active(nc: Client, job_id: str) -> list[dict[str, Any]]:
    reply = await api(nc, ALLOCATIONS_SUBJECT, m.ListAllocations(job_id=job_id))
    assert reply.ok, reply.error
    return list(reply.result["allocations"])


async def test_a_proposal_is_granted_listed_and_released_over_nats(nc: Client, ledger_service: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    env = proposal([("h-0", [0, 1])], datetime.now(UTC), user="bob")
    await publish(nc, env)
    (granted,) = await decided(nc, since, env)
    assert granted["type"] == "AllocationGranted", granted
    assert granted["source"] == "ledger" and granted["data"]["run_id"] == env.data.run_id
    (run,) = await active(nc, env.data.job_id)
    assert run["placement"] == [w.model_dump() for w in env.data.placement]

    await publish(nc, run_ended("RunFinished", env, datetime.now(UTC)))

    async def released() -> list[dict[str, Any]]:
        found = await events(nc, "rota.evt.allocation.released", since_seq=since)
        return [e for e in found if e["data"]["run_id"] == env.data.run_id]

    (done,) = await eventually(released)
    assert done["data"]["gpus"] == 2
    usage = [e for e in await events(nc, "rota.evt.usage.recorded", since_seq=since)
             if e["occurred_at"] == done["occurred_at"] and e["source"] == "ledger"]
    assert usage and "nlp" in usage[0]["data"]["teams"] and "nlp/bob" in usage[0]["data"]["users"]
    assert await active(nc, env.data.job_id) == []


async def test_racing_proposals_across_two_ledgers_never_double_book(
    nc: Client, ledger_service: ServiceProcess, endpoints: Endpoints, ledger_engine: AsyncEngine,
    ledger_config_file: Path, tmp_path: Path,
) -> None:
    second = ledger_process(endpoints, ledger_config_file, tmp_path, name="second").start()
    try:
        await second.wait_ready(nc)
        since = await stream_last_seq(nc)
        now = datetime.now(UTC)
        # Three GPU sets, four rival proposals each, some overlapping two sets at once.
        racers = [proposal(on, now, team="vision", user="carol") for on in (
            [("h-1", [0, 1])], [("h-1", [1, 2])], [("h-1", [2, 3])], [("h-1", [0, 3])],
            [("h-2", [0])], [("h-2", [0])], [("h-2", [0])], [("h-2", [0])],
            [("h-3", [0, 1, 2, 3])], [("h-3", [3])], [("h-3", [1])], [("h-3", [0, 1, 2, 3])],
        )]
        await asyncio.gather(*(publish(nc, env) for env in racers))
        outcome = await decided(nc, since, *racers)
        assert len(outcome) == len(racers)  # one decision per proposal, never two
        granted = [e for e in outcome if e["type"] == "AllocationGranted"]
        assert {e["data"]["code"] for e in outcome if e["type"] == "AllocationRejected"} == {"GPU_TAKEN"}
        gpus = [(w["node"], g) for e in granted for w in e["data"]["placement"] for g in w["gpus"]]
        assert len(gpus) == len(set(gpus)), "a GPU was granted twice"
        assert {node for node, _ in gpus} == {"h-1", "h-2", "h-3"}
        held = [(r.node, r.gpu) for r in await rows(ledger_engine, "allocations")
                if r.released_at is None and r.run_id in {p.data.run_id for p in racers}]
        assert sorted(held) == sorted(gpus)
        assert "fault" not in second.log() and "Traceback" not in second.log()
    finally:
        second.stop()
        for env in racers:
            await publish(nc, run_ended("RunFinished", env, datetime.now(UTC)))


async def test_a_proposal_published_twice_is_decided_once(nc: Client, ledger_service: ServiceProcess, ledger_engine: AsyncEngine) -> None:
    since = await stream_last_seq(nc)
    env = proposal([("h-0", [2])], datetime.now(UTC))
    # Two Nats-Msg-Ids, so JetStream keeps both copies and the ledger sees the proposal twice.
    await publish(nc, env, msg_id=f"{env.id}-a")
    await publish(nc, env, msg_id=f"{env.id}-b")
    await eventually(lambda: _log_has(ledger_service, f"proposal {env.data.proposal_id} decided already"))
    found = await decisions(nc, since, {env.data.proposal_id})
    assert [e["type"] for e in found] == ["AllocationGranted"]
    assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1
    await publish(nc, run_ended("RunFinished", env, datetime.now(UTC)))


async def test_gpus_held_for_a_plan_wait_for_its_preemptor(nc: Client, ledger_service: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    now = datetime.now(UTC)
    victim = proposal([("h-0", [3])], now, queue="experiment")
    await publish(nc, victim)
    await decided(nc, since, victim)
    requested = preemption_requested([victim], now)
    await publish(nc, requested)
    await eventually(lambda: _log_has(ledger_service, f"plan {requested.data.plan_id}: 1 GPUs held"))
    await publish(nc, run_ended("RunStopped", victim, datetime.now(UTC)))
    await eventually(lambda: _released(nc, since, victim.data.run_id))

    intruder = proposal([("h-0", [3])], now, team="vision", user="carol")
    await publish(nc, intruder)
    (rejected,) = await decided(nc, since, intruder)
    assert rejected["data"]["code"] == "HELD_FOR_PREEMPTOR"
    preemptor = proposal([("h-0", [3])], now, team="vision", user="carol", queue="production",
                         plan_id=requested.data.plan_id, job_id=requested.data.preemptor_job_id)
    await publish(nc, preemptor)
    (granted,) = await decided(nc, since, preemptor)
    assert granted["type"] == "AllocationGranted"
    await publish(nc, run_ended("RunFinished", preemptor, datetime.now(UTC)))


async def _log_has(service: ServiceProcess, text: str) -> bool:
    return text in service.log()


async def _released(nc: Client, since: int, run_id: str) -> bool:
    found = await events(nc, "rota.evt.allocation.released", since_seq=since)
    return any(e["data"]["run_id"] == run_id for e in found)


