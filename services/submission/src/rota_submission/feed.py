"""Each team's live feed of its own jobs' events: `rota.feed.<team>.<event>` on core NATS.

A team identity reads no stream (it has no `$JS.API`), so this is how a producer follows its
jobs without polling: the projection hands on every event that is new for a job of the team,
unchanged (the same body and headers, so its signature still holds), once it is recorded.
Delivery is at most once, like any core subscription: a subscriber that was away asks
`rota.api.job.get.<team>` or `rota.api.job.trace.<team>` for what it missed.

Only events about one job go on: a plan names jobs of several teams, so `PreemptionRequested`
and `PreemptionCompleted` stay off every feed, as do the services' own bookkeeping
(`AllocationProposed`, `UsageRecorded`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rota.contracts import Envelope
from rota.contracts.subjects import EVENT_SUBJECTS, FEED_TYPES, feed


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
