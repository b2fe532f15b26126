"""One scheduling cycle, in numbered phases:
    1. start    StartRun for every granted run not yet started (claimed in our table)
    2. snapshot the view, folded from ROTA_EVT
    3. decide   `policy.schedule(snapshot, now, config)`, pure
    4. act      proposals, plans, changed JobPending, stops, and the decision log, in one
                transaction through the outbox; then the view records what it sent

Phases 2-3 and the planning of 4 run in a worker thread, so that however long the policy
takes, the event loop still renews the lease and answers the server's pings. Events that
arrive meanwhile wait (`Intake.hold`) and are folded in once the decisions are planned: the
view holds still under the thread, as it did when the policy ran on the loop
(docs/DECISIONS.md).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from rota.contracts import envelope
from rota.contracts.lifecycle import Phase
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.ids import new_id
from rota.service import RotaService
from rota.tracing import job_span
from rota_policy import Decisions, PolicyConfig, schedule

from rota_scheduler import metrics, store
from rota_scheduler.actions import (
    Actions,
    Outgoing,
    next_to_explain,
    plan_actions,
    record_sent,
    start_run,
)
from rota_scheduler.asking import Questions
from rota_scheduler.budgets import BudgetReporter
from rota_scheduler.drains import add_drain_actions
from rota_scheduler.gauges import QueueGauges
from rota_scheduler.intake import SLICE, Intake
from rota_scheduler.records import JobRecord
from rota_scheduler.refresh import RefreshPass
from rota_scheduler.snapshot import policy_snapshot
from rota_scheduler.tracing import JobTraces, decision_span, paired
from rota_scheduler.view import ClusterView

SOURCE = "scheduler"

EXPLAINED_PER_CYCLE = 2_000
"""JobPending events one cycle publishes at most, and jobs it asks about: a cycle's transaction
and its explaining stay small however many waits change at once."""

REFRESH_SLICE = 500
"""Pending jobs a cycle asks about again at most. Each changed explanation is a JobPending
that every reader of the stream takes in stream order: a slice of 2,000 held a fitting job's
JobSubmitted behind their echoes for up to a second at 100,000 pending."""


class SchedulingCycle:
    def __init__(self, service: RotaService, view: ClusterView, policy: PolicyConfig,
                 intake: Intake, traces: JobTraces, questions: Questions,
                 dirty: asyncio.Event) -> None:
        self.service = service
        self.view = view
        self.policy = policy
        self.intake = intake
        self.traces = traces
        self.questions = questions
        """`rota why` asked afresh (`rota_scheduler.asking`), answered by the next cycle."""
        self.dirty = dirty
        settings = service.settings
        self.refresh = RefreshPass(settings.scheduler_explain_interval_s,
                                   settings.scheduler_explain_duty, REFRESH_SLICE)
        self.gauges = QueueGauges()
        self.budgets = BudgetReporter()
        self.start_sent: set[str] = set()
        self.cycles = 0
        self.refreshing = False
        """Whether this cycle asks about a refresh slice (`RefreshPass.spent` is told its CPU)."""
        self.held_back: set[str] = set()
        """Jobs whose changed explanation is still to publish (`plan_actions`' `pending_limit`)."""

    async def run(self) -> None:
        now = self.service.clock.now()
        epoch = now.timestamp()
        cpu = time.process_time()
        self.refreshing = False
        try:
            await self._cycle(now, epoch)
        finally:
            if self.refreshing:  # the whole cycle counts: deciding, committing, publishing
                self.refresh.spent(epoch, time.process_time() - cpu)

    async def _cycle(self, now: datetime, epoch: float) -> None:
        await self._start_granted(now)
        self.intake.hold()
        wanted = self.questions.take()
        try:
            decisions, actions, asked = await asyncio.to_thread(self.decide, epoch, wanted)
        except asyncio.CancelledError:
            raise  # the thread may still be reading the view: events stay held, we are stopping
        except Exception:
            await self.intake.fold_held()
            raise
        for job_id in decisions.abandoned_plans:
            for plan_id in [p.plan_id for p in self.view.plans.values() if p.preemptor_job_id == job_id]:
                self.view.plans.pop(plan_id, None)
            self.view.restarts.pop(job_id, None)  # its GPUs went to another: it starts anywhere
        await self.intake.fold_held()
        self.questions.answer(wanted, decisions, epoch)
        backlog = (self.held_back - {e.job_id for e in decisions.pending}) | set(actions.held_back)
        if backlog or len(asked) >= EXPLAINED_PER_CYCLE:
            self.dirty.set()  # more to explain: the next cycle comes after the debounce
        if not actions.outgoing:
            self.held_back = backlog
            return
        cycle_id = new_id()
        async with self.service.engine.begin() as conn:
            await store.add_runs(conn, actions.new_runs, now)
            await store.add_decisions(conn, cycle_id, now, actions.records)
            rows = []
            for item, record in paired(actions, self.traces):
                with decision_span(item, record, self.traces, cycle_id):
                    rows.append(self._outbox_row(item, now))
                if len(rows) % SLICE == 0:
                    await asyncio.sleep(0)
            await self.service.outbox.add_rows(conn, rows)
        record_sent(self.view, actions, epoch)
        self.intake.sent_pending(rows)
        self.held_back = backlog
        metrics.decided(actions.records)
        self.cycles += 1
        if self.service.relay is not None:
            self.service.relay.wake()

    def decide(self, epoch: float, wanted: frozenset[str] = frozenset()
               ) -> tuple[Decisions, Actions, frozenset[str]]:
        """Phases 2-3 and the plan of 4, in a worker thread: nothing else touches the view
        meanwhile (the intake holds events back), and the snapshot is a copy the policy owns.
        Also returns the jobs asked about, other than those a refresh asked about again."""
        asked = next_to_explain(self.view, self.held_back, EXPLAINED_PER_CYCLE)
        again = self.refresh.take(epoch, self._pending_ids, self._still_pending,
                                  EXPLAINED_PER_CYCLE - len(asked), self.view.changes)
        self.refreshing = bool(again)
        snapshot = policy_snapshot(self.view, epoch, asked.union(again, wanted))
        decisions = schedule(snapshot, epoch, self.policy)
        self.gauges.observe(self.view, decisions, epoch)
        actions = plan_actions(self.view, decisions, now=epoch,
                               pending_limit=EXPLAINED_PER_CYCLE)
        add_drain_actions(self.view, snapshot, actions, epoch,
                          default_runtime_s=self.policy.default_runtime_s)
        report = self.budgets.report(self.view, epoch)
        if report is not None:
            actions.outgoing.append(Outgoing(report, EVENT_SUBJECTS["BudgetUsageRecorded"], STREAM_EVT))
        return decisions, actions, asked

    def _pending_ids(self) -> list[str]:
        return [job.job_id for job in self.view.pending_jobs()]

    def _still_pending(self, job_id: str) -> bool:
        job = self.view.jobs.get(job_id)
        return job is not None and job.phase is Phase.PENDING and not job.cancelled

    async def _start_granted(self, now: datetime) -> None:
        """Phase 1: StartRun once per granted run, all claimed in one transaction (a claim
        and its StartRun queued commit together, so a crash loses neither)."""
        todo: list[tuple[str, JobRecord]] = []
        for run_id in sorted(self.view.granted_unstarted - self.start_sent):
            allocation = self.view.allocations.get(run_id)
            job = self.view.jobs.get(allocation.job_id) if allocation else None
            if job is None or job.cancelled or job.run_id != run_id:
                continue
            todo.append((run_id, job))
        if not todo:
            return
        async with self.service.engine.begin() as conn:
            claimed = await store.claim_starts(conn, [run_id for run_id, _ in todo], now)
            rows = []
            for run_id, job in todo:
                if run_id not in claimed:
                    continue  # sent by a predecessor
                with job_span("rota.scheduler.start_run", job.job_id,
                              {"rota.run_id": run_id, "rota.attempt": max(1, job.attempt),
                               "rota.resume_from": job.resume_from},
                              parent=self.traces.run_start(job.job_id, run_id)):
                    rows.append(self._outbox_row(start_run(job, run_id, self.view), now))
            await self.service.outbox.add_rows(conn, rows)
        if rows and self.service.relay is not None:
            self.service.relay.wake()  # now, not once the cycle has decided and acted too
        for run_id, job in todo:
            self.start_sent.add(run_id)
            if run_id in claimed:
                metrics.job_started(job, now.timestamp())

    def _outbox_row(self, item: Outgoing, now: datetime) -> dict[str, Any]:
        env = envelope(
            item.message, source=SOURCE, job_id=item.job_id, run_id=item.run_id, id=item.id, occurred_at=now
        )
        return self.service.outbox.row(env, item.subject, stream=item.stream)
