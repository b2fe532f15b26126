"""The admin's node commands (DECISIONS 100): `rota.api.node.drain` and `rota.api.node.undrain`.

Admin only by the subject: it is unscoped and has no `.<team>` twin, so no team identity and
not the console may publish on it (`rota.auth.permissions`); with auth off, as every command,
anyone on the bus may. Each checks the node against rota.yaml, records its event through the
outbox (one transaction: the reply is sent once the event is sure to follow) and answers.
"""

from __future__ import annotations

from datetime import timedelta

from rota.bus.query import api_error
from rota.config import RotaConfig
from rota.contracts import envelope, parse
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.service import RotaService

SOURCE = "submission"
DEFAULT_DEADLINE_S = 3600.0
"""A drain with neither `deadline` nor `deadline_s` gives the node's runs an hour."""


class NodeCommands:
    def __init__(self, service: RotaService, config: RotaConfig) -> None:
        self.service = service
        self.nodes = {n.name for n in config.expanded_nodes()}

    def _unknown(self, node: str) -> m.ApiReply | None:
        if node in self.nodes:
            return None
        return api_error("UNKNOWN_NODE", f"no node {node!r} in rota.yaml; `rota cluster nodes`"
                         " lists them", "node")

    async def drain(self, raw: bytes) -> m.ApiReply:
        command = parse(raw, m.DrainNode, max_bytes=self.service.settings.max_message_bytes).data
        if (refused := self._unknown(command.node)) is not None:
            return refused
        now = self.service.clock.now()
        if command.deadline is not None and command.deadline_s is not None:
            return api_error("INVALID_FIELD", "give deadline or deadline_s, not both", "deadline")
        deadline = command.deadline or now + timedelta(
            seconds=DEFAULT_DEADLINE_S if command.deadline_s is None else command.deadline_s)
        deadline = max(deadline, now)  # a deadline in the past means: now
        event = m.NodeDrainRequested(node=command.node, deadline=deadline, reason=command.reason)
        await self._emit(event)
        return m.ApiReply(ok=True, result={"node": command.node, "deadline": deadline.isoformat(),
                                           "reason": command.reason})

    async def undrain(self, raw: bytes) -> m.ApiReply:
        command = parse(raw, m.UndrainNode,
                        max_bytes=self.service.settings.max_message_bytes).data
        if (refused := self._unknown(command.node)) is not None:
            return refused
        await self._emit(m.NodeDrainCancelled(node=command.node))
        return m.ApiReply(ok=True, result={"node": command.node})

    async def _emit(self, event: m.NodeDrainRequested | m.NodeDrainCancelled) -> None:
        env = envelope(event, source=SOURCE, occurred_at=self.service.clock.now())
        async with self.service.engine.begin() as conn:
            await self.service.outbox.add(conn, env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)
        if self.service.relay is not None:
            self.service.relay.wake()
