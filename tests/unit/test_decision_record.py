"""The decision record behind `rota trace`: decisions and preemptions from a job's history."""

from __future__ import annotations

from typing import Any

from rota_submission.explain import timeline
from rota_submission.record import decisions, preemptions

VICTIM, PREEMPTOR, PLAN, RUN, NOTICE = "j-victim", "j-prod", "p-1", "r-1", "n-1"
FACTORS = {"queue": 1000.0, "age": 3.0, "fairshare": 20.0, "quota_headroom": 0.0, "total": 1023.0}


def row(at: str, type_: str, **data: Any) -> dict[str, Any]:
    return {"occurred_at": at, "type": type_, "source": "test", "data": data}


REQUESTED = row("t2", "PreemptionRequested", plan_id=PLAN, preemptor_job_id=PREEMPTOR,
                preemptor_queue="production", reason="reclaim", message="nlp reclaims its quota",
                expected_lost_gpu_seconds=80.0,
                victims=[{"job_id": VICTIM, "run_id": RUN, "job_name": "sweep", "team": "research",
                          "queue": "experiment", "gpus": 8, "expected_lost_gpu_seconds": 80.0}])
COMPLETED = row("t6", "PreemptionCompleted", plan_id=PLAN, preemptor_job_id=PREEMPTOR,
                victims=[{"job_id": VICTIM, "run_id": RUN, "outcome": "acked",
                          "checkpoint_uri": "s3://c/1", "lost_gpu_seconds": 16.0}])


def test_the_victim_sees_the_plan_the_notice_the_ack_and_the_stop() -> None:
    history = [
        row("t0", "AllocationProposed", run_id=RUN, gpus=8, borrowed_gpus=8, placement=[]),
        REQUESTED,
        row("t3", "PreemptionNoticed", plan_id=PLAN, notice_id=NOTICE, deadline="t9"),
        row("t4", "RunCheckpointed", run_id=RUN, notice_id=NOTICE, checkpoint_uri="s3://c/1"),
        row("t5", "RunStopped", run_id=RUN, reason="preempted", forced=False,
            lost_gpu_seconds=16.0),
        COMPLETED,
    ]
    [plan] = preemptions(history, VICTIM)
    assert plan["role"] == "suffered" and plan["reason"] == "reclaim"
    assert (plan["noticed_at"], plan["acked_at"], plan["stopped_at"]) == ("t3", "t4", "t5")
    assert plan["ack_checkpoint_uri"] == "s3://c/1" and plan["forced"] is False
    assert plan["outcome"] == "acked" and plan["lost_gpu_seconds"] == 16.0
    admit, preempted = decisions(history, VICTIM)
    assert admit["decision"] == "admit" and admit["reason"] == "borrowed_idle_gpus"
    assert preempted["decision"] == "preempted" and preempted["expected_lost_gpu_seconds"] == 80.0


def test_the_preemptor_sees_its_plan_with_the_score_of_that_cycle() -> None:
    history = [
        row("t1", "JobPending", reasons=[{"code": "INSUFFICIENT_CAPACITY", "message": "full"}],
            factors=FACTORS, position=0),
        REQUESTED,
        row("t2", "JobPending", reasons=[{"code": "WAITING_FOR_PREEMPTION", "message": "soon"}],
            factors={**FACTORS, "total": 1024.0}, position=0),
        COMPLETED,
        row("t7", "AllocationProposed", run_id="r-2", gpus=8, plan_id=PLAN, placement=[]),
    ]
    hold, plan, _, admit = decisions(history, PREEMPTOR)
    assert hold["reason"] == "INSUFFICIENT_CAPACITY" and hold["factors"] == FACTORS
    assert plan["decision"] == "preempt" and plan["victims"] == [VICTIM]
    assert plan["factors"]["total"] == 1024.0  # the hold published in the same cycle
    assert admit["reason"] == "freed_by_preemption" and admit["factors"]["total"] == 1024.0
    [caused] = preemptions(history, PREEMPTOR)
    assert caused["role"] == "caused" and caused["outcome"] == "completed"
    assert caused["victims"][0]["outcome"] == "acked"


STALE_RUN = "r-0"


def test_an_ack_from_a_stale_run_is_not_the_acknowledgement() -> None:
    history = [
        REQUESTED,
        row("t3", "PreemptionNoticed", plan_id=PLAN, notice_id=NOTICE, run_id=RUN, deadline="t9"),
        {**row("t3.5", "RunCheckpointed", run_id=STALE_RUN, notice_id=NOTICE,
               checkpoint_uri="s3://c/STALE"), "event_id": "e-stale"},
        {**row("t4", "RunCheckpointed", run_id=RUN, notice_id=NOTICE, checkpoint_uri="s3://c/1"),
         "event_id": "e-ack"},
        {**row("t4.5", "RunCheckpointed", run_id=RUN, notice_id=NOTICE,
               checkpoint_uri="s3://c/AGAIN"), "event_id": "e-again"},
        row("t5", "RunStopped", run_id=RUN, reason="preempted", forced=False),
        COMPLETED,
    ]
    [plan] = preemptions(history, VICTIM)
    assert (plan["acked_at"], plan["ack_checkpoint_uri"]) == ("t4", "s3://c/1")
    assert plan["ack_event_id"] == "e-ack"
    reports = [r for r in history if r["type"] == "RunCheckpointed"]
    lines = {entry["data"]["checkpoint_uri"]: entry["summary"]
             for entry in timeline(reports, VICTIM, accepted_acks={plan["ack_event_id"]})}
    assert lines["s3://c/1"].startswith("acknowledged the notice with checkpoint s3://c/1")
    assert "not its acknowledgement" in lines["s3://c/STALE"]
    assert "not its acknowledgement" in lines["s3://c/AGAIN"]


def test_an_ack_the_coordinator_refused_as_late_is_not_the_acknowledgement() -> None:
    """The deadline passed and the stop was forced; the ack came before the run's end."""
    history = [
        REQUESTED,
        row("t3", "PreemptionNoticed", plan_id=PLAN, notice_id=NOTICE, run_id=RUN, deadline="t4"),
        {**row("t4.5", "RunCheckpointed", run_id=RUN, notice_id=NOTICE,
               checkpoint_uri="s3://c/LATE"), "event_id": "e-late"},
        row("t5", "RunStopped", run_id=RUN, reason="preempted", forced=True,
            lost_gpu_seconds=40.0),
        row("t6", "PreemptionCompleted", plan_id=PLAN, preemptor_job_id=PREEMPTOR,
            victims=[{"job_id": VICTIM, "run_id": RUN, "outcome": "forced",
                      "lost_gpu_seconds": 40.0}]),
    ]
    [plan] = preemptions(history, VICTIM)
    assert plan["acked_at"] is None and plan["ack_checkpoint_uri"] is None
    assert plan["ack_event_id"] is None
    assert plan["outcome"] == "forced" and plan["forced"] is True


def test_a_drained_job_says_so_in_why_until_it_runs_again() -> None:
    from rota.contracts import messages as m
    from rota_submission.domain import DRAINED_DETAIL, apply_event
    from rota_submission.explain import why

    from tests.builders import event

    state, noticed = apply_event("running", event(m.PreemptionNoticed, reason="drain", node="n7"))
    assert state == "preempting" and "n7" in noticed["detail"]
    assert "drain" in why({"job_id": "j", "name": "x", "state": state, "queue": "training",
                           "team": "nlp", **noticed})["summary"]
    state, stopped = apply_event(state, event(m.RunStopped, reason="drained",
                                                checkpoint_uri="s3://c"))
    assert (state, stopped["detail"], stopped["resume_from"]) == ("pending", DRAINED_DETAIL, "s3://c")
    answer = why({"job_id": "j", "name": "x", "state": state, "queue": "training", "team": "nlp",
                  **stopped})
    assert answer["requeued"] == DRAINED_DETAIL and answer["resume_from"] == "s3://c"
    state, started = apply_event(state, event(m.RunStarted))
    assert state == "running" and started["detail"] is None
