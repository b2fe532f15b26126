"""The executor's rules, with no I/O: placement checks, how a run ended, and the work it lost."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from rota.config.model import Node
from rota.contracts import messages as m
from rota.contracts.job import WorkerPlacement

from rota_executor.backend import Exit, RunRecord

SIM_URI = re.compile(r"^sim://(?P<job>[^/]+)/(?P<progress>\d+(\.\d+)?)$")


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint_token() -> tuple[str, str]:
    """A new run token and the hash that is all the executor keeps of it."""
    token = secrets.token_urlsafe(32)
    return token, token_sha256(token)


def placement_problem(placement: list[WorkerPlacement], by_name: Mapping[str, Node]
                      ) -> str | None:
    """Nodes are virtual in every backend, but a placement must still name real config nodes
    (`by_name`: the config's, by name): a grant for GPUs that do not exist means the scheduler
    and the executor disagree."""
    seen: set[tuple[str, int]] = set()
    for worker in placement:
        node = by_name.get(worker.node)
        if node is None:
            return f"worker {worker.worker}: no node {worker.node!r} in the cluster config"
        for gpu in worker.gpus:
            if not 0 <= gpu < node.gpus:
                return f"worker {worker.worker}: node {node.name} has no GPU {gpu}"
            if (node.name, gpu) in seen:
                return f"worker {worker.worker}: GPU {gpu} of {node.name} is granted twice"
            seen.add((node.name, gpu))
    return None


def sim_uri(job_id: str, progress_s: float) -> str:
    # Fixed-point, not `%g`: a long run's progress must not turn into "1e+06".
    text = f"{progress_s:.3f}".rstrip("0").rstrip(".")
    return f"sim://{job_id}/{text}"


def sim_progress(uri: str | None, job_id: str) -> float:
    """The progress a `sim://<job>/<progress>` checkpoint resumes from; 0 for anything else
    (a fresh start, or a checkpoint of another job, which the simulator cannot load)."""
    if not uri:
        return 0.0
    match = SIM_URI.match(uri)
    if match is None or match["job"] != job_id:
        return 0.0
    return float(match["progress"])


def lost_gpu_seconds(run: RunRecord, stopped_at: datetime, time_scale: float) -> float:
    """GPUs x run time since the last acknowledged checkpoint, or since the start when the job
    is not resumable or has none, up to the stop, or to the acknowledgement of a notice: a run
    that has acknowledged makes no more progress, so the wait for its stop loses nothing.
    Run time is simulated time on the sim backend."""
    since = run.started_at
    if run.spec.resumable and run.last_checkpoint_at is not None:
        since = max(run.started_at, run.last_checkpoint_at)
    until = stopped_at
    if run.notice_acked_at is not None:
        until = min(until, run.notice_acked_at)
    seconds = max(0.0, (until - since).total_seconds()) * time_scale
    return round(run.gpus * seconds, 3)


@dataclass(frozen=True)
class Outcome:
    """The final state of a run and the event that reports it."""

    state: str
    event: m.RunFinished | m.RunFailed | m.RunStopped
    detail: str


def outcome(
    run: RunRecord, exit: Exit, *, stop_reason: str | None, stop_forced: bool,
    ended_at: datetime, time_scale: float,
) -> Outcome:
    """How a run ended, from its record and its exit.

    - A stop was requested: `RunStopped` with that reason, whatever the exit code.
    - The job acknowledged a notice, then exited by itself (the protocol allows it): that is
      a preemption that completed early, `RunStopped(preempted)`, never "finished": the job
      must resume from its checkpoint.
    - Otherwise exit 0 is `RunFinished`, anything else `RunFailed`.
    """
    if stop_reason is not None or run.notice_acked_at is not None:
        reason = m.StopReason(stop_reason or m.StopReason.preempted)
        forced = stop_forced if stop_reason is not None else False
        event = m.RunStopped(
            run_id=run.run_id, job_id=run.job_id, reason=reason, forced=forced,
            checkpoint_uri=run.last_checkpoint_uri,
            lost_gpu_seconds=lost_gpu_seconds(run, ended_at, time_scale),
        )
        detail = f"stopped ({reason.value}{', forced' if forced else ''}); {exit.detail}".strip()
        return Outcome("stopped", event, detail.rstrip("; "))
    if exit.lost:
        event = m.RunStopped(
            run_id=run.run_id, job_id=run.job_id, reason=m.StopReason.lost, forced=True,
            checkpoint_uri=run.last_checkpoint_uri,
            lost_gpu_seconds=lost_gpu_seconds(run, ended_at, time_scale))
        return Outcome("stopped", event, f"lost: {exit.detail}")
    if exit.code == 0:
        return Outcome("finished", m.RunFinished(run_id=run.run_id, job_id=run.job_id, exit_code=0),
                       exit.detail or "exit 0")
    error = exit.detail or (f"exit code {exit.code}" if exit.code is not None else "ended")
    return Outcome("failed", m.RunFailed(run_id=run.run_id, job_id=run.job_id,
                                         exit_code=exit.code, error=error[:1024]), error)
