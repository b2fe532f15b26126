"""The real `python -m rota_notifier` process: its durable consumer, dispatcher and read API.

It runs against an embedded nats-server of its own, so its durable `notifier-events` consumer
replays nobody else's events and lingers on no shared server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
import yaml
from rota.bus.broker import ensure_streams, publish_headers
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.embedded import EmbeddedNats
from rota.endpoints import Endpoints
from rota_notifier.api import LIST_SUBJECT

from tests.integration.harness import ServiceProcess
from tests.integration.notifier.conftest import WEBHOOK_SECRET_PATH
from tests.integration.notifier.fakes import FakeSlack, SmtpSink
from tests.unit.notifier import events as ev
from tests.unit.notifier.events import CONFIG


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[str]:
    server = EmbeddedNats(tmp_path / "home")
    url = server.start()
    yield url
    server.stop()


async def test_the_service_delivers_a_preemption_notice_and_answers_the_list_api(
    own_nats: str, endpoints: Endpoints, tmp_path: Path, slack: FakeSlack, smtp: SmtpSink,
    notifier_engine: object,  # migrated and cleaned by the fixtures
) -> None:
    smtp.start()
    config = tmp_path / "rota.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    service = ServiceProcess("notifier", Endpoints(own_nats, endpoints.database_url),
                             tmp_path / "logs", extra_env={
        "ROTA_CONFIG": str(config),
        "ROTA_SLACK_WEBHOOK_URL": slack.base + WEBHOOK_SECRET_PATH,
        "ROTA_SMTP_HOST": "127.0.0.1", "ROTA_SMTP_PORT": str(smtp.port),
        "ROTA_NOTIFIER_POLL_INTERVAL_S": "0.2", "ROTA_LOG_LEVEL": "DEBUG",
    })
    nc = await nats.connect(own_nats)
    try:
        await ensure_streams(nc.jetstream())
        service.start()
        await service.wait_ready(nc)
        at = datetime.now(UTC)
        job = ev.submitted(at)
        notice = ev.noticed(at, job_id=job.job_id)
        for env in (job, notice):
            await nc.jetstream().publish(EVENT_SUBJECTS[env.type], env.to_bytes(),
                                         stream=STREAM_EVT, headers=publish_headers(env))

        for _ in range(200):  # up to 20 s for the process to pick them up
            if len(smtp.messages) >= 2 and len(slack.delivered) >= 2:
                break
            await asyncio.sleep(0.1)
        assert len(smtp.to("alice@example.com")) == 1, service.log()[-3000:]
        assert len(smtp.to("ml-team@example.com")) == 1
        assert len(slack.delivered) == 2

        query = envelope(m.ListNotifications(limit=10), source="test")
        for _ in range(50):  # a row is marked sent just after its send returns
            reply = await nc.request(LIST_SUBJECT, query.to_bytes(), timeout=5)
            result = json.loads(reply.data)["data"]
            if all(r["status"] == "sent" for r in result["result"] or []):
                break
            await asyncio.sleep(0.1)
        assert result["ok"] is True
        assert sorted((r["recipient"], r["channel"], r["status"]) for r in result["result"]) == [
            ("team:ml", "email", "sent"), ("team:ml", "slack", "sent"),
            ("user:ml/alice", "email", "sent"), ("user:ml/alice", "slack", "sent")]
    finally:
        service.stop()
        await nc.close()
    assert WEBHOOK_SECRET_PATH not in service.log()
    assert "wh-s3cr3t" not in service.log()
