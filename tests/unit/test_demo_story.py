"""The demo's story folds events into what happened, whatever order its inputs arrive in."""

from __future__ import annotations

from rota.demo.story import Story


def test_a_run_that_starts_before_its_submit_reply_still_counts() -> None:
    story = Story()
    story.event(1.0, "AllocationGranted", {"gpus": 8, "borrowed_gpus": 0}, "job-a")
    story.event(1.5, "RunStarted", {"run_id": "run-a", "attempt": 1}, "job-a")
    assert story.jobs["nlp-finetune-a"].attempts == 0

    story.submitted("nlp-finetune-a", "job-a")

    job = story.jobs["nlp-finetune-a"]
    assert (job.state, job.attempts, job.started_at) == ("running", 1, 1.5)
    assert story.log == ["   1.0s  nlp-finetune-a granted 8 GPUs",
                         "   1.5s  nlp-finetune-a started (attempt 1)"]
    assert story.early == {}


def test_events_of_jobs_the_demo_never_submitted_change_nothing() -> None:
    story = Story()
    story.submitted("nlp-finetune-a", "job-a")
    story.event(1.0, "RunStarted", {"run_id": "run-x", "attempt": 1}, "someone-elses")
    assert all(j.attempts == 0 for j in story.jobs.values())
    assert story.log == []


def test_a_drain_plan_completes_under_the_drain_s_id_and_counts_as_a_move() -> None:
    story = Story()
    story.submitted("vision-train-a", "job-a")
    story.event(1.0, "AllocationGranted", {"gpus": 8, "placement": [
        {"worker": 0, "node": "node-2", "gpus": list(range(8))}]}, "job-a")
    story.event(1.1, "RunStarted", {"run_id": "run-1", "attempt": 1}, "job-a")
    story.drained("node-2")
    story.event(2.0, "PreemptionRequested", {
        "plan_id": "plan-d", "preemptor_job_id": "drain-id", "node": "node-2", "reason": "drain",
        "victims": [{"run_id": "run-1", "job_id": "job-a"}]}, "job-a")
    story.event(3.0, "RunCheckpointed", {"run_id": "run-1", "notice_id": "n",
                                         "checkpoint_uri": "sim://c"}, "job-a")
    story.event(3.5, "RunStopped", {"run_id": "run-1", "reason": "drained"}, "job-a")
    story.event(3.6, "PreemptionCompleted", {"plan_id": "plan-d", "victims": [
        {"run_id": "run-1", "job_id": "job-a", "outcome": "acked", "checkpoint_uri": "sim://c"}]},
        "drain-id")
    assert story.jobs["vision-train-a"].state == "requeued" and story.ready("drained_job_resumed") is False
    story.event(4.0, "AllocationGranted", {"gpus": 8, "placement": [
        {"worker": 0, "node": "node-1", "gpus": list(range(8))}]}, "job-a")
    story.event(4.1, "RunStarted", {"run_id": "run-2", "attempt": 2, "resumed_from": "sim://c"},
                "job-a")
    assert story.ready("drained_job_resumed")
    check = dict(story.checks())
    assert check["a drained node's job checkpointed, stopped and resumed elsewhere from its checkpoint"]
    assert check["every victim acknowledged a checkpoint before its GPUs were freed"] is False  # no job preempted
