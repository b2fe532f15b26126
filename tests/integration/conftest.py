from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from rota.bus.broker import ensure_streams
from rota.endpoints import Endpoints

from tests.integration.harness import SUBMISSION_CONSUMERS, ServiceProcess, fresh_consumers


@pytest.fixture(scope="session")
async def nc(endpoints: Endpoints) -> AsyncIterator[Client]:
    client = await nats.connect(endpoints.nats_url)
    await ensure_streams(client.jetstream())
    await fresh_consumers(client, SUBMISSION_CONSUMERS)
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def submission(
    endpoints: Endpoints, nc: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ServiceProcess]:
    """One submission service per module; crash tests start their own, so it must not linger."""
    service = ServiceProcess("submission", endpoints, Path(tmp_path_factory.mktemp("logs")))
    async with service.serving(nc):
        yield service
