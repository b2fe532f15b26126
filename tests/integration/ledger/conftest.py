"""The ledger against real PostgreSQL and, for its process tests, real NATS JetStream.

`ledger_engine` migrates the session database's `ledger` schema. In-process tests drive a
`Ledger` on a `FakeClock` and read what it queued in its outbox. Process tests run
`python -m rota_ledger` against a nats-server of their own (`ledger_nc`): a ledger answers
every `AllocationProposed` it sees, and its durables are named for the service, so on a shared
server it would decide other sessions' proposals (publishing rejections into their tests),
and another session's ledger would take a share of this one's. Everything else is as on the
shared server: JetStream, the three streams, durables recreated once per session.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
import sqlalchemy as sa
import yaml
from nats.aio.client import Client
from rota.bus.broker import ensure_streams, publish_headers
from rota.clock import FakeClock
from rota.contracts import Envelope
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.db import migrate
from rota.db.engine import make_engine
from rota.db.outbox import Outbox
from rota.embedded import EmbeddedNats
from rota.endpoints import Endpoints
from rota_ledger.app import MIGRATIONS
from rota_ledger.ledger import PREEMPTIONS, PROPOSALS, RUNS, Ledger
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import ServiceProcess, events, eventually, fresh_consumers
from tests.unit.ledger.builders import CONFIG, ledger_config

LEDGER_CONSUMERS = (
    (STREAM_EVT, PROPOSALS, EVENT_SUBJECTS["AllocationProposed"]),
    (STREAM_EVT, RUNS, "rota.evt.run.>"),
    (STREAM_EVT, PREEMPTIONS, "rota.evt.preemption.>"),
)
LEDGER_TABLES = "ledger.allocations, ledger.gpu_claims, ledger.entries, ledger.usage, ledger.holds," \
                " ledger.outbox, ledger.processed_messages"


@pytest.fixture(scope="session")
async def ledger_engine(endpoints: Endpoints) -> AsyncIterator[AsyncEngine]:
    await asyncio.to_thread(migrate.upgrade, endpoints.database_url, "ledger", MIGRATIONS)
    engine = make_engine(endpoints.database_url, pool_size=10)
    yield engine
    await engine.dispose()


@pytest.fixture(scope="session")
def ledger_endpoints(endpoints: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    """The session's database, and a nats-server for the ledger's process tests alone."""
    server = EmbeddedNats(tmp_path_factory.mktemp("ledger-nats"))
    url = server.start()
    yield Endpoints(url, endpoints.database_url)
    server.stop()


@pytest.fixture(scope="session")
async def ledger_nc(ledger_endpoints: Endpoints) -> AsyncIterator[Client]:
    client = await nats.connect(ledger_endpoints.nats_url)
    await ensure_streams(client.jetstream())
    await fresh_consumers(client, LEDGER_CONSUMERS)
    yield client
    await client.close()


@pytest.fixture(scope="session")
def ledger_config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ledger-config") / "rota.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def ledger_process(endpoints: Endpoints, config: Path, logs: Path, name: str = "ledger",
                   **env: str) -> ServiceProcess:
    """A `python -m rota_ledger`; `name` only tells its log apart from another instance's."""
    service = ServiceProcess("ledger", endpoints, logs / name, {"ROTA_CONFIG": str(config), **env})
    return service


async def truncate(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.text(f"TRUNCATE {LEDGER_TABLES}"))


async def queued(engine: AsyncEngine, type_: str, **match: Any) -> list[dict[str, Any]]:
    """Events of `type_` in the ledger's outbox, whose `data` has every `match` field."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT payload FROM ledger.outbox WHERE subject = :s ORDER BY seq"),
            {"s": EVENT_SUBJECTS[type_]},
        )
        found = [json.loads(bytes(r.payload)) for r in rows]
    return [e for e in found if all(e["data"].get(k) == v for k, v in match.items())]


async def rows(engine: AsyncEngine, table: str, **where: Any) -> list[Any]:
    query = f"SELECT * FROM ledger.{table}"
    if where:
        query += " WHERE " + " AND ".join(f"{k} = :{k}" for k in where)
    async with engine.connect() as conn:
        return list((await conn.execute(sa.text(query), where)).all())


async def publish(nc: Client, env: Envelope[Any], *, msg_id: str | None = None) -> None:
    """To ROTA_EVT, as a producer's outbox would (`msg_id` overrides the dedup id)."""
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
    """Wait until every proposal has a decision; returns them all."""
    ids = {p.data.proposal_id for p in proposed}

    async def all_decided() -> list[dict[str, Any]]:
        found = await decisions(nc, since, ids)
        return found if {e["data"]["proposal_id"] for e in found} == ids else []

    return list(await eventually(all_decided))


async def logged(service: ServiceProcess, text: str) -> None:
    async def seen() -> bool:
        return text in service.log()

    await eventually(seen)


MAX_BYTES = 64 * 1024


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
async def ledger(ledger_engine: AsyncEngine, clock: FakeClock) -> AsyncIterator[Ledger]:
    await truncate(ledger_engine)
    yield Ledger(lambda: ledger_engine, Outbox(schema="ledger"), ledger_config(), clock,
                 max_bytes=MAX_BYTES)
    # No relay ever publishes what these tests queued: leave nothing for a later process's.
    await truncate(ledger_engine)
