"""Two ledger replicas (`ROTA_REPLICAS=2`) over real NATS JetStream and PostgreSQL: each flavor
is granted only by the holder of its lease; when that replica is killed, the other takes the
lease over and continues from the flavor's durable; no GPU is ever booked twice."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
import sqlalchemy as sa
from nats.aio.client import Client
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.endpoints import Endpoints
from rota_ledger.owners import BUCKET, EVENTS, flavor_durable, flavor_key
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import ServiceProcess, eventually, fresh_consumers, stream_last_seq
from tests.integration.ledger.conftest import LEDGER_CONSUMERS, decided, ledger_process, publish, truncate
from tests.unit.ledger.builders import proposal, run_ended

TTL_S = 2.0
PROPOSED = EVENT_SUBJECTS["AllocationProposed"]
KEYS = (EVENTS, flavor_key("a100"), flavor_key("h100"))


@pytest.fixture
async def replicas(
    ledger_endpoints: Endpoints, ledger_nc: Client, ledger_engine: AsyncEngine,
    ledger_config_file: Path, tmp_path: Path,
) -> AsyncIterator[list[ServiceProcess]]:
    await truncate(ledger_engine)
    js = ledger_nc.jetstream()
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_key_value(BUCKET)
    # From now on only: the other tests' proposals are decided already.
    await fresh_consumers(ledger_nc, tuple(
        (STREAM_EVT, flavor_durable(f), PROPOSED) for f in ("a100", "h100", "_other")))
    started = [ledger_process(ledger_endpoints, ledger_config_file, tmp_path, f"replica-{i}",
                              ROTA_REPLICAS="2", ROTA_REPLICA=str(i),
                              ROTA_LEDGER_LEASE_TTL_S=str(TTL_S)).start() for i in range(2)]
    try:
        for service in started:
            await service.wait_ready(ledger_nc)
        yield started
    finally:
        for service in started:
            service.stop()
        await truncate(ledger_engine)
        # The single ledger's durables would replay this test's proposals in a later module.
        await fresh_consumers(ledger_nc, LEDGER_CONSUMERS)


async def holders(nc: Client) -> dict[str, int]:
    """Lease key → the pid of the replica that holds it (the holder names its pid)."""
    kv = await nc.jetstream().key_value(BUCKET)
    out = {}
    for key in KEYS:
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            entry = await kv.get(key)
            if entry.value:
                out[key] = int(entry.value.decode().split("-")[-2])
    return out


async def booked_twice(engine: AsyncEngine) -> list[object]:
    async with engine.connect() as conn:
        return list((await conn.execute(sa.text(
            "SELECT node, gpu, count(*) FROM ledger.allocations WHERE released_at IS NULL"
            " GROUP BY node, gpu HAVING count(*) > 1"))).all())


def granted_runs(service: ServiceProcess) -> set[str]:
    return {line.split(" to run ")[1].split()[0] for line in service.log().splitlines()
            if " granted " in line and " to run " in line}


async def test_a_flavor_is_granted_by_its_owner_alone_and_taken_over_when_it_dies(
    ledger_nc: Client, ledger_engine: AsyncEngine, replicas: list[ServiceProcess],
) -> None:
    by_pid = {s.process.pid: s for s in replicas if s.process is not None}

    async def all_held() -> dict[str, int]:
        found = await holders(ledger_nc)
        return found if set(found) == set(KEYS) else {}

    owners = await eventually(all_held, timeout=20)
    # Spread at start: each replica asks first for its own keys.
    assert set(owners.values()) == set(by_pid), owners
    h100_owner = by_pid[owners[flavor_key("h100")]]
    (other,) = [s for s in replicas if s is not h100_owner]

    since = await stream_last_seq(ledger_nc)
    now = datetime.now(UTC)
    first = [proposal([("h-0", [0, 1])], now), proposal([("h-1", [0])], now),
             proposal([("a-0", [0, 1])], now, flavor="a100", team="vision", user="carol"),
             proposal([("h-0", [1, 2])], now)]  # a rival of the first: GPU h-0/1
    for env in first:
        await publish(ledger_nc, env)
    verdicts = {e["data"]["proposal_id"]: e for e in await decided(ledger_nc, since, *first)}
    assert [verdicts[p.data.proposal_id]["type"] for p in first] == [
        "AllocationGranted", "AllocationGranted", "AllocationGranted", "AllocationRejected"]
    h100_runs = {first[0].data.run_id, first[1].data.run_id}
    a100_run = first[2].data.run_id
    # A replica without the flavor's lease granted nothing on it.
    a100_owner = by_pid[owners[flavor_key("a100")]]
    for service in replicas:
        assert (h100_runs <= granted_runs(service)) == (service is h100_owner), service.log()[-2000:]
        assert (a100_run in granted_runs(service)) == (service is a100_owner)

    # Kill the h100 owner outright (no lease release) and propose while no one owns h100.
    assert h100_owner.process is not None
    h100_owner.process.kill()
    h100_owner.process.wait()
    since = await stream_last_seq(ledger_nc)
    later = datetime.now(UTC)
    second = [proposal([("h-0", [0])], later),   # taken by the first grant: rejected
              proposal([("h-2", [0, 1, 2, 3])], later),
              proposal([("a-0", [2, 3])], later, flavor="a100", team="vision", user="carol")]
    for env in second:
        await publish(ledger_nc, env)
    # Releases go on too: the dead replica held `events` or the survivor did; either way one
    # replica has it after the takeover.
    await publish(ledger_nc, run_ended("RunFinished", first[1], later))
    verdicts = {e["data"]["proposal_id"]: e
                for e in await decided(ledger_nc, since, *second)}
    assert [verdicts[p.data.proposal_id]["type"] for p in second] == [
        "AllocationRejected", "AllocationGranted", "AllocationGranted"]
    assert verdicts[second[0].data.proposal_id]["data"]["code"] in ("GPU_TAKEN",
                                                                      "HELD_FOR_PREEMPTOR")
    after = await holders(ledger_nc)
    assert after == dict.fromkeys(KEYS, other.process.pid if other.process else -1)
    assert second[1].data.run_id in granted_runs(other)
    assert "owns flavor.h100" in other.log()

    async def released() -> bool:
        async with ledger_engine.connect() as conn:
            return bool((await conn.execute(sa.text(
                "SELECT 1 FROM ledger.allocations WHERE run_id = :r AND released_at IS NOT NULL"),
                {"r": first[1].data.run_id})).first())

    await eventually(released)
    # The freed GPU can be granted again, once.
    since = await stream_last_seq(ledger_nc)
    third = [proposal([("h-1", [0])], datetime.now(UTC)),
             proposal([("h-1", [0])], datetime.now(UTC))]
    for env in third:
        await publish(ledger_nc, env)
    outcome = sorted(e["type"] for e in await decided(ledger_nc, since, *third))
    assert outcome == ["AllocationGranted", "AllocationRejected"]
    assert await booked_twice(ledger_engine) == []
    # Every proposal was answered exactly once, across both replicas and the takeover.
    answers = [json.loads(r) for r in await _verdict_payloads(ledger_engine)]
    ids = [a["data"]["proposal_id"] for a in answers]
    assert sorted(ids) == sorted({*ids}) and len(ids) == len(first) + len(second) + len(third)


async def _verdict_payloads(engine: AsyncEngine) -> list[bytes]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text(
            "SELECT payload FROM ledger.outbox WHERE subject IN (:g, :r)"),
            {"g": EVENT_SUBJECTS["AllocationGranted"], "r": EVENT_SUBJECTS["AllocationRejected"]})
        return [bytes(r.payload) for r in rows]
