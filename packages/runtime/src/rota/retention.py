"""Pruning decision records past their retention, periodically, in any service.

Every service that keeps decision records (the scheduler's decision log, the submission
read model's job history) runs one `prune_periodically` task; pruning is an idempotent
`DELETE ... WHERE at < cutoff`, so replicas and standbys may all run it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from rota.clock import Clock

log = logging.getLogger("rota.retention")

Prune = Callable[[datetime], Awaitable[int]]


async def prune_once(what: str, prune: Prune, clock: Clock, retention_s: float) -> int:
    if retention_s <= 0:
        return 0
    removed = await prune(clock.now() - timedelta(seconds=retention_s))
    if removed:
        log.info("pruned %d %s older than %.0f s", removed, what, retention_s)
    return removed


async def prune_periodically(what: str, prune: Prune, clock: Clock, retention_s: float,
                             interval_s: float) -> None:
    if retention_s <= 0:
        return
    while True:
        try:
            await prune_once(what, prune, clock, retention_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database is away: the rows wait for the next round
            log.warning("pruning %s failed: %s: %s", what, type(exc).__name__, exc)
        await clock.sleep(interval_s)
