"""The fixtures of the `kubernetes` backend's tests: a FAKE API server with five 8-GPU nodes,
and the backends a test starts, stopped and closed after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_kube_apiserver import FakeKubeApiServer


@pytest.fixture
async def fake() -> AsyncIterator[FakeKubeApiServer]:
    server = FakeKubeApiServer()
    await server.start()
    for i in range(5):
        server.add_node(f"gpu-{i}", 8)
    yield server
    await server.close()


@pytest.fixture
async def backends(fake: FakeKubeApiServer, tmp_path: Path) -> AsyncIterator[list[Any]]:
    """Started backends, each with its reporter, its clock and its loop task."""
    made: list[Any] = []
    yield made
    for backend, _, _, task in made:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await backend.close()
