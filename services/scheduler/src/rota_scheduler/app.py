"""The scheduler service: lease, replay, debounced cycles, and acting on the decisions.

A cycle, in numbered phases:
    1. start    StartRun for every granted run not yet started (claimed in our table)
    2. snapshot the view, folded from ROTA_EVT
    3. decide   `policy.schedule(snapshot, now, config)`, pure
    4. act      proposals, plans, changed JobPending, stops, and the decision log, in one
                transaction through the outbox; then the view records what it sent

Phases 2-3 and the planning of 4 run in a worker thread, so that however long the policy
takes, the event loop still renews the lease and answers the server's pings. Events that
arrive meanwhile wait in a list and are folded in once the decisions are planned: the view
holds still under the thread, as it did when the policy ran on the loop (docs/DECISIONS.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from rota.bus.batch import forged
from rota.bus.query import answer_query, api_error
from rota.config import RotaConfig, load_config
from rota.contracts import ContractError, Envelope, envelope, parse_any
from rota.contracts import messages as m
from rota.contracts.lifecycle import Phase
from rota.contracts.subjects import (
    EVENT_SUBJECTS,
    LEDGER_ALLOCATIONS,
    SCHEDULER_NODES,
    SCHEDULER_WHY,
    STREAM_EVT,
)
from rota.ids import new_id
from rota.retention import prune_periodically
from rota.service import RotaService, stop_tasks
from rota.tracing import job_span
from rota_policy import Decisions, PolicyConfig, policy_config_from, schedule

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
from rota_scheduler.drains import add_drain_actions, node_states
from rota_scheduler.heap import FrozenHeap
from rota_scheduler.lease import Lease
from rota_scheduler.records import JobRecord
from rota_scheduler.refresh import RefreshPass
from rota_scheduler.snapshot import policy_snapshot, running_runs
from rota_scheduler.tracing import JobTraces, decision_span, paired
from rota_scheduler.view import ClusterView

log = logging.getLogger("rota.scheduler")

SOURCE = "scheduler"

SLICE = 256
"""Events folded, or messages built, between two turns of the event loop: the lease's renewal
and the server's pings never wait behind a long backlog."""

EXPLAINED_PER_CYCLE = 2_000
"""JobPending events one cycle publishes at most, and jobs it asks about: a cycle's transaction
and its explaining stay small however many waits change at once."""


GAUGE_DUTY = 0.005
"""At most this share of a core goes to recomputing the per-job queue gauges: at 100,000
pending (0.13 s a pass), about every 26 s, within a 30 s scrape interval."""


OWN_ECHOES_KEPT = 50_000
"""Own JobPending ids remembered at most (`Scheduler.own_pending`)."""

JOB_PENDING = EVENT_SUBJECTS["JobPending"]

REFRESH_SLICE = 500
"""Pending jobs a cycle asks about again at most. Each changed explanation is a JobPending
that every reader of the stream takes in stream order: a slice of 2,000 held a fitting job's
JobSubmitted behind their echoes for up to a second at 100,000 pending."""


class Scheduler:
    def __init__(self, service: RotaService, config: RotaConfig, policy: PolicyConfig) -> None:
        self.service = service
        self.view = ClusterView(config)
        self.policy = policy
        self.dirty = asyncio.Event()
        self.last_seq = 0
        self.replay_target = 0
        self.caught_up = asyncio.Event()
        self.start_sent: set[str] = set()
        self.cycles = 0
        self.traces = JobTraces()
        settings = service.settings
        self.tick_s = settings.scheduler_tick_s
        self.debounce_s = settings.scheduler_debounce_s
        self.lease_ttl_s = settings.scheduler_lease_ttl_s
        self.refresh = RefreshPass(settings.scheduler_explain_interval_s,
                                   settings.scheduler_explain_duty, REFRESH_SLICE)
        self.observed_changes = -1
        """The view's change count when the queue gauges were last computed."""
        self.gauges_owed = True
        self.gauges_due = 0.0
        self.refreshing = False
        """Whether this cycle asks about a refresh slice (`RefreshPass.spent` is told its CPU)."""
        self._held: list[Msg] | None = None
        """Events that arrived while a worker thread decides from the view; None otherwise."""
        self.own_pending: dict[str, None] = {}
        """Message ids of the JobPending events this process committed and has not seen come
        back. Their echoes are skipped unread: `record_sent` folded each into the view at its
        commit, and with a deep queue they were most of what the scheduler read."""
        self.held_back: set[str] = set()
        """Jobs whose changed explanation is still to publish (`plan_actions`' `pending_limit`)."""
        self.questions = Questions(self.view, self.dirty.set,
                                   max_bytes=settings.max_message_bytes)
        """`rota why` asked afresh (`rota_scheduler.asking`), answered by the next cycle."""
        self.budgets = BudgetReporter()
        self.heap = FrozenHeap(settings.scheduler_gc_sweep_s)

    # ------------------------------------------------------------ events

    def _believed(self, msg: Msg) -> Envelope[Any] | None:
        """The event, unless its sender may not send it or it cannot be read."""
        senders = self.service.senders
        if senders is not None and forged(msg, senders, "scheduler-view"):
            return None
        try:
            return parse_any(msg.data, max_bytes=self.service.settings.max_message_bytes)
        except ContractError as exc:
            log.warning("skipping an unreadable event: %s", exc)
            return None

    async def on_event(self, msg: Msg) -> None:
        if self._held is not None:
            self._held.append(msg)
            return
        self._take(msg)

    def _take(self, msg: Msg) -> None:
        own_echo = self._own_pending_echo(msg)
        if not own_echo and (env := self._believed(msg)) is not None:
            self.view.apply(env.data, env.occurred_at.timestamp())
            self.traces.observe(env.data, env.job_id, msg.headers)
        self.last_seq = msg.metadata.sequence.stream
        if self.last_seq >= self.replay_target:
            self.caught_up.set()
        if not own_echo:
            self.dirty.set()

    def _own_pending_echo(self, msg: Msg) -> bool:
        """Whether `msg` is a JobPending this process committed (and forgets it if so)."""
        if not self.own_pending or msg.subject != JOB_PENDING:
            return False
        msg_id = (msg.headers or {}).get("Nats-Msg-Id")
        if msg_id not in self.own_pending:
            return False
        del self.own_pending[msg_id]
        return True

    def _sent_pending(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row["subject"] == JOB_PENDING:
                self.own_pending[row["id"]] = None
        while len(self.own_pending) > OWN_ECHOES_KEPT:  # echoes lost, or never coming
            del self.own_pending[next(iter(self.own_pending))]

    # ------------------------------------------------------------ leadership

    async def lead(self) -> None:
        js = self.service.broker.connection.jetstream()
        lease = Lease(js, f"{socket.gethostname()}-{os.getpid()}-{new_id()[-8:]}", self.lease_ttl_s)
        log.info("standing by for the scheduler lease")
        await lease.acquire()
        lost = asyncio.Event()
        keeper = asyncio.create_task(lease.keep(lost), name="scheduler-lease")
        self.heap.start()
        questions = None
        try:
            await self._rebuild()
            # Only the leader, once its view is whole, answers `rota why` afresh.
            questions = await self.service.broker.connection.subscribe(
                SCHEDULER_WHY, cb=self.questions.on_request)
            await self._loop(lost)
        finally:
            if questions is not None:
                await questions.unsubscribe()
            self.heap.stop()
            keeper.cancel()
            await lease.release()

    async def _rebuild(self) -> None:
        # Our own decisions must be in the stream before we replay it, or we would decide
        # them a second time.
        assert self.service.relay is not None
        await self.service.relay.drain()
        jetstream = self.service.broker.connection.jetstream()
        self.replay_target = (await jetstream.stream_info(STREAM_EVT)).state.last_seq
        if self.replay_target == 0:
            self.caught_up.set()
        await jetstream.subscribe(
            "rota.evt.>", cb=self.on_event, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        await self.caught_up.wait()
        await self._reconcile_with_ledger()
        log.info("view rebuilt from %d events: %d jobs", self.replay_target, len(self.view.jobs))
        # Only the leader answers: a standby's view is not kept.
        await self.service.broker.connection.subscribe(SCHEDULER_NODES, cb=self._answer_nodes)

    async def _answer_nodes(self, msg: Msg) -> None:
        """`rota cluster nodes`: each node's state and its runs, from the view."""

        async def listing(query: m.ListNodes) -> m.ApiReply:
            epoch = self.service.clock.now().timestamp()
            names = {n.name for n in self.view.config.expanded_nodes()}
            if query.node is not None and query.node not in names:
                return api_error("UNKNOWN_NODE", f"no node {query.node!r} in rota.yaml", "node")
            nodes = node_states(self.view, running_runs(self.view, epoch), epoch,
                                default_runtime_s=self.policy.default_runtime_s,
                                runtime_scale=self.view.runtime_scale.value, only=query.node)
            return m.ApiReply(ok=True, result={"nodes": nodes})

        if msg.reply:
            await msg.respond(await answer_query(
                msg.data, m.ListNodes, listing, source=SOURCE,
                max_bytes=self.service.settings.max_message_bytes))

    async def _reconcile_with_ledger(self) -> None:
        request = envelope(m.ListAllocations(active_only=True), source=SOURCE).to_bytes()
        try:
            raw = await self.service.broker.connection.request(
                LEDGER_ALLOCATIONS, request, timeout=self.service.settings.request_timeout_s)
            reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
        except Exception as exc:  # the ledger is down: the stream's view will do until it's back
            log.warning("could not read the ledger's allocations (%s); using the stream's view",
                        exc)
            return
        if not reply.ok or reply.result.get("truncated"):
            log.warning("the ledger's allocations were not usable: %s", reply.error)
            return
        added, dropped = self.view.reconcile(reply.result["allocations"])
        if added or dropped:
            log.warning("reconciled with the ledger: %d allocations added, %d dropped",
                        added, dropped)

    async def _loop(self, lost: asyncio.Event) -> None:
        while not lost.is_set():
            try:
                await asyncio.wait_for(self.dirty.wait(), timeout=self.tick_s)
                await asyncio.sleep(self.debounce_s)  # gather a burst into one cycle
            except TimeoutError:
                pass
            self.dirty.clear()
            try:
                with metrics.cycle_timer():
                    await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying at the next tick")
            self.heap.settle(self.service.clock.now().timestamp())
        log.error("lease lost: stopping so a standby can lead")
        self.service.app.exit()

    # ------------------------------------------------------------ one cycle

    async def cycle(self) -> None:
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
        self._held = []
        wanted = self.questions.take()
        try:
            decisions, actions, asked = await asyncio.to_thread(self._decide, epoch, wanted)
        except asyncio.CancelledError:
            raise  # the thread may still be reading the view: events stay held, we are stopping
        except Exception:
            await self._fold_held()
            raise
        for job_id in decisions.abandoned_plans:
            for plan_id in [p.plan_id for p in self.view.plans.values() if p.preemptor_job_id == job_id]:
                self.view.plans.pop(plan_id, None)
            self.view.restarts.pop(job_id, None)  # its GPUs went to another: it starts anywhere
        await self._fold_held()
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
        self._sent_pending(rows)
        self.held_back = backlog
        metrics.decided(actions.records)
        self.cycles += 1
        if self.service.relay is not None:
            self.service.relay.wake()

    async def _fold_held(self) -> None:
        """Fold in, in order, the events that arrived while a cycle decided. The loop gets a
        turn every `SLICE` events, and what arrives meanwhile joins the end of the list, so
        the order stays the stream's."""
        held = self._held or []
        folded = 0
        while folded < len(held):
            self._take(held[folded])
            folded += 1
            if folded % SLICE == 0:
                await asyncio.sleep(0)
        self._held = None

    def _decide(self, epoch: float, wanted: frozenset[str] = frozenset()
                ) -> tuple[Decisions, Actions, frozenset[str]]:
        """Phases 2-3 and the plan of 4, in a worker thread: nothing else touches the view
        meanwhile (`on_event` holds events back), and the snapshot is a copy the policy owns.
        Also returns the jobs asked about, other than those a refresh asked about again."""
        asked = next_to_explain(self.view, self.held_back, EXPLAINED_PER_CYCLE)
        again = self.refresh.take(epoch, self._pending_ids, self._still_pending,
                                  EXPLAINED_PER_CYCLE - len(asked), self.view.changes)
        self.refreshing = bool(again)
        snapshot = policy_snapshot(self.view, epoch, asked.union(again, wanted))
        decisions = schedule(snapshot, epoch, self.policy)
        # The queue gauges cost a pass over every job (0.2 s at 100,000 pending): only when
        # something changed, and within `GAUGE_DUTY` of a core.
        self.gauges_owed |= self.view.changes != self.observed_changes or bool(decisions.pending)
        queues = self.gauges_owed and epoch >= self.gauges_due
        cpu = time.thread_time()
        metrics.observe_cycle(self.view, decisions, epoch, queues=queues)
        if queues:
            self.gauges_owed = False
            self.observed_changes = self.view.changes
            self.gauges_due = epoch + (time.thread_time() - cpu) / GAUGE_DUTY
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
    scheduler = Scheduler(service, config, policy_config_from(config))
    tasks: list[asyncio.Task[None]] = []

    @service.app.after_startup
    async def start_leading() -> None:
        tasks.append(asyncio.create_task(scheduler.lead(), name="scheduler-lead"))
        tasks.append(asyncio.create_task(prune_decisions(service), name="scheduler-prune"))

    @service.app.on_shutdown
    async def stop_leading() -> None:
        await stop_tasks(tasks)

    return service
