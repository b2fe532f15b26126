"""A message whose handler fails on every delivery ends in the dead letter after
ROTA_MAX_DELIVER deliveries, with its secrets blanked out, and `rota deadletter` lists it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from rota.contracts import subjects as s
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.integration.harness import ServiceProcess, eventually, publish_command

MAX_DELIVER = 3
SECRET = "tok-secret-0123456789abcdef"


@pytest.fixture
async def failing_submission(endpoints: Endpoints, nc: Client,
                             tmp_path: Path) -> AsyncIterator[ServiceProcess]:
    """A submission service whose cancel handler fails on every message."""
    service = ServiceProcess("submission", endpoints, tmp_path, extra_env={
        "ROTA_FAULTS": "fail:handler:submission-cancel",
        "ROTA_MAX_DELIVER": str(MAX_DELIVER), "ROTA_RETRY_DELAY_S": "0.1",
    })
    async with service.serving(nc):
        yield service


def rota_deadletter(endpoints: Endpoints) -> list[dict[str, Any]]:
    env = dict(os.environ, ROTA_NATS_URL=endpoints.nats_url,
               ROTA_DATABASE_URL=endpoints.database_url)
    done = subprocess.run(
        [sys.executable, "-m", "rota.cli.main", "deadletter", "--service", "submission",
         "--json", "--limit", "1000"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


async def test_a_message_that_always_fails_ends_in_the_dead_letter(
    nc: Client, failing_submission: ServiceProcess, endpoints: Endpoints
) -> None:
    marker = new_id()
    body = json.dumps({"type": "CancelJob", "marker": marker, "run_token": SECRET}).encode()
    await publish_command(nc, s.cancel("nlp"), body, new_id())

    async def listed() -> list[dict[str, Any]]:
        rows = await asyncio.to_thread(rota_deadletter, endpoints)
        return [row for row in rows if marker in row["payload"]]

    [row] = await eventually(listed, timeout=30)
    assert row["service"] == "submission" and row["consumer"] == "submission-cancel"
    assert row["deliveries"] == MAX_DELIVER
    assert row["error_type"] == "InjectedFault" and row["stream"] == "ROTA_CMD"
    assert SECRET not in row["payload"] and "[redacted]" in row["payload"]
    assert failing_submission.process is not None and failing_submission.process.poll() is None
