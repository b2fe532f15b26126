"""The per-job queue gauges, recomputed only when something changed and within a share of a
core: they cost a pass over every job (0.2 s at 100,000 pending)."""

from __future__ import annotations

import time

from rota_policy import Decisions

from rota_scheduler import metrics
from rota_scheduler.view import ClusterView

GAUGE_DUTY = 0.005
"""At most this share of a core goes to recomputing the per-job queue gauges: at 100,000
pending (0.13 s a pass), about every 26 s, within a 30 s scrape interval."""


class QueueGauges:
    def __init__(self) -> None:
        self.observed_changes = -1
        """The view's change count when the queue gauges were last computed."""
        self.owed = True
        self.due = 0.0

    def observe(self, view: ClusterView, decisions: Decisions, epoch: float) -> None:
        """A cycle's metrics; the queue gauges too when owed and due."""
        self.owed |= view.changes != self.observed_changes or bool(decisions.pending)
        queues = self.owed and epoch >= self.due
        cpu = time.thread_time()
        metrics.observe_cycle(view, decisions, epoch, queues=queues)
        if queues:
            self.owed = False
            self.observed_changes = view.changes
            self.due = epoch + (time.thread_time() - cpu) / GAUGE_DUTY
