"""The scheduler service, wired: its view of the cluster (`view`), folded from ROTA_EVT by the
intake (`intake`); the cycle that decides and acts (`cycle`); the leadership that holds the
lease, rebuilds the view and runs the cycles (`leadership`). Only the leader schedules.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rota.config import RotaConfig, load_config
from rota.retention import prune_periodically
from rota.service import RotaService, stop_tasks
from rota_policy import PolicyConfig, policy_config_from

from rota_scheduler import store
from rota_scheduler.asking import Questions
from rota_scheduler.cycle import SchedulingCycle
from rota_scheduler.intake import Intake
from rota_scheduler.leadership import Leadership
from rota_scheduler.tracing import JobTraces
from rota_scheduler.view import ClusterView


@dataclass
class Scheduler:
    """The scheduler's parts, sharing one view and one `dirty` flag (set when a cycle is due)."""

    view: ClusterView
    intake: Intake
    cycle: SchedulingCycle
    leadership: Leadership


def scheduler_of(service: RotaService, config: RotaConfig, policy: PolicyConfig) -> Scheduler:
    view = ClusterView(config)
    dirty = asyncio.Event()
    traces = JobTraces()
    intake = Intake(service, view, traces, dirty)
    questions = Questions(view, dirty.set, max_bytes=service.settings.max_message_bytes)
    cycle = SchedulingCycle(service, view, policy, intake, traces, questions, dirty)
    return Scheduler(view, intake, cycle, Leadership(service, cycle))


async def prune_decisions(service: RotaService) -> None:
    """The decision log past `ROTA_DECISION_RETENTION_S`, pruned every so often."""

    async def prune(older_than: datetime) -> int:
        async with service.engine.begin() as conn:
            return await store.prune_decisions(conn, older_than)

    settings = service.settings
    await prune_periodically("scheduler decisions", prune, service.clock,
                             settings.decision_retention_s, settings.decision_prune_interval_s)


def build() -> RotaService:
    service = RotaService("scheduler", migrations=Path(__file__).parent / "migrations")
    config = load_config(service.settings.config)
    scheduler = scheduler_of(service, config, policy_config_from(config))
    tasks: list[asyncio.Task[None]] = []

    @service.app.after_startup
    async def start_leading() -> None:
        tasks.append(asyncio.create_task(scheduler.leadership.lead(), name="scheduler-lead"))
        tasks.append(asyncio.create_task(prune_decisions(service), name="scheduler-prune"))

    @service.app.on_shutdown
    async def stop_leading() -> None:
        await stop_tasks(tasks)

    return service
