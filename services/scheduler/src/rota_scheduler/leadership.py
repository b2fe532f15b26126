"""Leadership: one scheduler leads at a time, holding a lease in the NATS KV store. The leader
rebuilds its view by replaying ROTA_EVT from the start, checks it against the ledger's
allocations, answers `rota why` and `rota cluster nodes`, and runs debounced cycles until it
loses the lease; then it stops, so that a standby can lead."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket

from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from rota.bus.query import answer_query, api_error
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import LEDGER_ALLOCATIONS, SCHEDULER_NODES, SCHEDULER_WHY, STREAM_EVT
from rota.ids import new_id
from rota.service import RotaService
from rota_policy import PolicyConfig

from rota_scheduler import metrics
from rota_scheduler.asking import Questions
from rota_scheduler.cycle import SOURCE, SchedulingCycle
from rota_scheduler.drains import node_states
from rota_scheduler.heap import FrozenHeap
from rota_scheduler.intake import Intake
from rota_scheduler.lease import Lease
from rota_scheduler.snapshot import running_runs
from rota_scheduler.view import ClusterView

log = logging.getLogger("rota.scheduler")


class Leadership:
    def __init__(self, service: RotaService, cycle: SchedulingCycle) -> None:
        self.service = service
        self.cycle = cycle
        """The cycles it runs; their view, intake and questions are the ones it feeds."""
        self.view: ClusterView = cycle.view
        self.policy: PolicyConfig = cycle.policy
        self.intake: Intake = cycle.intake
        self.questions: Questions = cycle.questions
        self.dirty: asyncio.Event = cycle.dirty
        settings = service.settings
        self.tick_s = settings.scheduler_tick_s
        self.debounce_s = settings.scheduler_debounce_s
        self.lease_ttl_s = settings.scheduler_lease_ttl_s
        self.heap = FrozenHeap(settings.scheduler_gc_sweep_s)

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
        intake = self.intake
        intake.replay_target = (await jetstream.stream_info(STREAM_EVT)).state.last_seq
        if intake.replay_target == 0:
            intake.caught_up.set()
        await jetstream.subscribe(
            "rota.evt.>", cb=intake.on_event, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        await intake.caught_up.wait()
        await self._reconcile_with_ledger()
        log.info("view rebuilt from %d events: %d jobs", intake.replay_target, len(self.view.jobs))
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
                    await self.cycle.run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying at the next tick")
            self.heap.settle(self.service.clock.now().timestamp())
        log.error("lease lost: stopping so a standby can lead")
        self.service.app.exit()
