"""Event envelopes for the notifier's tests: unique ids every call, times from the caller."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from rota.config import RotaConfig, parse_config
from rota.contracts import Envelope, envelope
from rota.contracts import messages as m
from rota.contracts.job import WorkerPlacement
from rota.ids import new_id

from tests.builders import submit_job

CONFIG: dict[str, Any] = {
    "cluster": {"flavors": [{"name": "h100"}],
                "nodes": [{"name": "node-0", "flavor": "h100", "gpus": 8}]},
    "teams": {
        "ml": {
            "quota": {"h100": 8},
            "slack_channel": "C0MLTEAM",
            "email": "ml-team@example.com",
            "users": {
                "alice": {"email": "alice@example.com", "slack_id": "U0ALICE",
                          "timezone": "Europe/Berlin"},
                "bob": {"email": "bob@example.com", "slack_id": "U0BOB",
                        "opt_out": ["run_failed"], "preemption_channel": "email"},
            },
        },
    },
}


def rota_config() -> RotaConfig:
    return parse_config(CONFIG)


PLACEMENT = [WorkerPlacement(worker=0, node="node-0", gpus=[0, 1])]


def submitted(at: datetime, *, team: str = "ml", user: str = "alice", queue: str = "experiment",
              name: str = "llama-ft") -> Envelope[Any]:
    job_id = new_id()
    spec = submit_job(team=team, user=user, queue=queue, name=name, flavor="h100",
                      gpus_per_worker=2)
    return envelope(m.JobSubmitted(job_id=job_id, spec=spec, submitted_at=at),
                    source="submission", job_id=job_id, occurred_at=at)


def noticed(at: datetime, *, job_id: str | None = None, user: str = "alice",
            team: str = "ml", name: str = "llama-ft", grace_s: float = 300.0,
            resume_from: str | None = "s3://ckpt/llama-ft/step-1200",
            resumable: bool = True, shrink_to: int | None = None, reason: str = "PRIORITY",
            node: str | None = None) -> Envelope[Any]:
    job_id = job_id or new_id()
    run_id = new_id()
    data = m.PreemptionNoticed(
        plan_id=new_id(), notice_id=new_id(), run_id=run_id, job_id=job_id, job_name=name,
        team=team, user=user, queue="experiment", deadline=at + timedelta(seconds=grace_s),
        grace_s=grace_s, preemptor_job_id=new_id(), preemptor_queue="production",
        reason=reason, resumable=resumable, resume_from=resume_from, shrink_to=shrink_to,
        node=node,
    )
    return envelope(data, source="preemption", job_id=job_id, run_id=run_id, occurred_at=at)


def run_started(at: datetime, job_id: str | None, *, attempt: int = 1,
                resumed_from: str | None = None) -> Envelope[Any]:
    assert job_id, "a job id from `submitted(...).job_id`"
    run_id = new_id()
    data = m.RunStarted(run_id=run_id, job_id=job_id, attempt=attempt, placement=PLACEMENT,
                        resumed_from=resumed_from)
    return envelope(data, source="executor", job_id=job_id, run_id=run_id, occurred_at=at)


def run_failed(at: datetime, job_id: str | None) -> Envelope[Any]:
    assert job_id, "a job id from `submitted(...).job_id`"
    run_id = new_id()
    data = m.RunFailed(run_id=run_id, job_id=job_id, exit_code=137, error="CUDA out of memory")
    return envelope(data, source="executor", job_id=job_id, run_id=run_id, occurred_at=at)


def run_stopped(at: datetime, job_id: str | None) -> Envelope[Any]:
    assert job_id, "a job id from `submitted(...).job_id`"
    run_id = new_id()
    data = m.RunStopped(run_id=run_id, job_id=job_id, reason=m.StopReason.preempted,
                        checkpoint_uri="s3://ckpt/x")
    return envelope(data, source="executor", job_id=job_id, run_id=run_id, occurred_at=at)


def pending(at: datetime, job_id: str | None, *, team: str = "ml",
            queue: str = "experiment") -> Envelope[Any]:
    assert job_id, "a job id from `submitted(...).job_id`"
    data = m.JobPending(
        job_id=job_id, team=team, queue=queue, position=4, eta=at + timedelta(hours=2),
        reasons=[m.WaitReason(code=m.WaitReasonCode.QUOTA_EXCEEDED, message="team ml at quota"),
                 m.WaitReason(code=m.WaitReasonCode.PRIORITY, message="3 jobs ahead")],
        factors=m.ScoreFactors(),
    )
    return envelope(data, source="scheduler", job_id=job_id, occurred_at=at)


def completed(at: datetime, job_ids: list[str], *,
              outcome: m.VictimOutcome = m.VictimOutcome.acked) -> Envelope[Any]:
    victims = [m.VictimResult(run_id=new_id(), job_id=j, outcome=outcome,
                              checkpoint_uri="s3://ckpt/done", lost_gpu_seconds=5400.0)
               for j in job_ids]
    data = m.PreemptionCompleted(plan_id=new_id(), preemptor_job_id=new_id(), victims=victims)
    return envelope(data, source="preemption", occurred_at=at)
