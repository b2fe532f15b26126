"""The notifier service: events in, Slack and email out. Thin wiring; the rules live elsewhere.

- The events that may tell someone something (durable `notifier-events`, filtered to
  `ingest.SUBJECTS`): `Ingest` records what they call for, a fetched batch per transaction.
- A background `Dispatcher` sends due notifications, with retries, rate limits and digests.
- `rota.sys.notifier.list`: the read API behind `rota notifications`.

The notifier is never on the preemption path: the coordinator sends the run's control notice
itself, and only then publishes `PreemptionNoticed`, which is all the notifier sees.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from rota.bus.partition import by_job
from rota.clock import Clock
from rota.config import RotaConfig, load_config
from rota.contracts.subjects import STREAM_EVT
from rota.db.outbox import Outbox
from rota.service import RotaService, stop_tasks
from rota.settings import Settings
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_notifier.api import LIST_SUBJECT, answer
from rota_notifier.channels import Sender, build_senders
from rota_notifier.dispatch import Dispatcher
from rota_notifier.ingest import CONSUMER, SUBJECTS, Ingest
from rota_notifier.policy import DeliveryPolicy
from rota_notifier.redact import Redactor, install_log_filter
from rota_notifier.render import Renderer
from rota_notifier.routing import Channel, unknown_opt_outs

log = logging.getLogger("rota.notifier")

NAME = "notifier"
MIGRATIONS = Path(__file__).parent / "migrations"
GATHER_S = 0.2
"""How long a trickle of events gathers into one batch (one transaction) before it is fetched."""


@dataclass
class Notifier:
    ingest: Ingest
    dispatcher: Dispatcher
    redactor: Redactor
    senders: Mapping[Channel, Sender]

    async def aclose(self) -> None:
        for sender in self.senders.values():
            await sender.aclose()


def assemble(
    engine: Callable[[], AsyncEngine],
    settings: Settings,
    config: RotaConfig,
    clock: Clock,
    *,
    senders: Mapping[Channel, Sender] | None = None,
    outbox: Outbox | None = None,
    rng: random.Random | None = None,
) -> Notifier:
    """The notifier's parts, without NATS: the service wires them; tests drive them."""
    redactor = Redactor.from_settings(settings)
    senders = dict(senders) if senders is not None else build_senders(settings)
    dispatcher = Dispatcher(
        engine, senders, Renderer(settings.notifier_templates), clock,
        DeliveryPolicy.from_settings(settings), redactor, rng=rng,
    )
    ingest = Ingest(
        engine, outbox or Outbox(schema=NAME), config, frozenset(senders), clock,
        max_age_s=settings.notifier_max_event_age_s, max_bytes=settings.max_message_bytes,
        on_recorded=dispatcher.wake,
    )
    return Notifier(ingest, dispatcher, redactor, senders)


def build(service: RotaService | None = None, config: RotaConfig | None = None,
          senders: Mapping[Channel, Sender] | None = None) -> RotaService:
    service = service or RotaService(NAME, migrations=MIGRATIONS)
    settings = service.settings
    config = config or load_config(settings.config)
    notifier = assemble(lambda: service.engine, settings, config, service.clock,
                        senders=senders, outbox=service.outbox)
    for problem in unknown_opt_outs(config):
        log.warning("rota.yaml: %s", problem)
    if not notifier.senders:
        log.warning("no channel configured (ROTA_SLACK_TOKEN, ROTA_SLACK_WEBHOOK_URL,"
                    " ROTA_SMTP_HOST): notifications are not recorded")
    dispatching: list[asyncio.Task[None]] = []

    # Replicas: a job's events go to one replica by the job's hash, in order; the rest (a
    # budget report, a completed plan) to replica 0. The dispatcher claims due rows with
    # SKIP LOCKED, so replicas share the sending.
    # A transaction per batch, and no event here is urgent (the run got its preemption notice
    # from the coordinator; a person's is recorded, and sent, at most GATHER_S later), so events
    # may gather for a moment instead of costing a transaction each as they trickle in.
    @service.js_batch_subscriber("rota.evt.>", stream=STREAM_EVT, durable=CONSUMER,
                                 batch_size=256, partition_key=by_job, filter_subjects=SUBJECTS,
                                 gather_s=GATHER_S)
    async def notify(batch: list[Msg]) -> None:
        """Record the notifications a batch of events calls for; the dispatcher sends them."""
        await notifier.ingest.handle_batch([msg.data for msg in batch],
                                           [msg.headers for msg in batch])

    @service.broker.subscriber(LIST_SUBJECT, queue="notifier-api")
    async def list_notifications(msg: NatsMessage) -> bytes:
        """Request/reply: recent notifications, or the dead letter (`failed`)."""
        return await answer(service.engine, msg.body, notifier.redactor,
                            channels=[channel.value for channel in notifier.senders])

    @service.app.after_startup
    async def start_dispatcher() -> None:
        install_log_filter(notifier.redactor)
        dispatching.append(asyncio.create_task(
            notifier.dispatcher.run(settings.notifier_poll_interval_s), name="notifier-dispatch"
        ))

    @service.app.on_shutdown
    async def stop_dispatcher() -> None:
        await stop_tasks(dispatching)
        await notifier.aclose()

    return service
