"""A shrink, live, in the scheduler's pure half (DECISIONS 81): the view gives an elastic run
its range so the policy plans a shrink; the plan's victim says `shrink_to`; once the victim's
run stopped, its job is proposed on exactly the GPUs it kept while the preemptor takes the
dropped ones; and a view rebuilt from the same events holds the same GPUs."""

from __future__ import annotations

from pydantic import BaseModel
from rota.contracts import messages as m

from tests.unit.scheduler_service.test_view_and_actions import Story, of


class Recorded(Story):
    """A story that keeps every event it folded, to replay them into a fresh view."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[BaseModel, float]] = []

    def fold(self, event: BaseModel) -> None:
        self.log.append((event, self.now))
        super().fold(event)


def _shrink_planned() -> tuple[Recorded, m.AllocationProposed, m.PreemptionRequested, str]:
    story = Recorded()
    elastic = story.submit(team="research", user="dave", queue="experiment",
                           workers={"min": 2, "max": 4}, gpus_per_worker=8)
    [proposal] = of(story.cycle(), m.AllocationProposed)
    # 24 of the 32 h100 GPUs: research borrows all that nlp (8) and vision lend.
    assert len(proposal.placement) == 3
    story.grant_and_start(proposal)
    story.now += 3600  # past its minimum runtime
    urgent = story.submit(team="nlp", user="alice", queue="production", workers=2,
                          gpus_per_worker=8)
    [plan] = of(story.cycle(), m.PreemptionRequested)
    assert plan.preemptor_job_id == urgent
    return story, proposal, plan, elastic


def _stop_and_release(story: Story, proposal: m.AllocationProposed) -> None:
    story.now += 60
    story.event(m.RunStopped, run_id=proposal.run_id, job_id=proposal.job_id,
                reason="preempted", checkpoint_uri="s3://ckpt/saved")
    story.released(proposal.run_id, proposal.job_id)


def test_an_elastic_victim_is_planned_as_a_shrink_to_its_min() -> None:
    story, proposal, plan, elastic = _shrink_planned()
    [victim] = plan.victims
    assert (victim.job_id, victim.run_id, victim.shrink_to) == (elastic, proposal.run_id, 2)
    assert victim.gpus == 8  # its third worker's: with the 8 free, the preemptor's 16
    kept = {(w.node, g) for w in proposal.placement[:2] for g in w.gpus}
    assert plan.target is not None
    assert kept.isdisjoint({(w.node, g) for w in plan.target for g in w.gpus})
    assert story.view.restarts[elastic].target == story.view.allocations[proposal.run_id].placement[:2]


def test_after_the_stop_the_victim_restarts_on_its_kept_gpus_and_the_preemptor_on_the_rest() -> None:
    story, proposal, plan, elastic = _shrink_planned()
    _stop_and_release(story, proposal)
    assert story.view.jobs[elastic].resume_from == "s3://ckpt/saved"
    assert story.view.jobs[elastic].preemptions == 1  # a shrink counts as a preemption
    out = of(story.cycle(), m.AllocationProposed)
    by_job = {p.job_id: p for p in out}
    restart = by_job[elastic]
    assert [(w.node, w.gpus) for w in restart.placement] == [
        (w.node, w.gpus) for w in proposal.placement[:2]]
    assert restart.gpus == 16
    preemptor = by_job[plan.preemptor_job_id]
    assert preemptor.plan_id == plan.plan_id
    gpus = [(w.node, g) for p in out for w in p.placement for g in w.gpus]
    assert len(gpus) == len(set(gpus)) == 32  # nothing double-booked
    assert elastic not in story.view.restarts  # proposed: the hold is done


def test_between_the_stop_and_the_release_it_waits_with_its_restart_as_the_reason() -> None:
    story, proposal, _plan, elastic = _shrink_planned()
    story.now += 60
    story.event(m.RunStopped, run_id=proposal.run_id, job_id=proposal.job_id,
                reason="preempted", checkpoint_uri="s3://ckpt/saved")
    out = story.cycle()
    assert all(p.job_id != elastic for p in of(out, m.AllocationProposed))
    [pending] = [p for p in of(out, m.JobPending) if p.job_id == elastic]
    reason = pending.reasons[0]
    assert reason.code is m.WaitReasonCode.WAITING_FOR_PREEMPTION
    assert "shrunk to 2 workers" in reason.message
    assert reason.details["restart"] == "shrink" and reason.details["restart_workers"] == 2


def test_a_view_rebuilt_from_the_events_holds_the_same_restart() -> None:
    story, proposal, _plan, elastic = _shrink_planned()
    _stop_and_release(story, proposal)
    fresh = Story()
    for event, at in story.log:
        fresh.now = at
        fresh.fold(event)
    fresh.now = story.now
    assert fresh.view.restarts == story.view.restarts
    [restart] = [p for p in of(fresh.cycle(), m.AllocationProposed) if p.job_id == elastic]
    assert [w.gpus for w in restart.placement] == [w.gpus for w in proposal.placement[:2]]


def test_a_plan_aborted_before_the_stop_drops_the_restart() -> None:
    story, proposal, plan, elastic = _shrink_planned()
    story.event(m.PreemptionCompleted, plan_id=plan.plan_id,
                preemptor_job_id=plan.preemptor_job_id, aborted=True,
                victims=[{"run_id": proposal.run_id, "job_id": elastic, "outcome": "aborted"}])
    assert elastic not in story.view.restarts


# ---------------------------------------------------------------- grow (DECISIONS 82)


def _grow_requested() -> tuple[Recorded, m.AllocationProposed, m.GrowRequested]:
    """An elastic run of 2 workers beside a production run of 2 nodes; the production run
    ends, and half an hour later its GPUs are still idle: the elastic run grows onto them."""
    story = Recorded()
    busy = story.submit(team="nlp", user="alice", queue="production", workers=2,
                        gpus_per_worker=8)
    [first] = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(first)
    story.submit(team="nlp", user="bob", queue="training", workers={"min": 2, "max": 4},
                 gpus_per_worker=8)
    [elastic] = of(story.cycle(), m.AllocationProposed)
    assert len(elastic.placement) == 2
    story.grant_and_start(elastic)
    story.now += 60
    story.event(m.RunFinished, run_id=first.run_id, job_id=busy)
    story.released(first.run_id, busy)
    assert not of(story.cycle(), m.GrowRequested)  # it has not run half an hour yet
    story.now += 1800
    [grow] = of(story.cycle(), m.GrowRequested)
    return story, elastic, grow


def test_an_elastic_run_grows_onto_idle_gpus_held_for_it_and_restarts_on_them() -> None:
    story, elastic, grow = _grow_requested()
    assert (grow.job_id, grow.run_id, grow.workers, grow.added_gpus) == (
        elastic.job_id, elastic.run_id, 4, 16)
    assert grow.target[:2] == elastic.placement
    assert story.view.restarts[elastic.job_id].grow
    assert not of(story.cycle(), m.GrowRequested)  # asked once
    # A job that arrives meanwhile does not get the GPUs held for the grow.
    late = story.submit(team="vision", user="carol", queue="experiment", gpus_per_worker=8)
    added = {(w.node, g) for w in grow.target[2:] for g in w.gpus}
    out = story.cycle()
    assert all(not added & {(w.node, g) for w in p.placement for g in w.gpus}
               for p in of(out, m.AllocationProposed) if p.job_id == late)
    story.event(m.RunStopped, run_id=elastic.run_id, job_id=elastic.job_id,
                reason="resized", checkpoint_uri="s3://ckpt/grow")
    story.released(elastic.run_id, elastic.job_id)
    job = story.view.jobs[elastic.job_id]
    assert job.preemptions == 0 and job.resume_from == "s3://ckpt/grow"  # no preemption
    [again] = [p for p in of(story.cycle(), m.AllocationProposed) if p.job_id == elastic.job_id]
    assert [(w.node, w.gpus) for w in again.placement] == [(w.node, w.gpus) for w in grow.target]
    assert again.gpus == 32


def test_a_grow_that_was_not_grown_gives_its_gpus_back() -> None:
    story, elastic, grow = _grow_requested()
    story.event(m.GrowCompleted, grow_id=grow.grow_id, job_id=elastic.job_id,
                run_id=elastic.run_id, outcome="aborted")
    assert elastic.job_id not in story.view.restarts
