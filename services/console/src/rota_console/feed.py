"""Live updates: the teams' NATS feeds, relayed to each browser as server-sent events.

One subscription on `rota.feed.>` for the whole console; each open page gets only the events
of the teams its viewer may see, and only their type and job id: the page then asks the API
again, under the viewer's scoping, for what changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from nats.aio.msg import Msg
from rota.contracts.subjects import FEED_PREFIX

from rota_console.reader import Viewer

KEEPALIVE_S = 15.0
QUEUE_SIZE = 256


@dataclass(frozen=True)
class FeedEvent:
    team: str
    type: str
    job_id: str | None


def parse(msg: Msg) -> FeedEvent | None:
    """`rota.feed.<team>.<event subject>` and its envelope; None for anything else."""
    parts = msg.subject.split(".")
    if len(parts) < 4 or ".".join(parts[:2]) != FEED_PREFIX:
        return None
    try:
        doc = json.loads(msg.data)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    job_id = doc.get("job_id")
    return FeedEvent(team=parts[2], type=str(doc.get("type") or "?"),
                     job_id=job_id if isinstance(job_id, str) else None)


@dataclass
class Relay:
    listeners: set[tuple[Viewer, asyncio.Queue[FeedEvent]]] = field(default_factory=set)

    async def on_message(self, msg: Msg) -> None:
        event = parse(msg)
        if event is None:
            return
        for viewer, queue in list(self.listeners):
            if viewer.may_see(event.team):
                with contextlib.suppress(asyncio.QueueFull):  # a slow page misses a nudge
                    queue.put_nowait(event)

    async def stream(self, viewer: Viewer) -> AsyncIterator[str]:
        """The SSE lines of one page, until it goes away."""
        queue: asyncio.Queue[FeedEvent] = asyncio.Queue(QUEUE_SIZE)
        entry = (viewer, queue)
        self.listeners.add(entry)
        try:
            yield ": connected\n\n"
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                data = json.dumps({"type": event.type, "job_id": event.job_id})
                yield f"event: rota\ndata: {data}\n\n"
        finally:
            self.listeners.discard(entry)
