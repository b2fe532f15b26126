"""The notifier against real NATS JetStream, real PostgreSQL, a real SMTP server and a local
Slack stand-in. Handlers are driven directly with real NATS messages, so no durable consumer
of the shared stream competes with anyone; the dispatcher runs on a `FakeClock`."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from pydantic import SecretStr
from rota.bus.broker import publish_headers
from rota.clock import FakeClock
from rota.contracts import Envelope
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.db import migrate
from rota.db.engine import make_engine
from rota.endpoints import Endpoints
from rota.flushed import flushed
from rota.settings import Settings
from rota_notifier.api import answer
from rota_notifier.app import MIGRATIONS, Notifier, assemble
from rota_notifier.redact import Redactor
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.notifier.fakes import FakeSlack, SmtpSink
from tests.unit.notifier.events import rota_config

WEBHOOK_SECRET_PATH = "/services/T0ROTA/B0ROTA/wh-s3cr3t-7f2a9c"
SLACK_TOKEN = "xoxb-0000-rota-t0ken-s3cr3t"
SMTP_PASSWORD = "smtp-pa55-s3cr3t"

@pytest.fixture(scope="session")
async def notifier_engine(endpoints: Endpoints) -> AsyncIterator[AsyncEngine]:
    await asyncio.to_thread(migrate.upgrade, endpoints.database_url, "notifier", MIGRATIONS)
    engine = make_engine(endpoints.database_url)
    yield engine
    await engine.dispose()


@pytest.fixture(autouse=True)
async def _clean(notifier_engine: AsyncEngine) -> None:
    async with notifier_engine.begin() as conn:
        await conn.execute(sa.text(
            "TRUNCATE notifier.notifications, notifier.jobs, notifier.processed_messages"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    server = FakeSlack()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    """Not started: a test starts it, or leaves it down to inject the failure."""
    sink = SmtpSink()
    yield sink
    sink.stop()


def make_settings(slack: FakeSlack, smtp: SmtpSink, *, transport: str = "webhook",
                  **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "smtp_host": "127.0.0.1", "smtp_port": smtp.port, "smtp_from": "rota@example.com",
        "smtp_timeout_s": 5.0, "notifier_backoff_base_s": 10.0,
        "notifier_backoff_max_s": 600.0, "notifier_max_attempts": 5,
    }
    if transport == "webhook":
        values["slack_webhook_url"] = SecretStr(slack.base + WEBHOOK_SECRET_PATH)
    else:
        values["slack_token"] = SecretStr(SLACK_TOKEN)
        values["slack_api_url"] = slack.base + "/api/"
    values.update(overrides)
    return Settings(**values)


@dataclass
class Harness:
    notifier: Notifier
    nc: Client
    clock: FakeClock
    engine: AsyncEngine

    async def publish(self, env: Envelope[Any]) -> tuple[Msg, JetStreamContext.PullSubscription]:
        """Publish to ROTA_EVT and fetch that very message back through a consumer of its own
        (which starts at its sequence, so other tests' events never get in the way)."""
        js = self.nc.jetstream()
        subject = EVENT_SUBJECTS[env.type]
        ack = await js.publish(subject, env.to_bytes(), stream=STREAM_EVT,
                               headers=publish_headers(env))
        sub = await js.pull_subscribe(
            subject, stream=STREAM_EVT,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                  opt_start_seq=ack.seq, ack_wait=30,
                                  inactive_threshold=30),
        )
        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.data == env.to_bytes()
        return msg, sub

    async def deliver(self, env: Envelope[Any]) -> int:
        msg, sub = await self.publish(env)
        recorded = await self.notifier.ingest.handle(msg.data)
        await msg.ack()
        await sub.unsubscribe()
        return recorded

    async def tick(self) -> Any:
        return await self.notifier.dispatcher.tick()


HarnessFactory = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def harness(
    nc: Client, notifier_engine: AsyncEngine, clock: FakeClock, slack: FakeSlack, smtp: SmtpSink
) -> AsyncIterator[HarnessFactory]:
    made: list[Notifier] = []

    async def make(settings: Settings | None = None) -> Harness:
        notifier = assemble(lambda: notifier_engine, settings or make_settings(slack, smtp),
                            rota_config(), clock, rng=random.Random(7))
        made.append(notifier)
        return Harness(notifier, nc, clock, notifier_engine)

    yield make
    for notifier in made:
        await notifier.aclose()


async def rows(engine: AsyncEngine, **where: Any) -> list[Any]:
    query = "SELECT * FROM notifier.notifications"
    if where:
        query += " WHERE " + " AND ".join(f"{k} = :{k}" for k in where)
    async with engine.connect() as conn:
        return list((await conn.execute(sa.text(query + " ORDER BY recipient, channel"),
                                        where)).all())


@pytest.fixture
async def api_subject(
    nc: Client, notifier_engine: AsyncEngine, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[Redactor], Awaitable[str]]]:
    """Serve the notifier's read API on a subject of this test's own, over real NATS.

    The CLI under test finds NATS through ROTA_NATS_URL, which is unset on embedded servers.
    """
    monkeypatch.setenv("ROTA_NATS_URL", endpoints.nats_url)
    subs: list[Any] = []

    async def serve(redactor: Redactor) -> str:
        subject = f"rota.test.notifier.list.{uuid.uuid4().hex}"

        async def respond(msg: Msg) -> None:
            await msg.respond(await answer(notifier_engine, msg.data, redactor,
                                           channels=("email", "slack")))

        subs.append(await nc.subscribe(subject, cb=respond))
        await flushed(nc)
        return subject

    yield serve
    for sub in subs:
        await sub.unsubscribe()
