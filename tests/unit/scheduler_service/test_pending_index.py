"""The view's pending index against the plain rebuild from every job, over random event
sequences: submits, proposals, grants, rejections, starts, preemptions, cancels and ends."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rota.config import load_config
from rota.contracts import JobSpec
from rota_scheduler.pending_index import pending_job, queues_from_scratch
from rota_scheduler.view import ClusterView, JobRecord

from tests.builders import spec_doc

CONFIG = load_config()
JOBS = [f"00000000-0000-7000-8000-{i:012d}" for i in range(3)]
PLACEMENT = [{"worker": 0, "node": "h100-0", "gpus": [0]}]

Step = tuple[str, int, int]
steps = st.lists(st.tuples(
    st.sampled_from(["submit", "cancel", "propose", "reject", "grant", "start", "preempted",
                     "stopped", "finished"]),
    st.integers(0, len(JOBS) - 1), st.integers(0, 5)), min_size=20, max_size=100)

TEAMS = [("nlp", "alice"), ("vision", "carol")]
QUEUES = ["production", "training", "experiment"]
FLAVORS = ["h100", "a100"]


def event(step: Step, runs: dict[str, str]) -> tuple[str, dict[str, Any]]:
    kind, index, variant = step
    job_id = JOBS[index]
    run_id = runs.setdefault(job_id, f"10000000-0000-7000-8000-{index:06d}{variant:06d}")
    if kind == "submit":
        team, user = TEAMS[variant % 2]
        spec = spec_doc(team=team, user=user, queue=QUEUES[variant % 3],
                        flavor=FLAVORS[variant % 2], gpus_per_worker=1 + variant)
        return "JobSubmitted", {"job_id": job_id, "spec": spec,
                                "submitted_at": f"2027-01-01T00:00:{variant:02d}Z"}
    if kind == "cancel":
        return "JobCancelled", {"job_id": job_id}
    if kind == "propose":
        runs[job_id] = run_id = f"20000000-0000-7000-8000-{index:06d}{variant:06d}"
        return "AllocationProposed", {"job_id": job_id, "run_id": run_id,
                                      "placement": PLACEMENT}
    if kind == "reject":
        return "AllocationRejected", {"job_id": job_id, "run_id": run_id}
    if kind == "grant":
        return "AllocationGranted", {"job_id": job_id, "run_id": run_id,
                                     "placement": PLACEMENT}
    if kind == "start":
        return "RunStarted", {"job_id": job_id, "run_id": run_id}
    if kind in ("preempted", "stopped"):
        reason = "preempted" if kind == "preempted" else "cancelled"
        return "RunStopped", {"job_id": job_id, "run_id": run_id, "reason": reason}
    return "RunFinished", {"job_id": job_id, "run_id": run_id}


@settings(max_examples=500, deadline=None)
@given(steps)
def test_the_index_always_gives_the_queues_a_rebuild_would(sequence: list[Step]) -> None:
    view = ClusterView(CONFIG)
    runs: dict[str, str] = {}
    for at, step in enumerate(sequence):
        kind, data = event(step, runs)
        view.apply(kind, data, 1_800_000_000.0 + at)
        assert view.pending_index.queues() == queues_from_scratch(view.jobs.values()), step


def test_a_queue_an_event_did_not_touch_is_not_rebuilt() -> None:
    view = ClusterView(CONFIG)
    runs: dict[str, str] = {}
    for step in (("submit", 0, 0), ("submit", 1, 1)):
        view.apply(*event(step, runs), 1_800_000_000.0)
    before = view.pending_index.queues()
    view.apply(*event(("submit", 2, 0), runs), 1_800_000_001.0)  # job 0's queue again
    after = view.pending_index.queues()
    untouched = [q for q in before if q.team == "vision"]
    assert untouched and all(any(q is same for same in after) for q in untouched)


def test_an_elastic_spec_is_a_pending_job_of_its_min_up_to_its_max() -> None:
    def record(**overrides: Any) -> JobRecord:
        doc = spec_doc(**overrides)
        doc.pop("submission_id")
        return JobRecord(JOBS[0], JobSpec.model_validate({**doc, "submission_id": "s-1"}), 0.0)

    elastic = pending_job(record(workers={"min": 2, "max": 8}))
    assert (elastic.workers, elastic.workers_max, elastic.elastic, elastic.gpus) == (2, 8, True, 16)
    rigid = pending_job(record(workers=8))
    assert (rigid.workers, rigid.workers_max, rigid.elastic) == (8, 0, False)
