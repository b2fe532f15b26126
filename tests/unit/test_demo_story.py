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
