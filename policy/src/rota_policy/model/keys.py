"""The words for queues, and the key of a lane.

The policy says "queue" of three things, and its code names each by one word:
- a **tier** (production, training, experiment): what `rota.yaml` calls a queue (`queues:`),
  with its weight, wait target and protection;
- a **lane**: the pending jobs of one (tier, team, flavor), oldest first, which the caller keeps
  sorted and the walk merges lazily (`snapshot.PendingQueue` holds one lane's jobs; `LaneKey`
  names it);
- a **queue group** is NATS's, never the policy's: the services' consumers share work through
  one (the policy does no I/O).
"""

from __future__ import annotations

from typing import NamedTuple

from rota.contracts.common import Tier

__all__ = ["LaneKey"]


class LaneKey(NamedTuple):
    """One lane: the pending jobs of a tier, a team and a flavor."""

    tier: Tier
    team: str
    flavor: str
