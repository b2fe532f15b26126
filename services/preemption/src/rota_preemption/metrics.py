"""The coordinator's metrics, counted when a saga's `PreemptionCompleted` leaves the outbox.

A saga completes in five different transitions (a run ends, a deadline passes, the preemptor
is cancelled, a plan arrives for runs already over...). Counting at one place, once the
completion is committed and published, counts each saga exactly once whichever way it ended,
and never a transaction that rolled back. The saga's rows then hold everything the metrics
need: each victim's tier, team, outcome, lost GPU-seconds, notice and ack times.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rota import metrics
from rota.contracts import subjects as s
from rota.db.outbox import PublishedObserver
from rota.service import RotaService
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_preemption import store
from rota_preemption.domain import DRAIN_REASON

log = logging.getLogger("rota.preemption.metrics")

COMPLETED = s.EVENT_SUBJECTS["PreemptionCompleted"]
GROWN = s.EVENT_SUBJECTS["GrowCompleted"]


@metrics.never_raises
def record_victims(victims: Iterable[Mapping[str, Any]], reason: str | None = None) -> None:
    """Count one completed saga's victims. Pure but for the metric objects. A drain's victims
    are counted apart (`rota_drain_stops`), as no job preempted them."""
    counter = metrics.DRAIN_STOPS if reason == DRAIN_REASON else metrics.PREEMPTIONS
    for victim in victims:
        outcome = victim.get("outcome")
        if outcome in metrics.PREEMPTION_OUTCOMES:
            # A victim that finished on its own before it had to stop was not preempted.
            counter.labels(tier=victim["queue"], outcome=outcome).inc()
        # Even 0: the victim's team then has a series, and "lost nothing" shows as 0.
        metrics.LOST_GPU_SECONDS.labels(team=victim["team"]).inc(
            float(victim.get("lost_gpu_seconds") or 0.0))
        noticed, acked = victim.get("noticed_at"), victim.get("acked_at")
        if outcome in ("acked", "shrunk") and noticed is not None and acked is not None:
            metrics.PREEMPTION_ACK.observe(max(0.0, (acked - noticed).total_seconds()))


@metrics.never_raises
def record_grow(outcome: str) -> None:
    metrics.GROWS.labels(outcome=outcome).inc()


def observer(engine: Callable[[], AsyncEngine]) -> PublishedObserver:
    async def published(batch: list[tuple[str, bytes]]) -> None:
        for subject, payload in batch:
            if subject == GROWN:  # a grow is no preemption: its own count, from the event
                record_grow(json.loads(payload)["data"]["outcome"])
        plan_ids = [json.loads(payload)["data"]["plan_id"]
                    for subject, payload in batch if subject == COMPLETED]
        if not plan_ids:
            return
        async with engine().connect() as conn:
            for plan_id in plan_ids:
                for plan, victims in await store.list_sagas(
                        conn, plan_id=plan_id, job_id=None, open_only=False, limit=1):
                    record_victims(victims, plan.get("reason"))

    return published


def install(service: RotaService) -> None:
    """Observe the relay from its creation (the service's own startup) on."""

    @service.app.on_startup
    async def observe_completions() -> None:
        if service.relay is not None:
            service.relay.observers.append(observer(lambda: service.engine))
