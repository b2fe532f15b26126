"""The coordinator: events and the clock in, saga transitions committed with their messages.

Every method is one transaction: lock, call a pure transition in `domain`, save, queue the
effects in the outbox. Handlers are idempotent through the processed-message guard (plans,
acks, cancellations) or through state checks (run events: an ended victim stays ended).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from opentelemetry.trace import SpanContext
from pydantic import BaseModel
from rota.clock import Clock
from rota.config import RotaConfig
from rota.contracts import ContractError, Envelope, Tier, parse, parse_any
from rota.contracts import messages as m
from rota.db.outbox import Outbox
from rota.faults import crash_point
from rota.ids import new_id
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from rota_preemption import domain, store
from rota_preemption.domain import AckVerdict, Effect, RunEnded, Saga
from rota_preemption.emit import emit
from rota_preemption.grow import start_grow
from rota_preemption.spans import ack_span, plan_span_context

log = logging.getLogger("rota.preemption")

CONSUMER_PLANS = "preemption-plans"
CONSUMER_RUNS = "preemption-runs"
CONSUMER_CANCELS = "preemption-cancels"
CONSUMER_GROWS = "preemption-grows"
DUE_BATCH = 100

M = TypeVar("M", bound=BaseModel)

_VERDICT_LOG: dict[AckVerdict, tuple[int, str]] = {
    AckVerdict.accepted: (logging.INFO, "accepted; stopping the run"),
    AckVerdict.duplicate: (logging.INFO, "ignored: a duplicate, the run was told to stop once"),
    AckVerdict.late: (logging.WARNING, "ignored: after the deadline, the forced stop stands"),
    AckVerdict.withdrawn: (logging.INFO, "ignored: the notice was withdrawn"),
    AckVerdict.after_end: (logging.INFO, "ignored: the run had already ended"),
    AckVerdict.stale_run: (logging.WARNING, "ignored: from a stale run, not the victim run"),
}


class Coordinator:
    def __init__(
        self,
        engine: Callable[[], AsyncEngine],
        outbox: Outbox,
        config: RotaConfig,
        clock: Clock,
        *,
        max_bytes: int,
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        self._engine = engine
        self._outbox = outbox
        self._clock = clock
        self._max_bytes = max_bytes
        self._on_commit = on_commit
        self._grace = {tier: queue.preemption_grace_s for tier, queue in config.queues.items()}
        self._default_grace_s = config.preemption.default_grace_s

    def grace_s(self, queue: Tier) -> float:
        return domain.grace_for(queue, self._grace, self._default_grace_s)

    # ------------------------------------------------------------ PreemptionRequested

    async def preemption_requested(self, raw: bytes,
                                   headers: Mapping[str, Any] | None = None) -> None:
        """`headers`: the message's, whose trace context is the scheduler's plan span."""
        env = self._parse(raw, m.PreemptionRequested)
        if env is None:
            return
        request, now = env.data, self._clock.now()
        async with self._engine().begin() as conn:
            if not await self._outbox.first_time(conn, CONSUMER_PLANS, env.id):
                return
            await store.lock_preemptor(conn, request.preemptor_job_id)
            if await store.plan_exists(conn, request.plan_id):
                log.info("plan %s requested again; it already has a saga", request.plan_id)
                return
            ended = await store.lock_runs(conn, [(v.run_id, v.job_id) for v in request.victims])
            saga, effects = domain.start(
                request, now, grace_s=self.grace_s, ended_runs=ended,
                preemptor_cancelled=await store.is_cancelled(conn, request.preemptor_job_id),
                new_id=new_id,
            )
            await store.insert_saga(conn, saga, now)
            await self._emit(conn, saga, effects,
                             plan_span_context(headers, request.preemptor_job_id))
        self._committed()
        log.info("plan %s for job %s: %d victim(s), %s", request.plan_id,
                 request.preemptor_job_id, len(saga.victims), saga.plan.state.value)

    # ------------------------------------------------------------ GrowRequested

    async def grow_requested(self, raw: bytes) -> None:
        """A grow's saga (DECISIONS 82): a notice to the growing run, in one transaction with
        its rows; its run's grace is its tier's, as a victim's would be."""
        env = self._parse(raw, m.GrowRequested)
        if env is None:
            return
        request, now = env.data, self._clock.now()
        async with self._engine().begin() as conn:
            if not await self._outbox.first_time(conn, CONSUMER_GROWS, env.id):
                return
            await store.lock_preemptor(conn, request.job_id)
            if await store.plan_exists(conn, request.grow_id):
                return
            ended = await store.lock_runs(conn, [(request.run_id, request.job_id)])
            saga, effects = start_grow(
                request, now, grace_s=self.grace_s(request.queue), ended_runs=ended,
                cancelled=await store.is_cancelled(conn, request.job_id), new_id=new_id,
            )
            await store.insert_saga(conn, saga, now)
            await self._emit(conn, saga, effects)
        self._committed()
        log.info("grow %s of run %s (job %s) to %d workers: %s", request.grow_id,
                 request.run_id, request.job_id, request.workers, saga.plan.state.value)

    # ------------------------------------------------------------ run events

    async def run_event(self, raw: bytes) -> None:
        """Apply one run event: an acknowledgement, or the end of a run."""
        env = self._parse_any(raw)
        if env is None:
            return
        data = env.data
        if isinstance(data, m.RunCheckpointed):
            if data.notice_id is not None:  # without one it is a periodic checkpoint, no ack
                await self._acknowledged(env.id, data)
        elif isinstance(data, m.RunStopped | m.RunFinished | m.RunFailed):
            await self._run_ended(data)

    async def _acknowledged(self, event_id: str, ack: m.RunCheckpointed) -> None:
        assert ack.notice_id is not None
        now = self._clock.now()
        async with self._engine().begin() as conn:
            if not await self._outbox.first_time(conn, CONSUMER_RUNS, event_id):
                return
            plan_id = await store.plan_of_notice(conn, ack.notice_id)
            saga = await store.lock_saga(conn, plan_id) if plan_id else None
            if saga is None:
                await self._unknown_notice(conn, ack)
                return
            verdict, effects = domain.acknowledge(
                saga, notice_id=ack.notice_id, run_id=ack.run_id,
                checkpoint_uri=ack.checkpoint_uri, now=now,
            )
            with ack_span(ack.job_id, ack.run_id, ack.notice_id, plan_id, verdict.value,
                          ack.checkpoint_uri):
                if effects:
                    await store.save_saga(conn, saga, now)
                    await self._emit(conn, saga, effects)
        level, text = _VERDICT_LOG[verdict]
        checkpoint = f", checkpoint {ack.checkpoint_uri}" if verdict is AckVerdict.accepted else ""
        log.log(level, "ack from run %s of job %s (notice %s, plan %s%s) %s", ack.run_id,
                ack.job_id, ack.notice_id, saga.plan.plan_id, checkpoint, text)
        if effects:
            self._committed()

    async def _unknown_notice(self, conn: AsyncConnection, ack: m.RunCheckpointed) -> None:
        live = await store.live_victim_runs_of_job(conn, ack.job_id)
        if live and ack.run_id not in live:
            log.warning("acknowledgement from a stale run ignored (run %s of job %s, notice %s):"
                        " the job's victim run is %s", ack.run_id, ack.job_id, ack.notice_id,
                        ", ".join(live))
        else:
            log.info("acknowledgement for an unknown notice %s ignored (run %s)", ack.notice_id,
                     ack.run_id)

    async def _run_ended(self, data: m.RunStopped | m.RunFinished | m.RunFailed) -> None:
        end, now = RunEnded.from_event(data), self._clock.now()
        changed: list[Saga] = []
        async with self._engine().begin() as conn:
            # The upsert takes the run row's lock first, so a plan naming this run that is
            # committing right now either sees the end or is seen here.
            await store.record_run_ended(conn, data.run_id, data.job_id, end.how, now)
            for plan_id in await store.open_plans_of_run(conn, data.run_id):
                saga = await store.lock_saga(conn, plan_id)
                if saga is None:
                    continue
                effects = domain.run_ended(saga, end, now)
                await store.save_saga(conn, saga, now)
                await self._emit(conn, saga, effects)
                changed.append(saga)
        for saga in changed:
            victim = saga.victim_by_run(data.run_id)
            assert victim is not None
            log.info("victim run %s of plan %s done: %s, lost %.0f GPU-s; plan %s",
                     data.run_id, saga.plan.plan_id, victim.outcome, victim.lost_gpu_seconds,
                     saga.plan.state.value)
        if changed:
            self._committed()

    # ------------------------------------------------------------ JobCancelled

    async def job_cancelled(self, raw: bytes) -> None:
        env = self._parse(raw, m.JobCancelled)
        if env is None:
            return
        job_id, now = env.data.job_id, self._clock.now()
        aborted: list[str] = []
        async with self._engine().begin() as conn:
            if not await self._outbox.first_time(conn, CONSUMER_CANCELS, env.id):
                return
            await store.lock_preemptor(conn, job_id)
            await store.record_cancelled(conn, job_id, now)
            for plan_id in await store.open_plans_of_preemptor(conn, job_id):
                saga = await store.lock_saga(conn, plan_id)
                if saga is None:
                    continue
                effects = domain.preemptor_cancelled(saga, now)
                await store.save_saga(conn, saga, now)
                await self._emit(conn, saga, effects)
                aborted.append(plan_id)
        for plan_id in aborted:
            log.info("plan %s aborted: its preemptor %s was cancelled", plan_id, job_id)
        if aborted:
            self._committed()

    # ------------------------------------------------------------ deadlines

    async def fire_deadlines(self) -> int:
        """Force the stop of victims past their deadline; returns the plans changed.

        Deadlines live in the victims table, so a restarted coordinator finds them again.
        """
        async with self._engine().begin() as conn:
            due = await store.plans_due(conn, self._clock.now(), DUE_BATCH)
        fired = 0
        for plan_id in due:
            now = self._clock.now()
            async with self._engine().begin() as conn:
                # Skip a plan another handler holds: its deadline is seen again next tick.
                saga = await store.lock_saga(conn, plan_id, skip_locked=True)
                effects = domain.deadlines_passed(saga, now) if saga else []
                if saga is None or not effects:
                    continue
                await store.save_saga(conn, saga, now)
                await self._emit(conn, saga, effects)
            fired += 1
            log.warning("plan %s: deadline passed without an acknowledgement; forcing the stop"
                        " of %s", plan_id, ", ".join(
                            e.victim.run_id for e in effects if isinstance(e, domain.SendStop)))
        if fired:
            self._committed()
        return fired

    async def run_timers(self, interval_s: float) -> None:
        while True:
            try:
                await self.fire_deadlines()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away; the deadlines wait in their rows
                log.warning("deadline timer: %s: %s; retrying", type(exc).__name__, exc)
            await self._clock.sleep(interval_s)

    # ------------------------------------------------------------ helpers

    async def _emit(self, conn: AsyncConnection, saga: Saga, effects: list[Effect],
                    plan: SpanContext | None = None) -> None:
        await emit(self._outbox, conn, saga, effects, self._clock.now(), plan)

    def _committed(self) -> None:
        crash_point("after_commit:preemption")
        if self._on_commit is not None:
            self._on_commit()

    def _parse(self, raw: bytes, model: type[M]) -> Envelope[M] | None:
        try:
            return parse(raw, model, max_bytes=self._max_bytes)
        except ContractError as exc:
            # The message text names the field and rule, never a value, so no token leaks.
            log.warning("skipping an unreadable %s: %s", model.__name__, exc)
            return None

    def _parse_any(self, raw: bytes) -> Envelope[Any] | None:
        try:
            return parse_any(raw, max_bytes=self._max_bytes)
        except ContractError as exc:
            log.warning("skipping an unreadable run event: %s", exc)
            return None
