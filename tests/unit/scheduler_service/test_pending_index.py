"""The view's pending index against the plain rebuild from every job, over random event
sequences: submits, proposals, grants, rejections, starts, preemptions, cancels and ends."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from rota.config import load_config
from rota.contracts import JobSpec
from rota.contracts import messages as m
from rota_scheduler.pending_index import pending_job, queues_from_scratch
from rota_scheduler.records import JobRecord
from rota_scheduler.view import ClusterView

from tests.builders import message, spec_doc

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


def event(step: Step, runs: dict[str, str]) -> BaseModel:
    kind, index, variant = step
    job_id = JOBS[index]
    run_id = runs.setdefault(job_id, f"10000000-0000-7000-8000-{index:06d}{variant:06d}")
    team, user = TEAMS[variant % 2]
    flavor = FLAVORS[variant % 2]
    if kind == "submit":
        spec = spec_doc(team=team, user=user, queue=QUEUES[variant % 3], flavor=flavor,
                        gpus_per_worker=1 + variant)
        return message(m.JobSubmitted, job_id=job_id, spec=spec,
                       submitted_at=f"2027-01-01T00:00:{variant:02d}Z")
    if kind == "cancel":
        return message(m.JobCancelled, job_id=job_id, team=team, reason="cancelled by user")
    if kind == "propose":
        runs[job_id] = run_id = f"20000000-0000-7000-8000-{index:06d}{variant:06d}"
        return message(m.AllocationProposed, proposal_id=run_id, job_id=job_id, run_id=run_id,
                       team=team, user=user, queue=QUEUES[variant % 3], flavor=flavor,
                       placement=PLACEMENT, gpus=1)
    if kind == "reject":
        return message(m.AllocationRejected, proposal_id=run_id, job_id=job_id, run_id=run_id,
                       code="GPU_TAKEN", message="taken")
    if kind == "grant":
        return message(m.AllocationGranted, proposal_id=run_id, job_id=job_id, run_id=run_id,
                       team=team, flavor=flavor, placement=PLACEMENT, gpus=1)
    if kind == "start":
        return message(m.RunStarted, job_id=job_id, run_id=run_id, attempt=1,
                       placement=PLACEMENT)
    if kind in ("preempted", "stopped"):
        reason = "preempted" if kind == "preempted" else "cancelled"
        return message(m.RunStopped, job_id=job_id, run_id=run_id, reason=reason)
    return message(m.RunFinished, job_id=job_id, run_id=run_id)


@settings(max_examples=500, deadline=None)
@given(steps)
def test_the_index_always_gives_the_queues_a_rebuild_would(sequence: list[Step]) -> None:
    view = ClusterView(CONFIG)
    runs: dict[str, str] = {}
    for at, step in enumerate(sequence):
        view.apply(event(step, runs), 1_800_000_000.0 + at)
        assert view.pending_index.queues() == queues_from_scratch(view.jobs.values()), step


def test_a_queue_an_event_did_not_touch_is_not_rebuilt() -> None:
    view = ClusterView(CONFIG)
    runs: dict[str, str] = {}
    for step in (("submit", 0, 0), ("submit", 1, 1)):
        view.apply(event(step, runs), 1_800_000_000.0)
    before = view.pending_index.queues()
    view.apply(event(("submit", 2, 0), runs), 1_800_000_001.0)  # job 0's queue again
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
