"""The read model's job history, pruned once a job has been over for `ROTA_DECISION_RETENTION_S`.

The `jobs` rows stay (they are small, and `rota job` should still answer); only the history
behind `rota trace` goes. A job still waiting or running keeps all of its history.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from rota.retention import prune_periodically
from rota.service import RotaService, stop_tasks

from rota_submission import store


def install(service: RotaService) -> None:
    tasks: list[asyncio.Task[None]] = []

    async def prune(older_than: datetime) -> int:
        async with service.engine.begin() as conn:
            return await store.prune_history(conn, older_than)

    @service.app.after_startup
    async def start_pruning() -> None:
        settings = service.settings
        tasks.append(asyncio.create_task(prune_periodically(
            "job histories", prune, service.clock, settings.decision_retention_s,
            settings.decision_prune_interval_s), name="submission-prune"))

    @service.app.on_shutdown
    async def stop_pruning() -> None:
        await stop_tasks(tasks)
