"""One real coordinator process (`python -m rota_preemption`) for this package's tests, with
short grace periods from a test rota.yaml, against real NATS JetStream and PostgreSQL.

Grace per victim tier: experiment 2 s (the deadline fires within a test), production 6 s
(long enough to kill the coordinator before it fires), training 300 s (never fires in a test).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from nats.aio.client import Client
from rota.config import load_config
from rota.contracts.subjects import STREAM_EVT
from rota.endpoints import Endpoints

from tests.integration.harness import ServiceProcess, fresh_consumers

PREEMPTION_CONSUMERS = (
    (STREAM_EVT, "preemption-plans", "rota.evt.preemption.requested"),
    (STREAM_EVT, "preemption-runs", "rota.evt.run.>"),
    (STREAM_EVT, "preemption-cancels", "rota.evt.job.cancelled"),
    (STREAM_EVT, "preemption-grows", "rota.evt.grow.requested"),
)

CONFIG = {
    "cluster": {"flavors": [{"name": "h100"}],
                "nodes": [{"name": "node-0", "flavor": "h100", "gpus": 8}]},
    "queues": {
        "production": {"preemption_grace_s": 6},
        "training": {"preemption_grace_s": 300},
        "experiment": {"preemption_grace_s": 2},
    },
    "teams": {"ml": {"quota": {"h100": 8}}},
}


@pytest.fixture(scope="session")
async def coordinator(
    endpoints: Endpoints, nc: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ServiceProcess]:
    """Restart tests kill it and start it again; it is running whenever a test begins."""
    home = Path(tmp_path_factory.mktemp("preemption"))
    config = home / "rota.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    load_config(config)  # a broken test config should fail here, not as a dead process
    await fresh_consumers(nc, PREEMPTION_CONSUMERS)
    service = ServiceProcess("preemption", endpoints, home, {
        "ROTA_CONFIG": str(config), "ROTA_PREEMPTION_TIMER_INTERVAL_S": "0.2",
    })
    async with service.serving(nc):
        yield service
