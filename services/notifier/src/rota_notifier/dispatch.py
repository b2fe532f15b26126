"""The dispatcher: claims due notifications, sends them, and records how it went.

One tick:
1. Digests: held messages whose window has passed become one digest per recipient/channel.
2. Claim: due rows are locked (SKIP LOCKED, so several notifier replicas share the work),
   checked against the recipient's rate limit, and marked `sending` with a lease, then
   committed. The mark comes before the send: a row is never sent without a record.
3. Send, outside any transaction, and mark each row `sent`, `retrying` or `dead`.

A crash between a send and its mark resends once the lease runs out: delivery is at least
once at that one point, because neither SMTP nor Slack offers an idempotency key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from jinja2 import TemplateError
from opentelemetry.trace import StatusCode
from rota.clock import Clock
from rota.ids import new_id
from rota.tracing import job_span
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_notifier import store
from rota_notifier.channels import Outgoing, Sender
from rota_notifier.domain import Kind
from rota_notifier.metrics import record_sends
from rota_notifier.policy import (
    DeliveryError,
    DeliveryPolicy,
    Status,
    after_failure,
    over_rate_limit,
)
from rota_notifier.redact import Redactor
from rota_notifier.render import Renderer
from rota_notifier.routing import Channel

log = logging.getLogger("rota.notifier.dispatch")

_ERROR_LIMIT = 500


@dataclass
class TickResult:
    sent: int = 0
    retrying: int = 0
    dead: int = 0
    held: int = 0
    digests: int = 0

    @property
    def busy(self) -> bool:
        return bool(self.sent or self.retrying or self.dead or self.held or self.digests)


class Dispatcher:
    def __init__(
        self,
        engine: Callable[[], AsyncEngine],
        senders: Mapping[Channel, Sender],
        renderer: Renderer,
        clock: Clock,
        policy: DeliveryPolicy,
        redactor: Redactor,
        *,
        rng: random.Random | None = None,
        batch_size: int = 50,
        concurrency: int = 8,
    ) -> None:
        self._engine = engine
        self._senders = senders
        self._renderer = renderer
        self._clock = clock
        self._policy = policy
        self._redactor = redactor
        self._rng = rng or random.Random()
        self._batch_size = batch_size
        self._limit = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Call after recording notifications, so they go out now rather than at the next poll."""
        self._wake.set()

    async def tick(self) -> TickResult:
        result = TickResult()
        now = self._clock.now()
        result.digests = await self._flush_digests(now)
        claimed = await self._claim(now, result)
        outcomes = await asyncio.gather(*(self._deliver(row) for row in claimed))
        record_sends(claimed, outcomes)
        for status in outcomes:
            if status == Status.sent:
                result.sent += 1
            elif status == Status.dead:
                result.dead += 1
            else:
                result.retrying += 1
        return result

    async def run(self, poll_interval_s: float) -> None:
        while True:
            busy = False
            try:
                busy = (await self.tick()).busy
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away; rows wait for the next tick
                log.warning("dispatch failed: %s; retrying",
                            self._redactor.redact(f"{type(exc).__name__}: {exc}"))
            if busy:
                continue  # there may be more due right away
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=poll_interval_s)

    async def _claim(self, now: datetime, result: TickResult) -> list[sa.Row[Any]]:
        claimed: list[sa.Row[Any]] = []
        async with self._engine().begin() as conn:
            rows = await store.claim_due(conn, now, self._batch_size)
            counts = await store.recent_sends(
                conn, ((r.recipient, r.channel) for r in rows),
                store.window_start(now, self._policy.rate_window_s),
            )
            for row in rows:
                pair = (row.recipient, row.channel)
                if over_rate_limit(self._policy, counts.get(pair, 0), row.bypass_rate_limit):
                    await store.update(conn, row.id, {
                        "status": Status.held, "updated_at": now,
                        "next_attempt_at": now + timedelta(seconds=self._policy.rate_window_s),
                    })
                    result.held += 1
                    continue
                counts[pair] = counts.get(pair, 0) + 1
                await store.update(conn, row.id, {
                    "status": Status.sending, "attempts": row.attempts + 1,
                    "last_attempt_at": now, "updated_at": now,
                    "next_attempt_at": now + timedelta(seconds=self._policy.send_timeout_s),
                })
                claimed.append(row)
        return claimed

    async def _deliver(self, row: sa.Row[Any]) -> str:
        attempts = row.attempts + 1
        async with self._limit:
            try:
                # A send is a span in its job's trace (a digest, about many jobs, has none);
                # a failure is recorded on it before it is retried or dead-lettered.
                with job_span(f"rota.notifier.send {row.kind}", row.job_id, {
                    "rota.notification_id": row.id, "rota.kind": row.kind,
                    "rota.channel": row.channel, "rota.recipient": row.recipient,
                    "rota.attempt": attempts,
                }, record_exception=False) as span:
                    try:
                        await self._send(row)
                    except Exception as exc:  # the span says why, redacted like the logs
                        span.set_status(StatusCode.ERROR, self._redactor.redact(
                            f"{type(exc).__name__}: {exc}")[:_ERROR_LIMIT])
                        raise
            except DeliveryError as exc:
                return await self._failed(row, attempts, exc)
            except Exception as exc:  # a bug or an odd library error: retry, never lose it
                # No traceback: third-party frames may quote URLs; the type and text suffice.
                return await self._failed(row, attempts, DeliveryError(
                    f"unexpected {type(exc).__name__}: {exc}", permanent=False))
        now = self._clock.now()
        async with self._engine().begin() as conn:
            await store.update(conn, row.id, {"status": Status.sent, "sent_at": now,
                                              "updated_at": now, "last_error": None})
        log.info("notification %s (%s) sent to %s by %s", row.id, row.kind, row.recipient,
                 row.channel)
        return Status.sent

    async def _send(self, row: sa.Row[Any]) -> None:
        sender = self._senders.get(Channel(row.channel))
        if sender is None:
            raise DeliveryError(f"channel {row.channel} is not configured", permanent=True)
        try:
            rendered = self._renderer.render(row.kind, row.context, self._clock.now())
        except TemplateError as exc:
            raise DeliveryError(f"template: {type(exc).__name__}: {exc}", permanent=True) from None
        await sender.send(Outgoing(row.id, row.address,
                                   str(row.context.get("recipient_kind", "user")), rendered))

    async def _failed(self, row: sa.Row[Any], attempts: int, error: DeliveryError) -> str:
        now = self._clock.now()
        nxt = after_failure(self._policy, attempts, error, now, self._rng)
        message = self._redactor.redact(error.message)[:_ERROR_LIMIT]
        async with self._engine().begin() as conn:
            await store.update(conn, row.id, {
                "status": nxt.status, "next_attempt_at": nxt.next_attempt_at,
                "last_error": message, "updated_at": now,
            })
        if nxt.status == Status.dead:
            log.error("notification %s (%s to %s by %s) is dead after %d attempt(s): %s",
                      row.id, row.kind, row.recipient, row.channel, attempts, message)
        else:
            log.warning("notification %s to %s by %s failed (attempt %d): %s; next at %s",
                        row.id, row.recipient, row.channel, attempts, message,
                        nxt.next_attempt_at.isoformat())
        return nxt.status

    async def _flush_digests(self, now: datetime) -> int:
        made = 0
        async with self._engine().begin() as conn:
            groups = await store.held_groups_due(conn, now)
        for recipient, channel in groups:
            async with self._engine().begin() as conn:
                rows = await store.lock_held(conn, recipient, channel)
                if not rows:
                    continue
                digest_id = new_id()
                first = rows[0]
                await store.insert_notification(conn, {
                    "id": digest_id, "dedup_key": f"digest:{first.id}", "recipient": recipient,
                    "channel": channel, "address": rows[-1].address, "kind": Kind.digest.value,
                    "event_id": None, "job_id": None, "team": first.team,
                    "context": {
                        "kind": Kind.digest.value, "job_id": None,
                        "recipient_kind": first.context.get("recipient_kind", "user"),
                        "timezone": first.context.get("timezone", "UTC"),
                        "items": [self._item(row, now) for row in rows],
                    },
                    # A digest goes out regardless: it is what the limit turned into.
                    "bypass_rate_limit": True, "status": Status.pending, "attempts": 0,
                    "next_attempt_at": now, "created_at": now, "updated_at": now,
                })
                for row in rows:
                    await store.update(conn, row.id, {"status": Status.digested,
                                                      "digest_id": digest_id, "updated_at": now})
            made += 1
        return made

    def _item(self, row: sa.Row[Any], now: datetime) -> dict[str, Any]:
        try:
            subject = self._renderer.subject(row.kind, row.context, now)
        except TemplateError:
            subject = f"{row.kind}: {row.context.get('job_name') or row.job_id}"
        return {"id": row.id, "kind": row.kind, "job_id": row.job_id, "subject": subject,
                "created_at": row.created_at.isoformat()}
