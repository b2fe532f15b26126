"""The ledger against real PostgreSQL (and, for its process tests, real NATS JetStream).

`ledger_engine` migrates the session database's `ledger` schema. In-process tests drive a
`Ledger` on a `FakeClock` and read what it queued in its outbox; process tests run
`python -m rota_ledger` on durables recreated once per session (`ledger_consumers`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from nats.aio.client import Client
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.db import migrate
from rota.db.engine import make_engine
from rota.endpoints import Endpoints
from rota_ledger.app import MIGRATIONS
from rota_ledger.ledger import PREEMPTIONS, PROPOSALS, RUNS
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import ServiceProcess, fresh_consumers
from tests.unit.ledger.builders import CONFIG

LEDGER_CONSUMERS = (
    (STREAM_EVT, PROPOSALS, EVENT_SUBJECTS["AllocationProposed"]),
    (STREAM_EVT, RUNS, "rota.evt.run.>"),
    (STREAM_EVT, PREEMPTIONS, "rota.evt.preemption.>"),
)
LEDGER_TABLES = "ledger.allocations, ledger.entries, ledger.usage, ledger.holds," \
                " ledger.outbox, ledger.processed_messages"


@pytest.fixture(scope="session")
async def ledger_engine(endpoints: Endpoints) -> AsyncIterator[AsyncEngine]:
    await asyncio.to_thread(migrate.upgrade, endpoints.database_url, "ledger", MIGRATIONS)
    engine = make_engine(endpoints.database_url, pool_size=10)
    yield engine
    await engine.dispose()


@pytest.fixture(scope="session")
async def ledger_consumers(nc: Client) -> None:
    """Only events from now on: the shared streams hold other sessions' proposals."""
    await fresh_consumers(nc, LEDGER_CONSUMERS)


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
