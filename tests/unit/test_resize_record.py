"""What `rota trace` says of a shrink and a grow (DECISIONS 81, 82): the lines of a job's
timeline and the outcome of the preemption it suffered."""

from __future__ import annotations

from typing import Any

from rota_submission.explain import describe
from rota_submission.record import preemptions

JOB, OTHER, RUN, PLAN = "job-elastic-0001", "job-urgent-0002", "run-1", "plan-1"


def _victim(**extra: Any) -> dict[str, Any]:
    return {"run_id": RUN, "job_id": JOB, "team": "research", "queue": "experiment", "gpus": 4,
            "expected_lost_gpu_seconds": 0.0, "job_name": "sweep", **extra}


def test_a_shrunk_victim_reads_as_one_in_its_timeline() -> None:
    plan = {"plan_id": PLAN, "preemptor_job_id": OTHER, "preemptor_queue": "production",
            "reason": "shrink:lower_tier", "message": "…", "expected_lost_gpu_seconds": 0.0,
            "victims": [_victim(shrink_to=2)]}
    assert "shrunk to 2 workers, it restarts on the GPUs it keeps" in describe(
        "PreemptionRequested", plan, JOB)
    assert "(experiment, 4 GPUs, shrunk to 2 workers)" in describe("PreemptionRequested", plan, OTHER)
    noticed = {"deadline": "2026-12-04T10:00:00Z", "grace_s": 60.0,
               "preemptor_queue": "production", "shrink_to": 2}
    assert "stop and restart with 2 workers" in describe("PreemptionNoticed", noticed, JOB)
    rows = [
        {"type": "PreemptionRequested", "data": plan, "occurred_at": 1},
        {"type": "PreemptionCompleted", "occurred_at": 2, "data": {
            "plan_id": PLAN, "preemptor_job_id": OTHER, "aborted": False,
            "victims": [{"run_id": RUN, "job_id": JOB, "outcome": "shrunk",
                         "checkpoint_uri": "s3://ckpt/1", "lost_gpu_seconds": 0.0}]}},
    ]
    [suffered] = preemptions(rows, JOB)
    assert suffered["outcome"] == "shrunk"
    assert suffered["ack_checkpoint_uri"] == "s3://ckpt/1"  # kept, as an acked victim's


def test_a_grow_reads_as_no_preemption() -> None:
    grow = {"message": "4 idle h100 GPUs: growing from 2 to 4 workers at its next checkpoint",
            "target": [{"worker": 0, "node": "n0", "gpus": [0, 1]}]}
    line = describe("GrowRequested", grow, JOB)
    assert line.startswith("grow: 4 idle h100 GPUs") and "not a preemption" in line
    assert describe("GrowCompleted", {"outcome": "grown"}, JOB).startswith("grown:")
    assert "runs on as it was" in describe("GrowCompleted", {"outcome": "aborted"}, JOB)
