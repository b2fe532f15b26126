"""The real `python -m rota_ledger` process over real NATS JetStream and PostgreSQL.

Every assertion still picks events by this test's own proposal, run or plan ids, so the
tests do not depend on one another's leftovers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from rota.contracts import messages as m
from rota.endpoints import Endpoints
from rota_ledger.api import ALLOCATIONS_SUBJECT
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import ServiceProcess, api, events, eventually, stream_last_seq
from tests.integration.ledger.conftest import decided, decisions, ledger_process, logged, publish, rows
from tests.unit.ledger.builders import preemption_requested, proposal, run_ended


@pytest.fixture(scope="module")
async def ledger_service(
    ledger_endpoints: Endpoints, ledger_nc: Client, ledger_engine: AsyncEngine,
    ledger_config_file: Path, tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ServiceProcess]:
    """One ledger per module; the crash tests start their own, so it must not linger."""
    service = ledger_process(ledger_endpoints, ledger_config_file, tmp_path_factory.mktemp("logs")).start()
    await service.wait_ready(ledger_nc)
    yield service
    service.stop()


async def active(nc: Client, job_id: str) -> list[dict[str, Any]]:
    reply = await api(nc, ALLOCATIONS_SUBJECT, m.ListAllocations(job_id=job_id))
    assert reply.ok, reply.error
    return list(reply.result["allocations"])


async def test_a_proposal_is_granted_listed_and_released_over_nats(ledger_nc: Client, ledger_service: ServiceProcess) -> None:
    since = await stream_last_seq(ledger_nc)
    env = proposal([("h-0", [0, 1])], datetime.now(UTC), user="bob")
    await publish(ledger_nc, env)
    (granted,) = await decided(ledger_nc, since, env)
    assert granted["type"] == "AllocationGranted", granted["data"]
    assert granted["source"] == "ledger" and granted["data"]["run_id"] == env.data.run_id
    (run,) = await active(ledger_nc, env.data.job_id)
    assert run["placement"] == [w.model_dump() for w in env.data.placement]

    await publish(ledger_nc, run_ended("RunFinished", env, datetime.now(UTC)))

    async def released() -> list[dict[str, Any]]:
        found = await events(ledger_nc, "rota.evt.allocation.released", since_seq=since)
        return [e for e in found if e["data"]["run_id"] == env.data.run_id]

    (done,) = await eventually(released)
    assert done["data"]["gpus"] == 2
    usage = [e for e in await events(ledger_nc, "rota.evt.usage.recorded", since_seq=since)
             if e["occurred_at"] == done["occurred_at"] and e["source"] == "ledger"]
    assert usage and "nlp" in usage[0]["data"]["teams"] and "nlp/bob" in usage[0]["data"]["users"]
    assert await active(ledger_nc, env.data.job_id) == []


async def test_rival_proposals_published_at_once_never_double_book(
    ledger_nc: Client, ledger_service: ServiceProcess, ledger_engine: AsyncEngine,
) -> None:
    """As from a stale scheduler. (Concurrent transactions on one GPU are raced in-process,
    in `test_ledger_rules`: a second ledger on the same durable would not reliably get any of
    these, since the first one's pull takes the whole batch.)"""
    since = await stream_last_seq(ledger_nc)
    now = datetime.now(UTC)
    # Three GPU sets with four rival proposals each, some overlapping two of them at once.
    racers = [proposal(on, now, team="vision", user="carol") for on in (
        [("h-1", [0, 1])], [("h-1", [1, 2])], [("h-1", [2, 3])], [("h-1", [0, 3])],
        [("h-2", [0])], [("h-2", [0])], [("h-2", [0])], [("h-2", [0])],
        [("h-3", [0, 1, 2, 3])], [("h-3", [3])], [("h-3", [1])], [("h-3", [0, 1, 2, 3])],
    )]
    await asyncio.gather(*(publish(ledger_nc, env) for env in racers))
    outcome = await decided(ledger_nc, since, *racers)
    assert len(outcome) == len(racers)  # one decision per proposal, never two
    granted = [e for e in outcome if e["type"] == "AllocationGranted"]
    assert {e["data"]["code"] for e in outcome if e["type"] == "AllocationRejected"} == {"GPU_TAKEN"}
    gpus = [(w["node"], g) for e in granted for w in e["data"]["placement"] for g in w["gpus"]]
    assert len(gpus) == len(set(gpus)), "a GPU was granted twice"
    assert {node for node, _ in gpus} == {"h-1", "h-2", "h-3"}
    held = [(r.node, r.gpu) for r in await rows(ledger_engine, "allocations")
            if r.released_at is None and r.run_id in {p.data.run_id for p in racers}]
    assert sorted(held) == sorted(gpus)
    for env in racers:
        await publish(ledger_nc, run_ended("RunFinished", env, datetime.now(UTC)))


async def test_a_proposal_published_twice_is_decided_once(ledger_nc: Client, ledger_service: ServiceProcess, ledger_engine: AsyncEngine) -> None:
    since = await stream_last_seq(ledger_nc)
    env = proposal([("h-0", [2])], datetime.now(UTC))
    # Two Nats-Msg-Ids, so JetStream keeps both copies and the ledger sees the proposal twice.
    await publish(ledger_nc, env, msg_id=f"{env.id}-a")
    await publish(ledger_nc, env, msg_id=f"{env.id}-b")
    await logged(ledger_service, f"proposal {env.data.proposal_id} decided already")
    found = await decisions(ledger_nc, since, {env.data.proposal_id})
    assert [e["type"] for e in found] == ["AllocationGranted"]
    assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1
    await publish(ledger_nc, run_ended("RunFinished", env, datetime.now(UTC)))


async def test_gpus_held_for_a_plan_wait_for_its_preemptor(ledger_nc: Client, ledger_service: ServiceProcess) -> None:
    since = await stream_last_seq(ledger_nc)
    now = datetime.now(UTC)
    victim = proposal([("h-0", [3])], now, queue="experiment")
    await publish(ledger_nc, victim)
    await decided(ledger_nc, since, victim)
    requested = preemption_requested([victim], now)
    await publish(ledger_nc, requested)
    await logged(ledger_service, f"plan {requested.data.plan_id}: 1 GPUs held")
    await publish(ledger_nc, run_ended("RunStopped", victim, datetime.now(UTC)))
    await eventually(lambda: _released(ledger_nc, since, victim.data.run_id))

    intruder = proposal([("h-0", [3])], now, team="vision", user="carol")
    await publish(ledger_nc, intruder)
    (rejected,) = await decided(ledger_nc, since, intruder)
    assert rejected["data"]["code"] == "HELD_FOR_PREEMPTOR"
    preemptor = proposal([("h-0", [3])], now, team="vision", user="carol", queue="production",
                         plan_id=requested.data.plan_id, job_id=requested.data.preemptor_job_id)
    await publish(ledger_nc, preemptor)
    (granted,) = await decided(ledger_nc, since, preemptor)
    assert granted["type"] == "AllocationGranted"
    await publish(ledger_nc, run_ended("RunFinished", preemptor, datetime.now(UTC)))


async def _released(nc: Client, since: int, run_id: str) -> bool:
    found = await events(nc, "rota.evt.allocation.released", since_seq=since)
    return any(e["data"]["run_id"] == run_id for e in found)


