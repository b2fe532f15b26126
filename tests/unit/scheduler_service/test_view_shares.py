"""The scheduler's view hands the policy GPU shares (DECISIONS 66): each job's share, each
running share's quarters of its GPU, and each node's GPUs that shares hold in part; the
proposals it publishes carry the share in their placement."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any

from pydantic import BaseModel
from rota.config.loader import parse_config
from rota.contracts import messages as m
from rota.ids import new_id
from rota_policy import policy_config_from, schedule
from rota_scheduler.actions import borrowed_whole, plan_actions, record_sent
from rota_scheduler.metrics import gpus_allocated
from rota_scheduler.snapshot import policy_snapshot
from rota_scheduler.view import ClusterView

from tests.builders import message, spec_doc

T0 = 1_800_000_000.0
CONFIG = parse_config({
    "cluster": {
        "flavors": [{"name": "t4", "shareable": True}],
        "node_pools": [{"name": "n", "flavor": "t4", "count": 1, "gpus_per_node": 2}],
    },
    "teams": {"nlp": {"quota": {"t4": 2}}},
})
POLICY = policy_config_from(CONFIG)


class Story:
    def __init__(self) -> None:
        self.view = ClusterView(CONFIG)
        self.now = T0
        ids = count()
        self.uuid = lambda: f"00000000-0000-7000-8000-{next(ids):012d}"

    def event(self, kind: type[BaseModel], **fields: Any) -> None:
        self.fold(message(kind, **fields))

    def fold(self, event: BaseModel) -> None:
        self.view.apply(event, self.now)

    def submit(self, **spec: Any) -> str:
        job_id = new_id()
        doc = spec_doc(team="nlp", user="alice", flavor="t4", gpus_per_worker=1, **spec)
        self.event(m.JobSubmitted, job_id=job_id, spec=doc,
                   submitted_at=datetime.fromtimestamp(self.now, UTC))
        self.now += 1
        return job_id

    def cycle(self) -> list[m.AllocationProposed]:
        decisions = schedule(policy_snapshot(self.view, self.now), self.now, POLICY)
        actions = plan_actions(self.view, decisions, now=self.now, new_uuid=self.uuid)
        record_sent(self.view, actions, self.now)
        for item in actions.outgoing:
            self.fold(item.message)
        return [i.message for i in actions.outgoing if isinstance(i.message, m.AllocationProposed)]

    def grant_and_start(self, proposal: m.AllocationProposed) -> None:
        data = proposal.model_dump(mode="json")
        self.event(m.AllocationGranted, **{k: data[k] for k in (
            "proposal_id", "job_id", "run_id", "team", "flavor", "placement", "gpus")})
        self.event(m.RunStarted, run_id=proposal.run_id, job_id=proposal.job_id, attempt=1,
                   placement=data["placement"])


def _gpus(proposals: list[m.AllocationProposed]) -> dict[tuple[str, int], float]:
    on: dict[tuple[str, int], float] = {}
    for p in proposals:
        for w in p.placement:
            for g in w.gpus:
                on[(w.node, g)] = on.get((w.node, g), 0) + (w.gpu_share or 1)
    return on


def test_shares_fill_gpus_in_quarters_and_the_proposals_carry_them() -> None:
    story = Story()
    halves = [story.submit(gpu_share=0.5) for _ in range(5)]
    pending = {j.job_id: j.share for q in policy_snapshot(story.view, story.now).pending for j in q.jobs}
    assert pending == dict.fromkeys(halves, 2)
    proposed = story.cycle()
    assert len(proposed) == 4 and {p.job_id for p in proposed} == set(halves[:4])
    assert all(w.gpu_share == 0.5 and p.gpus == 1 for p in proposed for w in p.placement)
    assert _gpus(proposed) == {("n-0", 0): 1.0, ("n-0", 1): 1.0}
    for p in proposed:
        story.grant_and_start(p)
    snapshot = policy_snapshot(story.view, story.now)
    (node,) = snapshot.nodes
    assert (node.free, node.shared) == ((), ((0, 4), (1, 4)))
    assert {(r.share, r.gpus, r.demand) for r in snapshot.running} == {(2, 0, 0.5)}
    assert gpus_allocated(story.view) == {("nlp", "t4"): 2.0}


def test_a_whole_gpu_never_meets_a_share_and_a_released_share_lets_another_in() -> None:
    story = Story()
    quarter, half = story.submit(gpu_share=0.25), story.submit(gpu_share=0.5)
    proposed = story.cycle()
    assert _gpus(proposed) == {("n-0", 0): 0.75}  # best fit: the second share joins the first
    for p in proposed:
        story.grant_and_start(p)
    whole = story.submit(workers=1)
    third = story.submit(gpu_share=0.5)
    placed = story.cycle()
    # The whole job takes the free GPU 1; the half fits nowhere (0.75 held on GPU 0).
    assert [(p.job_id, p.placement[0].gpus, p.placement[0].gpu_share) for p in placed] == [
        (whole, [1], None)]
    assert third not in {p.job_id for p in placed}
    for p in placed:
        story.grant_and_start(p)
    run_of = {p.job_id: p.run_id for p in proposed}
    story.event(m.RunFinished, run_id=run_of[half], job_id=half)
    story.event(m.AllocationReleased, run_id=run_of[half], job_id=half, team="nlp", flavor="t4",
                gpus=1, gpu_seconds=0.0)
    assert policy_snapshot(story.view, story.now).nodes[0].shared == ((0, 1),)
    again = story.cycle()
    assert [(p.job_id, p.placement[0].node, p.placement[0].gpus, p.placement[0].gpu_share)
            for p in again] == [(third, "n-0", [0], 0.5)]
    assert quarter in story.view.jobs


def test_a_cluster_without_shares_gives_the_policy_no_shared_gpus() -> None:
    story = Story()
    story.submit(workers=1)
    for p in story.cycle():
        story.grant_and_start(p)
    (node,) = policy_snapshot(story.view, story.now).nodes
    assert (node.free, node.shared) == ((1,), ())
    assert all(w.gpu_share is None for p in story.cycle() for w in p.placement)


def test_a_production_half_preempts_one_experiment_half_and_starts_beside_the_other() -> None:
    """DECISIONS 84 in the live view: the plan names one share victim with its fraction and a
    target with the preemptor's; the victim's release frees only its quarters, and the
    preemptor is proposed onto that GPU, beside the half that kept running."""
    story = Story()
    halves = [story.submit(gpu_share=0.5, queue="experiment") for _ in range(4)]
    running = story.cycle()
    for p in running:
        story.grant_and_start(p)
    story.now += 3600.0
    prod = story.submit(gpu_share=0.5, queue="production")
    decisions = schedule(policy_snapshot(story.view, story.now), story.now, POLICY)
    (plan,) = decisions.plans
    assert plan.preemptor_job_id == prod and len(plan.victims) == 1 and plan.victims[0].share == 2
    assert "stops 0.5 of one t4 GPU" in plan.message
    actions = plan_actions(story.view, decisions, now=story.now, new_uuid=story.uuid)
    record_sent(story.view, actions, story.now)
    (requested,) = [i.message for i in actions.outgoing if isinstance(i.message, m.PreemptionRequested)]
    (victim,) = requested.victims
    assert (victim.gpus, victim.gpu_share) == (0, 0.5)
    assert requested.target is not None and requested.target[0].gpu_share == 0.5
    assert "gpu_share" not in m.Victim(**{**victim.model_dump(), "gpu_share": None}).model_dump(mode="json")
    for item in actions.outgoing:
        story.fold(item.message)
    gpu = requested.target[0].gpus[0]
    story.event(m.RunStopped, run_id=victim.run_id, job_id=victim.job_id, reason="preempted", forced=False)
    story.event(m.AllocationReleased, run_id=victim.run_id, job_id=victim.job_id, team="nlp", flavor="t4",
                gpus=1, gpu_seconds=0.0)
    assert dict(policy_snapshot(story.view, story.now).nodes[0].shared)[gpu] == 2  # the other half stays
    (proposal,) = story.cycle()
    assert (proposal.job_id, proposal.plan_id, proposal.placement[0].gpus, proposal.placement[0].gpu_share) == (
        prod, requested.plan_id, [gpu], 0.5)
    assert victim.job_id in halves and story.view.jobs[victim.job_id].phase == "pending"


def test_a_share_above_its_quota_proposes_its_one_gpu_borrowed() -> None:
    """The policy counts a borrowing half as 0.5; the contract's count, like the ledger's
    grant, is whole GPUs, so the proposal says 1 (a fraction there failed every cycle)."""
    assert [borrowed_whole(b) for b in (0, 0.25, 0.5, 1.0, 3.0, 2.0000000001)] == [0, 1, 1, 1, 3, 2]
