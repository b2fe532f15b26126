"""Alembic, driven from code: `rota migrate` and every service start call `upgrade`.

Each service keeps its scripts in `<package>/migrations/` with a two-line `env.py` that calls
`run_env()`. Version tables live in the service's own schema, so services migrate independently.
"""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path

from alembic import command, context
from alembic.config import Config
from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from rota.db.engine import async_url


def upgrade(url: str, schema: str, script_location: Path) -> None:
    """Blocking: bring `schema` to head. Call through `asyncio.to_thread` from async code."""
    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.attributes["rota_url"] = async_url(url)
    config.attributes["rota_schema"] = schema
    command.upgrade(config, "head")


def run_env() -> None:
    """The body of every service's `migrations/env.py`."""
    url: str = context.config.attributes["rota_url"]
    schema: str = context.config.attributes["rota_schema"]
    asyncio.run(_run(url, schema))


async def _run(url: str, schema: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            # Two processes migrating one schema at once would race on the version table.
            await conn.execute(select(func.pg_advisory_xact_lock(zlib.crc32(schema.encode()))))
            await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            await conn.run_sync(_migrate, schema)
    finally:
        await engine.dispose()


def _migrate(conn: Connection, schema: str) -> None:
    context.configure(connection=conn, version_table_schema=schema, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()
