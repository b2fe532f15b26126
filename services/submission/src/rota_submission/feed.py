"""Each team's live feed of its own jobs' events: `rota.feed.<team>.<event>` on core NATS.

A team identity reads no stream (it has no `$JS.API`), so this is how a producer follows its
jobs without polling: a durable of its own (`submission-feed`, which never gathers) hands on
every event of a job of the team as soon as it is on ROTA_EVT, unchanged (the same body and
headers, so its signature still holds), in stream order per job. It does not wait for the
read model, which gathers its events for up to `PROJECTION_GATHER_S`: a query right after a
feed copy may not show it yet. Delivery is at most once, like any core subscription (a
restart of the service may send a copy again: its envelope id tells a repeat); a subscriber
that was away asks `rota.api.job.get.<team>` or `rota.api.job.trace.<team>` for what it missed.

Only events about one job go on: a plan names jobs of several teams, so `PreemptionRequested`
and `PreemptionCompleted` stay off every feed, as do the services' own bookkeeping
(`AllocationProposed`, `UsageRecorded`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from rota.contracts import ContractError, Envelope, parse_any
from rota.contracts.subjects import EVENT_SUBJECTS, FEED_TYPES, feed

log = logging.getLogger("rota.submission.feed")

FEED_SUBJECTS = tuple(sorted(EVENT_SUBJECTS[name] for name in FEED_TYPES))


@dataclass(frozen=True)
class FeedItem:
    position: int
    """Which message of the batch: it goes on as it came."""
    subject: str


def feed_items(events: list[tuple[int, Envelope[Any], dict[str, Any]]],
               teams: Mapping[str, str]) -> list[FeedItem]:
    """The feed subjects of new events: each job's own team, from the read model; a rejected
    submission has no job row, and its team is the one it was rejected for."""
    items = []
    for position, env, data in events:
        if env.type not in FEED_TYPES:
            continue
        team = (teams.get(env.job_id) if env.job_id else None) or data.get("team")
        if isinstance(team, str) and team:
            items.append(FeedItem(position, feed(team, EVENT_SUBJECTS[env.type])))
    return items


def feed_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The event's own headers (type, trace context, signature), without the server's
    `Nats-*` ones, which mean something only to a stream."""
    return {k: v for k, v in (headers or {}).items() if not k.startswith("Nats-")}


TeamsOf = Callable[[list[str]], Awaitable[dict[str, str]]]
Publish = Callable[[str, bytes, dict[str, str]], Awaitable[None]]


@dataclass
class Feeder:
    """Hands each batch of ROTA_EVT's feed types on to the teams' feeds, in stream order.

    A job's team never changes: it comes from the job's `JobSubmitted` (its spec) or, for a
    job this process has not seen, from the jobs table, where the submit's own transaction
    wrote it before its `JobSubmitted` was published. A rejected submission has no job: its
    `team` is its sender's."""

    teams_of: TeamsOf
    publish: Publish
    max_bytes: int
    owns: Callable[[str | None], bool] = lambda _job_id: True
    """With several replicas, the jobs this one feeds (rota.bus.partition), as it folds them."""
    remembered: int = 100_000
    _teams: OrderedDict[str, str] = field(default_factory=OrderedDict)
    _fed: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """The envelope ids fed lately: an event on the stream twice (republished after the
    dedup window) is fed once."""

    async def feed(self, batch: list[Msg]) -> int:
        events: list[tuple[int, Envelope[Any], dict[str, Any]]] = []
        batch_ids: dict[int, str] = {}
        here: set[str] = set()
        for position, msg in enumerate(batch):
            try:
                env = parse_any(msg.data, max_bytes=self.max_bytes)
            except ContractError as exc:
                log.warning("team feeds: skipping an unreadable event: %s", exc)
                continue
            if env.type not in FEED_TYPES or not self.owns(env.job_id) or env.id in self._fed \
                    or env.id in here:
                continue
            batch_ids[position] = env.id
            here.add(env.id)
            data: dict[str, Any] = env.data.model_dump(mode="json")
            spec = data.get("spec")
            if env.job_id and isinstance(spec, dict) and isinstance(spec.get("team"), str):
                self._remember(env.job_id, spec["team"])
            events.append((position, env, data))
        missing = sorted({env.job_id for _, env, _ in events
                          if env.job_id and env.job_id not in self._teams})
        for job_id, team in (await self.teams_of(missing) if missing else {}).items():
            self._remember(job_id, team)
        items = feed_items(events, self._teams)
        for item in items:
            msg = batch[item.position]
            await self.publish(item.subject, msg.data, feed_headers(msg.headers))
            self._bounded(self._fed, batch_ids[item.position], None)
        return len(items)

    def _remember(self, job_id: str, team: str) -> None:
        self._bounded(self._teams, job_id, team)

    def _bounded(self, memory: OrderedDict[str, Any], key: str, value: Any) -> None:
        memory[key] = value
        memory.move_to_end(key)
        while len(memory) > self.remembered:
            memory.popitem(last=False)
