"""The scheduler service's pure half: events folded into a view, decisions into messages."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any

from pydantic import BaseModel
from rota.config import load_config
from rota.contracts import messages as m
from rota.ids import new_id
from rota_policy import policy_config_from, schedule
from rota_policy.model.runtimes import RuntimeScale
from rota_scheduler.actions import next_to_explain, plan_actions, record_sent
from rota_scheduler.snapshot import policy_snapshot
from rota_scheduler.view import ClusterView

from tests.builders import message, spec_doc

CONFIG = load_config()
POLICY = policy_config_from(CONFIG)
T0 = 1_800_000_000.0


class Story:
    """Feeds events to a view the way the stream would, and runs cycles on it."""

    def __init__(self) -> None:
        self.view = ClusterView(CONFIG)
        self.now = T0
        ids = count()
        self.uuid = lambda: f"00000000-0000-7000-8000-{next(ids):012d}"

    def event(self, kind: type[BaseModel], **fields: Any) -> None:
        """Folds the contract message `kind` with these fields (`tests.builders.message`)."""
        self.fold(message(kind, **fields))

    def fold(self, event: BaseModel) -> None:
        self.view.apply(event, self.now)

    def released(self, run_id: str, job_id: str) -> None:
        """The ledger's release of a run's GPUs, as it would say it."""
        spec = self.view.jobs[job_id].spec
        self.event(m.AllocationReleased, run_id=run_id, job_id=job_id, team=spec.team,
                   flavor=spec.flavor, gpus=spec.total_gpus, gpu_seconds=0.0)

    def submit(self, **spec: Any) -> str:
        job_id = new_id()
        self.event(m.JobSubmitted, job_id=job_id, spec=spec_doc(**spec),
                   submitted_at=datetime.fromtimestamp(self.now, UTC))
        return job_id

    def cycle(self) -> list[Any]:
        decisions = schedule(policy_snapshot(self.view, self.now), self.now, POLICY)
        actions = plan_actions(self.view, decisions, now=self.now, new_uuid=self.uuid)
        record_sent(self.view, actions, self.now)
        for item in actions.outgoing:  # the echo, as the stream delivers it later
            self.fold(item.message)
        return [item.message for item in actions.outgoing]

    def grant_and_start(self, proposal: m.AllocationProposed) -> None:
        self.event(m.AllocationGranted, proposal_id=proposal.proposal_id, job_id=proposal.job_id,
                   run_id=proposal.run_id, team=proposal.team, flavor=proposal.flavor,
                   placement=proposal.placement, gpus=proposal.gpus,
                   borrowed_gpus=proposal.borrowed_gpus)
        self.event(m.RunStarted, run_id=proposal.run_id, job_id=proposal.job_id, attempt=1,
                   placement=proposal.placement)


def of(messages: list[Any], kind: type) -> list[Any]:
    return [msg for msg in messages if isinstance(msg, kind)]


def test_jobs_that_fit_are_proposed_and_the_rest_explained() -> None:
    story = Story()
    fits = [story.submit(workers=2, team="nlp", user="alice") for _ in range(2)]
    waits = story.submit(workers=4, team="vision", user="carol", queue="experiment")
    out = story.cycle()
    proposed = of(out, m.AllocationProposed)
    assert {p.job_id for p in proposed} == set(fits)
    nodes = [(s.node, g) for p in proposed for s in p.placement for g in s.gpus]
    assert len(nodes) == len(set(nodes)) == 32
    [pending] = of(out, m.JobPending)
    assert pending.job_id == waits and pending.reasons
    assert story.view.jobs[waits].pending_fingerprint is not None


def test_an_unchanged_wait_is_not_published_again() -> None:
    story = Story()
    story.submit(workers=4, team="nlp", user="alice")
    first = story.cycle()
    blocked = story.submit(workers=4, team="nlp", user="alice")
    second = story.cycle()
    assert of(first, m.AllocationProposed)
    assert [p.job_id for p in of(second, m.JobPending)] == [blocked]
    assert of(story.cycle(), m.JobPending) == []


def test_a_wait_crossing_its_queues_long_wait_threshold_is_published_again() -> None:
    """So that the notifier, which tells the owner of a long wait, hears of it: its reason and
    ETA alone may not change for hours."""
    story = Story()
    story.submit(workers=4, team="nlp", user="alice", declared_runtime_s=36_000)
    [running] = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(running)  # started: its end, and so the ETA, stays put
    blocked = story.submit(workers=4, team="nlp", user="alice")  # training: 3,600 s
    assert [p.job_id for p in of(story.cycle(), m.JobPending)] == [blocked]
    story.now += 3_599
    assert of(story.cycle(), m.JobPending) == []
    story.now += 2
    [again] = of(story.cycle(), m.JobPending)
    assert again.job_id == blocked
    story.now += 3_600
    assert of(story.cycle(), m.JobPending) == []  # once per crossing, however long it waits


def test_replaying_the_same_events_changes_nothing() -> None:
    story = Story()
    job = story.submit()
    [proposal] = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(proposal)
    before = (story.view.jobs[job].phase, dict(story.view.allocations))
    story.grant_and_start(proposal)
    story.event(m.AllocationProposed, **proposal.model_dump(mode="json"))
    assert (story.view.jobs[job].phase, dict(story.view.allocations)) == before
    assert story.view.jobs[job].attempt == 1


def test_production_preempts_experiment_and_takes_the_held_gpus() -> None:
    story = Story()
    victims = [story.submit(workers=1, team="research", user="dave", queue="experiment",
                            resumable=True) for _ in range(4)]
    for proposal in of(story.cycle(), m.AllocationProposed):
        story.grant_and_start(proposal)
    story.now += 3600
    preemptor = story.submit(workers=2, team="nlp", user="alice", queue="production")
    [plan] = of(story.cycle(), m.PreemptionRequested)
    assert plan.preemptor_job_id == preemptor and plan.target
    assert {v.job_id for v in plan.victims} <= set(victims)
    for victim in plan.victims:
        assert victim.resumable and victim.job_name == "train-llm"
        story.event(m.RunStopped, run_id=victim.run_id, job_id=victim.job_id,
                    reason="preempted", checkpoint_uri=f"s3://ckpt/{victim.job_id}")
        story.event(m.AllocationReleased, run_id=victim.run_id, job_id=victim.job_id,
                    team="research", flavor="h100", gpus=8, gpu_seconds=1.0)
    out = story.cycle()
    [admitted] = [p for p in of(out, m.AllocationProposed) if p.job_id == preemptor]
    assert admitted.plan_id == plan.plan_id
    assert {(s.node, tuple(s.gpus)) for s in admitted.placement} == {
        (s.node, tuple(s.gpus)) for s in plan.target}
    for victim in plan.victims:
        job = story.view.jobs[victim.job_id]
        assert job.phase == "pending" and job.resume_from == f"s3://ckpt/{victim.job_id}"
        assert job.preemptions == 1


def test_a_lost_run_requeues_from_its_checkpoint_without_spending_a_preemption() -> None:
    story = Story()
    job = story.submit(resumable=True)
    [proposal] = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(proposal)
    story.event(m.RunStopped, run_id=proposal.run_id, job_id=job, reason="lost", forced=True,
                checkpoint_uri="s3://ckpt/lost")
    record = story.view.jobs[job]
    assert (record.phase, record.resume_from, record.preemptions) == ("pending", "s3://ckpt/lost", 0)


def test_a_withdrawn_node_gets_no_placement_until_it_is_restored() -> None:
    story = Story()
    h100 = [n.name for n in story.view.config.expanded_nodes() if n.flavor == "h100"]
    for name in h100[1:]:
        story.event(m.NodeWithdrawn, node=name, reason="NotReady")
    story.submit(workers=1)
    story.submit(workers=1)
    placed = [s.node for p in of(story.cycle(), m.AllocationProposed) for s in p.placement]
    assert placed == [h100[0]]  # one fits on the node left; the other waits
    story.event(m.NodeRestored, node=h100[1])
    placed = [s.node for p in of(story.cycle(), m.AllocationProposed) for s in p.placement]
    assert placed == [h100[1]]


def test_cancelling_a_running_job_stops_its_run_once() -> None:
    story = Story()
    job = story.submit()
    [proposal] = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(proposal)
    story.event(m.JobCancelled, job_id=job, team="nlp", reason="x", was_running=True)
    [stop] = of(story.cycle(), m.StopRun)
    assert (stop.run_id, stop.reason) == (proposal.run_id, m.StopReason.cancelled)
    assert of(story.cycle(), m.StopRun) == []


def test_cancelling_a_granted_but_unstarted_job_releases_without_a_process() -> None:
    story = Story()
    job = story.submit()
    [proposal] = of(story.cycle(), m.AllocationProposed)
    data = proposal.model_dump(mode="json")
    story.event(m.AllocationGranted, **{k: data[k] for k in (
        "proposal_id", "job_id", "run_id", "team", "flavor", "placement", "gpus")})
    story.event(m.JobCancelled, job_id=job, team="nlp", reason="x", was_running=True)
    [stopped] = of(story.cycle(), m.RunStopped)
    assert stopped.run_id == proposal.run_id


def test_a_rejected_proposal_goes_back_to_pending_and_is_retried() -> None:
    story = Story()
    job = story.submit()
    [proposal] = of(story.cycle(), m.AllocationProposed)
    story.event(m.AllocationRejected, proposal_id=proposal.proposal_id, job_id=job,
                run_id=proposal.run_id, code="GPU_TAKEN", message="taken")
    assert story.view.jobs[job].phase == "pending"
    assert [p.job_id for p in of(story.cycle(), m.AllocationProposed)] == [job]


def test_reconciling_with_the_ledger_trusts_its_rows() -> None:
    story = Story()
    job = story.submit()
    gone = story.submit()
    proposals = {p.job_id: p for p in of(story.cycle(), m.AllocationProposed)}
    story.grant_and_start(proposals[job])
    story.grant_and_start(proposals[gone])
    foreign = {"run_id": new_id(), "job_id": new_id(), "borrowed_gpus": 0,
               "placement": [{"worker": 0, "node": "h100-3", "gpus": [0, 1]}]}
    kept = {"run_id": proposals[job].run_id, "job_id": job,
            "placement": [s.model_dump() for s in proposals[job].placement]}
    assert story.view.reconcile([kept, foreign]) == (1, 1)
    assert set(story.view.allocations) == {proposals[job].run_id, foreign["run_id"]}
    free_on_h100_3 = next(n for n in policy_snapshot(story.view, story.now).nodes if n.name == "h100-3").free
    assert 0 not in free_on_h100_3 and 1 not in free_on_h100_3


def test_many_changed_waits_are_published_over_several_cycles_each_once() -> None:
    # A restart, or a burst that moves every ETA: no cycle publishes more than its limit,
    # the rest is asked about again in the cycles after, and nothing goes out twice.
    story = Story()
    story.submit(workers=4, team="nlp", user="alice")  # fills the cluster
    waiting = {story.submit(workers=4, team="nlp", user="alice") for _ in range(25)}
    limit, held_back = 10, set[str]()
    asked: frozenset[str] | None = None  # the first cycle explains everyone
    published: list[str] = []
    for _ in range(5):
        decisions = schedule(policy_snapshot(story.view, story.now, asked), story.now, POLICY)
        actions = plan_actions(story.view, decisions, now=story.now, new_uuid=story.uuid,
                               pending_limit=limit)
        record_sent(story.view, actions, story.now)
        for item in actions.outgoing:
            story.fold(item.message)
        out = [p.job_id for p in of([i.message for i in actions.outgoing], m.JobPending)]
        assert len(out) <= limit
        published += out
        held_back = (held_back - {e.job_id for e in decisions.pending}) | set(actions.held_back)
        asked = next_to_explain(story.view, held_back, limit)
    assert sorted(published) == sorted(waiting)
    assert held_back == set() and asked == frozenset()


def test_etas_learn_what_finished_jobs_ran_against_what_they_declared() -> None:
    """The replay's ETAs scale declared runtimes by what jobs really ran; the live view learns
    the same scale from the stream, a job's runs added up across a preemption."""
    story = Story()

    def run_for(job: str, seconds: float, end: type[BaseModel], **data: Any) -> None:
        [proposal] = of(story.cycle(), m.AllocationProposed)
        assert proposal.job_id == job
        story.grant_and_start(proposal)
        story.now += seconds
        story.event(end, run_id=proposal.run_id, job_id=job, **data)
        story.released(proposal.run_id, job)

    assert policy_snapshot(story.view, story.now).runtime_scale == 1.0
    for n in range(RuntimeScale.REFRESH):
        job = story.submit(team="nlp", user="alice", declared_runtime_s=4000)
        # Preempted after 600 s, then 400 s more: 1,000 s in all, a quarter of what it declared.
        run_for(job, 600, m.RunStopped, reason="preempted", forced=False)
        run_for(job, 400, m.RunFinished)
        expected = 0.25 if n == RuntimeScale.REFRESH - 1 else 1.0
        assert policy_snapshot(story.view, story.now).runtime_scale == expected


def test_a_job_that_accepts_any_flavor_is_proposed_and_booked_on_the_one_it_fits() -> None:
    story = Story()
    for _ in range(4):  # the four h100 nodes
        story.submit(team="nlp", user="alice")
    fallback = story.submit(team="nlp", user="alice", flavors=["h100", "any"])
    narrow = story.submit(team="nlp", user="alice")
    out = story.cycle()
    proposed = {p.job_id: p for p in of(out, m.AllocationProposed)}
    assert proposed[fallback].flavor == "a100"
    assert all(s.node.startswith("a100-") for s in proposed[fallback].placement)
    assert narrow not in proposed
    story.grant_and_start(proposed[fallback])
    runs = {r.job_id: r for r in policy_snapshot(story.view, story.now).running}
    assert runs[fallback].flavor == "a100"
    assert runs[fallback].flavor != story.view.jobs[fallback].spec.flavor


def test_the_unexplained_index_names_the_pending_jobs_a_scan_would() -> None:
    # Some jobs admitted, some explained, one cancelled, some left for a later cycle: the
    # index, in submission order, is what a pass over every job finds.
    story = Story()
    story.submit(workers=4, team="nlp", user="alice")  # fills the cluster
    waiting = [story.submit(workers=4, team="nlp", user="alice") for _ in range(12)]
    story.event(m.JobCancelled, job_id=waiting[3], team="nlp", reason="x")

    def scan() -> list[str]:
        return [j.job_id for j in story.view.pending_jobs() if j.pending_fingerprint is None]

    assert story.view.unexplained_jobs(100) == scan()
    for asked_limit in (5, 100, 100, 100):
        asked = next_to_explain(story.view, set(), asked_limit)
        decisions = schedule(policy_snapshot(story.view, story.now, asked), story.now, POLICY)
        actions = plan_actions(story.view, decisions, now=story.now, new_uuid=story.uuid,
                               pending_limit=3)
        record_sent(story.view, actions, story.now)
        for item in actions.outgoing:
            story.fold(item.message)
        assert story.view.unexplained_jobs(100) == scan()
        assert story.view.unexplained_jobs(2) == scan()[:2]
    assert scan() == []


def test_a_job_cancelled_while_proposed_is_stopped_once_granted_and_then_forgotten() -> None:
    story = Story()
    job = story.submit()
    [proposal] = of(story.cycle(), m.AllocationProposed)
    story.event(m.JobCancelled, job_id=job, team="nlp", reason="x", was_running=False)
    assert of(story.cycle(), m.StopRun) == [] and of(story.cycle(), m.RunStopped) == []
    story.grant_and_start(proposal)
    [stop] = of(story.cycle(), m.StopRun)
    assert stop.run_id == proposal.run_id
    story.event(m.RunStopped, run_id=proposal.run_id, job_id=job, reason="cancelled")
    assert story.view.stops_needed() == [] and job not in story.view.cancelled_live
