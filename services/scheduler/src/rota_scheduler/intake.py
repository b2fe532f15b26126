"""The scheduler's intake: every event of ROTA_EVT, in stream order, folded into its view.

While a cycle decides in a worker thread the view must hold still, so events that arrive
meanwhile wait in a list (`hold`) and are folded in, in order, once the decisions are planned
(`fold_held`). The echoes of the JobPending events this process committed are skipped unread:
the commit folded each into the view already.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.aio.msg import Msg
from rota.bus.batch import forged
from rota.contracts import ContractError, Envelope, parse_any
from rota.contracts.subjects import EVENT_SUBJECTS
from rota.service import RotaService

from rota_scheduler.tracing import JobTraces
from rota_scheduler.view import ClusterView

log = logging.getLogger("rota.scheduler")

SLICE = 256
"""Events folded, or messages built, between two turns of the event loop: the lease's renewal
and the server's pings never wait behind a long backlog."""

OWN_ECHOES_KEPT = 50_000
"""Own JobPending ids remembered at most (`Intake.own_pending`)."""

JOB_PENDING = EVENT_SUBJECTS["JobPending"]


class Intake:
    def __init__(self, service: RotaService, view: ClusterView, traces: JobTraces,
                 dirty: asyncio.Event) -> None:
        self.service = service
        self.view = view
        self.traces = traces
        self.dirty = dirty
        """Set when something was folded that a cycle should look at."""
        self.last_seq = 0
        self.replay_target = 0
        self.caught_up = asyncio.Event()
        self._held: list[Msg] | None = None
        """Events that arrived while a worker thread decides from the view; None otherwise."""
        self.own_pending: dict[str, None] = {}
        """Message ids of the JobPending events this process committed and has not seen come
        back. Their echoes are skipped unread: `record_sent` folded each into the view at its
        commit, and with a deep queue they were most of what the scheduler read."""

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
        self.take(msg)

    def take(self, msg: Msg) -> None:
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

    def sent_pending(self, rows: list[dict[str, Any]]) -> None:
        """Remember the JobPending events among these outbox rows, to skip their echoes."""
        for row in rows:
            if row["subject"] == JOB_PENDING:
                self.own_pending[row["id"]] = None
        while len(self.own_pending) > OWN_ECHOES_KEPT:  # echoes lost, or never coming
            del self.own_pending[next(iter(self.own_pending))]

    def hold(self) -> None:
        """From now on, events wait in a list: a worker thread reads the view."""
        self._held = []

    @property
    def holding(self) -> bool:
        return self._held is not None

    async def fold_held(self) -> None:
        """Fold in, in order, the events that arrived while a cycle decided. The loop gets a
        turn every `SLICE` events, and what arrives meanwhile joins the end of the list, so
        the order stays the stream's."""
        held = self._held or []
        folded = 0
        while folded < len(held):
            self.take(held[folded])
            folded += 1
            if folded % SLICE == 0:
                await asyncio.sleep(0)
        self._held = None
