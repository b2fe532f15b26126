"""Ingest: one event in, notifications recorded. Nothing is sent here.

In one transaction: the idempotency guard, the job view, and one `pending` row per (notice,
recipient, channel). The dispatcher sends them later. So a redelivered event finds its guard
row and records nothing, and a crash before commit leaves nothing half-done to resend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from rota.clock import Clock
from rota.config import RotaConfig
from rota.contracts import ContractError, Envelope, parse_any
from rota.contracts import messages as m
from rota.db.outbox import Outbox
from rota.ids import new_id
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from rota_notifier import domain, store
from rota_notifier.domain import JobView, Notice
from rota_notifier.policy import Status
from rota_notifier.routing import PROTECTED, Channel, Delivery, route

log = logging.getLogger("rota.notifier.ingest")

CONSUMER = "notifier-events"

RELEVANT: tuple[type[BaseModel], ...] = (
    m.JobSubmitted, m.JobPending, m.RunStarted, m.RunFailed, m.RunStopped,
    m.PreemptionNoticed, m.PreemptionCompleted, m.BudgetUsageRecorded,
)


def notification_row(notice: Notice, delivery: Delivery, now: datetime) -> dict[str, Any]:
    return {
        "id": new_id(),
        "dedup_key": notice.dedup_key,
        "recipient": delivery.recipient,
        "channel": delivery.channel.value,
        "address": delivery.address,
        "kind": notice.kind.value,
        "event_id": notice.event_id,
        "job_id": notice.job_id,
        "team": notice.team,
        "context": notice.context | {
            "kind": notice.kind.value, "recipient_kind": delivery.recipient_kind,
            "timezone": delivery.timezone,
        },
        # A preemption notice is never held for a digest: its deadline will not wait.
        "bypass_rate_limit": notice.kind in PROTECTED,
        "status": Status.pending,
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
        "updated_at": now,
    }


class Ingest:
    def __init__(
        self,
        engine: Callable[[], AsyncEngine],
        outbox: Outbox,
        config: RotaConfig,
        channels: frozenset[Channel],
        clock: Clock,
        *,
        max_age_s: float,
        max_bytes: int,
        on_recorded: Callable[[], None] | None = None,
    ) -> None:
        self._engine = engine
        self._outbox = outbox
        self._config = config
        self._channels = channels
        self._clock = clock
        self._max_age_s = max_age_s
        self._max_bytes = max_bytes
        self._on_recorded = on_recorded

    async def handle(self, raw: bytes) -> int:
        """Apply one event; returns how many notifications it recorded."""
        try:
            env = parse_any(raw, max_bytes=self._max_bytes)
        except ContractError as exc:
            log.warning("skipping an unreadable event: %s", exc)
            return 0
        if not isinstance(env.data, RELEVANT):
            return 0
        now = self._clock.now()
        async with self._engine().begin() as conn:
            if not await self._outbox.first_time(conn, CONSUMER, env.id):
                return 0
            notices = await self._fold_and_decide(conn, env, now)
            recorded = 0
            for notice in notices:
                for delivery in route(notice, self._config, self._channels):
                    if await store.insert_notification(conn, notification_row(notice, delivery,
                                                                              now)):
                        recorded += 1
        if recorded:
            log.info("%s %s: %d notification(s) recorded", env.type, env.id, recorded)
            if self._on_recorded is not None:
                self._on_recorded()
        return recorded

    async def _fold_and_decide(
        self, conn: AsyncConnection, env: Envelope[BaseModel], now: datetime
    ) -> list[Notice]:
        data = env.data
        stale = domain.is_stale(env, now, self._max_age_s)
        if isinstance(data, m.PreemptionCompleted):
            victims: list[tuple[m.VictimResult, JobView | None]] = [
                (v, await store.get_job(conn, v.job_id)) for v in data.victims
            ]
            return [] if stale else domain.completed_notices(env, victims)
        if isinstance(data, m.BudgetUsageRecorded):
            return [] if stale else domain.budget_notices(env)
        job_id = getattr(data, "job_id", None) or env.job_id
        job = await store.get_job(conn, job_id) if job_id else None
        folded = domain.fold(job, env)
        if folded is not None:
            await store.put_job(conn, folded, now)
        if stale:
            return []
        # The view before this event: a start is measured against the wait it ends.
        return domain.notices(env, job or folded, self._config)
