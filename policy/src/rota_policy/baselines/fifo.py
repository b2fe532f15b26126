"""FIFO, as in the Helios paper's baseline: strict submit order across all tiers and teams.

No backfill (the head of the queue blocks everything behind it), no preemption, no quotas.
Gangs are still placed best-fit, all or nothing.
"""

from __future__ import annotations

from rota_policy.cycle.engine import Rules, run_cycle
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import Decisions
from rota_policy.model.snapshot import Snapshot

__all__ = ["FIFO_RULES", "schedule_fifo"]

FIFO_RULES = Rules(name="fifo", order="submit", quotas=False, backfill="none", planner=None)


def schedule_fifo(snapshot: Snapshot, now: float, config: PolicyConfig) -> Decisions:
    return run_cycle(snapshot, now, config, FIFO_RULES)
