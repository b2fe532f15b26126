"""Ingest: a fetched batch of events in, notifications recorded. Nothing is sent here.

In one transaction per batch: the idempotency guard of every event, one read of the views of
the jobs they touch, the events folded in order, one upsert of the views they changed, and
one `pending` row per (notice, recipient, channel). The dispatcher sends them later. So a
redelivered event finds its guard row and records nothing, a copy of an event later in the
same batch is skipped, and a crash before commit leaves nothing half-done to resend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from opentelemetry.context import Context
from pydantic import BaseModel
from rota.clock import Clock
from rota.config import RotaConfig
from rota.contracts import ContractError, Envelope, parse_any
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS
from rota.db.outbox import Outbox
from rota.ids import new_id
from rota.tracing import context_from_headers, job_span
from sqlalchemy.ext.asyncio import AsyncEngine

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

Traced = tuple[Envelope[BaseModel], Context | None]
"""An event and the trace context it was published in."""

SUBJECTS: tuple[str, ...] = tuple(sorted(EVENT_SUBJECTS[kind.__name__] for kind in RELEVANT))
"""The subjects of the events above: the durable's filter, so the notifier never receives
(nor parses, verifies or acks) the many events that tell people nothing."""


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
        return await self.handle_batch([raw])

    async def handle_batch(
        self, raws: Sequence[bytes], headers: Sequence[Mapping[str, Any] | None] = ()
    ) -> int:
        """Apply a batch of events in one transaction, in their order; returns how many
        notifications they recorded. `headers`: each event's NATS headers, so that its span in
        its job's trace nests under the span that published it."""
        contexts = list(headers) or [None] * len(raws)
        events = [(env, context_from_headers(carrier))
                  for raw, carrier in zip(raws, contexts, strict=True)
                  if (env := self._relevant(raw)) is not None]
        if not events:
            return 0
        now = self._clock.now()
        async with self._engine().begin() as conn:
            fresh = await self._outbox.first_times(conn, CONSUMER, [env.id for env, _ in events])
            events = list(_first_copies(events, fresh))
            if not events:
                return 0
            views = await store.get_jobs(conn, _jobs_touched([env for env, _ in events]))
            changed: set[str] = set()
            notices: list[Notice] = []
            for env, parent in events:
                with job_span(f"rota.notifier.ingest {env.type}", _job_id(env),
                              {"rota.event_id": env.id}, parent=parent):
                    notices += self._fold_and_decide(views, changed, env, now)
            await store.put_jobs(conn, [views[job_id] for job_id in sorted(changed)], now)
            recorded = await store.insert_notifications(conn, [
                notification_row(notice, delivery, now) for notice in notices
                for delivery in route(notice, self._config, self._channels)])
        if recorded:
            log.info("%d event(s) from %s to %s: %d notification(s) recorded", len(events),
                     events[0][0].id, events[-1][0].id, recorded)
            if self._on_recorded is not None:
                self._on_recorded()
        return recorded

    def _relevant(self, raw: bytes) -> Envelope[BaseModel] | None:
        try:
            env = parse_any(raw, max_bytes=self._max_bytes)
        except ContractError as exc:
            log.warning("skipping an unreadable event: %s", exc)
            return None
        return env if isinstance(env.data, RELEVANT) else None

    def _fold_and_decide(
        self, views: dict[str, JobView], changed: set[str], env: Envelope[BaseModel],
        now: datetime,
    ) -> list[Notice]:
        """Fold `env` into `views` (marking the jobs it changed) and decide its notices."""
        data = env.data
        stale = domain.is_stale(env, now, self._max_age_s)
        if isinstance(data, m.PreemptionCompleted):
            victims = [(v, views.get(v.job_id)) for v in data.victims]
            return [] if stale else domain.completed_notices(env, victims)
        if isinstance(data, m.BudgetUsageRecorded):
            return [] if stale else domain.budget_notices(env)
        job_id = _job_id(env)
        job = views.get(job_id) if job_id else None
        folded = domain.fold(job, env)
        if folded is not None:
            views[folded.job_id] = folded
            changed.add(folded.job_id)
        if stale:
            return []
        # The view before this event: a start is measured against the wait it ends.
        return domain.notices(env, job or folded, self._config)


def _job_id(env: Envelope[BaseModel]) -> str | None:
    job_id: str | None = getattr(env.data, "job_id", None) or env.job_id
    return job_id


def _jobs_touched(events: list[Envelope[BaseModel]]) -> set[str]:
    """The jobs whose views the batch reads: each event's, and a completed plan's victims."""
    touched: set[str] = set()
    for env in events:
        if isinstance(env.data, m.PreemptionCompleted):
            touched.update(v.job_id for v in env.data.victims)
        elif (job_id := _job_id(env)) is not None:
            touched.add(job_id)
    return touched


def _first_copies(events: list[Traced], fresh: set[str]) -> Iterator[Traced]:
    """The events seen for the first time, each once (its first copy), in order."""
    applied: set[str] = set()
    for env, parent in events:
        if env.id in fresh and env.id not in applied:
            applied.add(env.id)
            yield env, parent
