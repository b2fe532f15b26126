"""The preemption coordinator: thin wiring from subjects and the clock to `Coordinator`.

- `rota.evt.preemption.requested` (durable `preemption-plans`): open one saga per plan.
- `rota.evt.run.>` (durable `preemption-runs`): acknowledgements and run ends.
- `rota.evt.job.cancelled` (durable `preemption-cancels`): a cancelled preemptor aborts.
- `rota.evt.grow.requested` (durable `preemption-grows`): a grow's saga (not a preemption).
- A timer task forces the stop of victims past their deadline, read from the database.
- `rota.sys.preemption.plans`: the read API over sagas and victims.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from rota.config import RotaConfig, load_config
from rota.contracts import subjects as s
from rota.service import RotaService, stop_tasks

from rota_preemption.api import PLANS_SUBJECT, answer
from rota_preemption.coordinator import (
    CONSUMER_CANCELS,
    CONSUMER_GROWS,
    CONSUMER_PLANS,
    CONSUMER_RUNS,
    Coordinator,
)
from rota_preemption.metrics import install as install_metrics
from rota_preemption.settings import PreemptionSettings

NAME = "preemption"
MIGRATIONS = Path(__file__).parent / "migrations"
RUN_EVENTS = "rota.evt.run.>"


def build(
    service: RotaService | None = None,
    config: RotaConfig | None = None,
    settings: PreemptionSettings | None = None,
) -> RotaService:
    service = service or RotaService(NAME, migrations=MIGRATIONS)
    config = config or load_config(service.settings.config)
    settings = settings or PreemptionSettings()
    max_bytes = service.settings.max_message_bytes

    def wake_relay() -> None:
        if service.relay is not None:
            service.relay.wake()

    coordinator = Coordinator(lambda: service.engine, service.outbox, config, service.clock,
                              max_bytes=max_bytes, on_commit=wake_relay)
    timers: list[asyncio.Task[None]] = []
    install_metrics(service)

    @service.js_subscriber(s.EVENT_SUBJECTS["PreemptionRequested"], stream=s.STREAM_EVT,
                           durable=CONSUMER_PLANS)
    async def preemption_requested(msg: Msg) -> None:
        """Open the saga: notices to the victims, in one transaction with its rows."""
        await coordinator.preemption_requested(msg.data, msg.headers)

    # One consumer for every run event, so a run's ack and its end are read in order.
    @service.js_subscriber(RUN_EVENTS, stream=s.STREAM_EVT, durable=CONSUMER_RUNS,
                           batch_size=128)
    async def run_event(msg: Msg) -> None:
        """RunCheckpointed (the ack, verified by the executor), RunStopped, RunFinished,
        RunFailed."""
        await coordinator.run_event(msg.data)

    @service.js_subscriber(s.EVENT_SUBJECTS["JobCancelled"], stream=s.STREAM_EVT,
                           durable=CONSUMER_CANCELS)
    async def job_cancelled(msg: Msg) -> None:
        """A cancelled preemptor aborts its plan; the victims' notices are withdrawn."""
        await coordinator.job_cancelled(msg.data)

    @service.js_subscriber(s.EVENT_SUBJECTS["GrowRequested"], stream=s.STREAM_EVT,
                           durable=CONSUMER_GROWS)
    async def grow_requested(msg: Msg) -> None:
        """Open a grow's saga: the notice to the growing run."""
        await coordinator.grow_requested(msg.data)

    @service.broker.subscriber(PLANS_SUBJECT, queue="preemption-api")
    async def list_plans(msg: NatsMessage) -> bytes:
        """Request/reply: sagas and their victims, newest first."""
        return await answer(service.engine, msg.body, max_bytes=max_bytes)

    @service.app.after_startup
    async def start_timers() -> None:
        timers.append(asyncio.create_task(
            coordinator.run_timers(settings.timer_interval_s), name="preemption-deadlines"))

    @service.app.on_shutdown
    async def stop_timers() -> None:
        await stop_tasks(timers)

    return service
