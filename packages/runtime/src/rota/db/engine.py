"""Engines and URLs. Every service owns exactly one schema and touches no other."""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine


def async_url(url: str) -> str:
    """Accept plain `postgresql://` URLs too (pgserver prints those) and pick asyncpg."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    return parsed.render_as_string(hide_password=False)


def redact(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def make_engine(url: str, *, pool_size: int = 5) -> AsyncEngine:
    # No pre-ping: it costs a round trip per checkout on the hot path; a connection that
    # died fails its statement, the pool discards it, and the message is retried.
    # hide_parameters: a failed statement's error (which is logged) names no bound value, and
    # a value may be a secret (a run token, a payload).
    return create_async_engine(async_url(url), pool_size=pool_size, max_overflow=5,
                               hide_parameters=True)


def sessionmaker(engine: AsyncEngine) -> async_sessionmaker:  # type: ignore[type-arg]
    return async_sessionmaker(engine, expire_on_commit=False)
