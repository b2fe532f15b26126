"""One executor process per test module, on the backend that module tests.

Modules run one after the other, so only one executor consumes the shared durables at a time;
each starts from fresh consumers (new messages only)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from nats.aio.client import Client
from rota.endpoints import Endpoints
from rota_executor.app import CONSUMERS

from tests.integration.harness import ServiceProcess, fresh_consumers

ExecutorFactory = Callable[[], ServiceProcess]


@pytest.fixture(scope="module")
def executor_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("executor-home"))


def executor_process(endpoints: Endpoints, home: Path, **env: str) -> ServiceProcess:
    return ServiceProcess("executor", endpoints, home / "logs",
                          extra_env={"ROTA_HOME": str(home), **env})


async def started(endpoints: Endpoints, nc: Client, home: Path, **env: str
                  ) -> AsyncIterator[ServiceProcess]:
    await fresh_consumers(nc, CONSUMERS)
    async with executor_process(endpoints, home, **env).serving(nc) as service:
        yield service
