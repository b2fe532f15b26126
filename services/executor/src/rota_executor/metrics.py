"""The executor's metrics: how each run ended and how long it ran.

Recorded after the transaction that records the end commits, so a rolled-back end (the
database went away) counts nothing, and its redelivery counts once.
"""

from __future__ import annotations

from datetime import datetime

from rota import metrics
from rota.contracts import messages as m
from rota.contracts.subjects import RUN_CHECKPOINT_ALL

from rota_executor.backend import RunRecord
from rota_executor.domain import Outcome


def outcome_label(event: m.RunFinished | m.RunFailed | m.RunStopped) -> str:
    """finished, failed, or the stop's reason (preempted, cancelled, deadline): few values."""
    if isinstance(event, m.RunStopped):
        return event.reason.value
    return "finished" if isinstance(event, m.RunFinished) else "failed"


@metrics.never_raises
def run_ended(result: Outcome, run: RunRecord, ended_at: datetime, time_scale: float) -> None:
    metrics.JOBS_FINISHED.labels(outcome=outcome_label(result.event)).inc()
    # Simulated seconds on the sim backend, like the run's lost GPU-seconds.
    runtime = max(0.0, (ended_at - run.started_at).total_seconds()) * time_scale
    metrics.JOB_RUNTIME.observe(runtime)


@metrics.never_raises
def could_not_start() -> None:
    """A StartRun whose placement or spec this executor cannot run: failed, never ran."""
    metrics.JOBS_FINISHED.labels(outcome="failed").inc()


@metrics.never_raises
def checkpoint_refused() -> None:
    """A checkpoint report without its run's token: counted with the forged messages, under
    the subject pattern (one label, not one per run)."""
    metrics.FORGED_MESSAGES.labels(RUN_CHECKPOINT_ALL).inc()
