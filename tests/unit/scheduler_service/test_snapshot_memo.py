"""The snapshot that reuses last cycle's running runs equals the one built from scratch, at
every step of a story with starts, checkpoints, preemptions, restarts and time passing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rota.contracts import messages as m
from rota_policy.model.layout import layout_key
from rota_scheduler.snapshot import policy_snapshot, snapshot_of

from tests.unit.scheduler_service.test_view_and_actions import Story, of


class CheckedStory(Story):
    """Before each cycle, and at `check()`, the memo's snapshot must equal the plain one."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def check(self) -> None:
        reused = policy_snapshot(self.view, self.now)
        fresh = snapshot_of(self.view, self.now, None)
        assert reused.layout is not None and reused.layout.key == layout_key(fresh.nodes)
        assert replace(reused, layout=None) == fresh, f"check {self.checks}"
        self.checks += 1

    def cycle(self) -> list[Any]:
        self.check()
        return super().cycle()


def test_the_reused_running_runs_equal_fresh_ones_through_a_preemption_story() -> None:
    story = CheckedStory()
    victims = [story.submit(workers=1, team="research", user="dave", queue="experiment",
                            resumable=True) for _ in range(4)]
    proposals = of(story.cycle(), m.AllocationProposed)
    story.check()
    story.now += 30  # proposed, not started: such a run starts "now", which moves
    story.check()
    for proposal in proposals:
        story.grant_and_start(proposal)
        story.check()
    story.now += 1800
    first = proposals[0]
    story.event(m.RunCheckpointed, run_id=first.run_id, job_id=first.job_id,
                checkpoint_uri="s3://ckpt/1", progress_s=100.0)
    story.check()
    story.now += 1800
    preemptor = story.submit(workers=2, team="nlp", user="alice", queue="production")
    [plan] = of(story.cycle(), m.PreemptionRequested)
    for victim in plan.victims:
        story.event(m.RunStopped, run_id=victim.run_id, job_id=victim.job_id,
                    reason="preempted", checkpoint_uri=f"s3://ckpt/{victim.job_id}")
        story.check()
        story.event(m.AllocationReleased, run_id=victim.run_id, job_id=victim.job_id,
                    team="research", flavor="h100", gpus=8, gpu_seconds=1.0)
        story.check()
    out = story.cycle()
    for proposal in of(out, m.AllocationProposed):
        story.grant_and_start(proposal)
    story.now += 600
    for proposal in of(story.cycle(), m.AllocationProposed):  # the victims, back on freed GPUs
        story.grant_and_start(proposal)
    story.now += 7200
    story.check()
    assert preemptor in {r.job_id for r in policy_snapshot(story.view, story.now).running}
    assert set(victims) & {r.job_id for r in policy_snapshot(story.view, story.now).running}
    assert story.checks >= 12


def test_the_nodes_are_built_again_only_when_the_gpus_held_or_withdrawn_change() -> None:
    story = CheckedStory()
    first = policy_snapshot(story.view, story.now)
    story.now += 60
    again = policy_snapshot(story.view, story.now)
    assert again.nodes is first.nodes  # nothing held or withdrawn changed
    assert again.layout is first.layout
    first = again.nodes
    story.submit(workers=1, gpus_per_worker=2, team="research", user="dave", queue="experiment")
    [proposal] = of(story.cycle(), m.AllocationProposed)
    held = policy_snapshot(story.view, story.now).nodes
    assert held is not first and held != first
    taken = {slot.node for slot in proposal.placement}
    # Only the node the job went to is built again; every other node's state is the same one.
    assert [a.name for a in held] == [b.name for b in first]
    assert {a.name for a, b in zip(held, first, strict=True) if a is not b} == taken
    story.grant_and_start(proposal)
    story.check()
    node = proposal.placement[0].node
    story.event(m.NodeWithdrawn, node=node, reason="drained")
    withdrawn = policy_snapshot(story.view, story.now).nodes
    assert withdrawn != held
    assert next(n for n in withdrawn if n.name == node).free == ()
    story.check()
