"""`rota migrate` against a real PostgreSQL and NATS: every service's schema, the streams and
the lease buckets, and safe to repeat."""

from __future__ import annotations

import asyncio
import json

import pytest
import sqlalchemy as sa
from rota.cli.main import app
from rota.cli.stack import SERVICES
from rota.db.engine import async_url
from rota.endpoints import Endpoints
from rota.settings import get_settings
from sqlalchemy.ext.asyncio import create_async_engine
from typer.testing import CliRunner


async def versions(url: str) -> dict[str, str]:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.connect() as conn:
            found = {}
            for service in SERVICES:
                row = await conn.execute(sa.text(f'SELECT version_num FROM "{service}".alembic_version'))
                found[service] = row.scalar_one()
            return found
    finally:
        await engine.dispose()


def test_migrate_creates_every_schema_and_is_idempotent(
    endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROTA_DATABASE_URL", endpoints.database_url)
    monkeypatch.setenv("ROTA_NATS_URL", endpoints.nats_url)
    get_settings.cache_clear()
    try:
        for _ in range(2):
            result = CliRunner().invoke(app, ["migrate", "--json"])
            assert result.exit_code == 0, result.output
            assert json.loads(result.stdout) == {
                "ok": True, "migrated": list(SERVICES),
                "streams": ["ROTA_CMD", "ROTA_EVT", "ROTA_CTL", "rota_ledger_lease",
                            "rota_scheduler_lease"]}
    finally:
        get_settings.cache_clear()
    heads = asyncio.run(versions(endpoints.database_url))
    assert set(heads) == set(SERVICES) and all(heads.values())
