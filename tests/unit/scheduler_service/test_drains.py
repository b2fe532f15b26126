"""Node drains in the scheduler (DECISIONS 100): a drained node takes no placement, its runs
are stopped by drain plans (reason `drain`, one victim, no preemptor job) unless expected to
end before the deadline, each once; a `drained` stop requeues without spending the budget;
`rota cluster nodes` reads the node's state from the view."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rota.contracts import messages as m
from rota_scheduler.actions import Actions, record_sent
from rota_scheduler.drains import add_drain_actions, node_states
from rota_scheduler.snapshot import policy_snapshot, running_runs

from tests.unit.scheduler_service.test_view_and_actions import POLICY, Story, of


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def drain_cycle(story: Story) -> list[Any]:
    """The drain half of a cycle: plans committed, folded, and echoed."""
    actions = Actions()
    add_drain_actions(story.view, policy_snapshot(story.view, story.now), actions, story.now,
                      default_runtime_s=POLICY.default_runtime_s, new_uuid=story.uuid)
    record_sent(story.view, actions, story.now)
    for item in actions.outgoing:
        story.fold(item.message)
    assert [r.decision for r in actions.records] == ["preempt"] * len(actions.outgoing)
    return [item.message for item in actions.outgoing]


def two_runs_on_one_node(story: Story) -> tuple[str, str, m.AllocationProposed, str]:
    """A 4-GPU run declared short and one declared long, packed onto one node."""
    short = story.submit(gpus_per_worker=4, declared_runtime_s=600)
    long = story.submit(gpus_per_worker=4, declared_runtime_s=36_000)
    proposals = of(story.cycle(), m.AllocationProposed)
    for proposal in proposals:
        story.grant_and_start(proposal)
    nodes = {s.node for p in proposals for s in p.placement}
    assert len(nodes) == 1, nodes
    [long_proposal] = [p for p in proposals if p.job_id == long]
    return short, long, long_proposal, nodes.pop()


def test_a_drain_stops_the_long_run_once_and_leaves_the_short_one() -> None:
    story = Story()
    short, long, long_run, node = two_runs_on_one_node(story)
    story.event(m.NodeDrainRequested, node=node, deadline=_iso(story.now + 3600),
                reason="firmware", requested_by="admin")
    [plan] = drain_cycle(story)
    assert isinstance(plan, m.PreemptionRequested)
    assert (plan.reason, plan.node, [v.job_id for v in plan.victims]) == ("drain", node, [long])
    assert plan.preemptor_job_id not in story.view.jobs  # no job preempts
    assert "firmware" in plan.message
    assert drain_cycle(story) == []  # in flight: not stopped twice
    assert not story.view.plans  # nothing held for a preemptor
    [state] = node_states(story.view, running_runs(story.view, story.now), story.now,
                          default_runtime_s=POLICY.default_runtime_s, runtime_scale=1.0, only=node)
    assert state["state"] == "draining" and state["reason"] == "firmware"
    assert {(r["job_id"], r["draining"]) for r in state["runs"]} == {(short, False), (long, True)}

    # The drained stop requeues from the checkpoint, spending no preemption budget, and the
    # job is placed again, but not on the drained node.
    story.event(m.RunStopped, run_id=long_run.run_id, job_id=long, reason="drained",
                checkpoint_uri="s3://ckpt/long")
    story.event(m.AllocationReleased, run_id=long_run.run_id, job_id=long, team="nlp",
                flavor="h100", gpus=4, gpu_seconds=1.0)
    record = story.view.jobs[long]
    assert (record.phase, record.resume_from, record.preemptions) == ("pending", "s3://ckpt/long", 0)
    placed = [s.node for p in of(story.cycle(), m.AllocationProposed) for s in p.placement]
    assert placed and node not in placed


def test_at_the_deadline_the_run_left_to_finish_is_stopped_too() -> None:
    story = Story()
    short, long, _, node = two_runs_on_one_node(story)
    story.event(m.NodeDrainRequested, node=node, deadline=_iso(story.now + 3600),
                reason="kernel", requested_by="admin")
    assert [p.victims[0].job_id for p in drain_cycle(story)] == [long]
    story.now += 3600
    assert [p.victims[0].job_id for p in drain_cycle(story)] == [short]


def test_undrain_takes_placements_again_and_stops_nothing_more() -> None:
    story = Story()
    _, _, _, node = two_runs_on_one_node(story)
    story.event(m.NodeDrainRequested, node=node, deadline=_iso(story.now),
                reason="x", requested_by="admin")
    story.event(m.NodeDrainCancelled, node=node, requested_by="admin")
    assert drain_cycle(story) == []
    [state] = node_states(story.view, running_runs(story.view, story.now), story.now,
                          default_runtime_s=POLICY.default_runtime_s, runtime_scale=1.0, only=node)
    assert state["state"] == "ready" and state["deadline"] is None


def test_an_empty_drained_node_is_drained_and_gets_no_placement() -> None:
    story = Story()
    h100 = [n.name for n in story.view.config.expanded_nodes() if n.flavor == "h100"]
    for name in h100[1:]:
        story.event(m.NodeDrainRequested, node=name, deadline=_iso(story.now), reason="x",
                    requested_by="admin")
    story.submit(workers=1)
    story.submit(workers=1)
    placed = [s.node for p in of(story.cycle(), m.AllocationProposed) for s in p.placement]
    assert placed == [h100[0]]
    states = {s["node"]: s["state"] for s in node_states(
        story.view, running_runs(story.view, story.now), story.now,
        default_runtime_s=POLICY.default_runtime_s, runtime_scale=1.0)}
    assert states[h100[1]] == "drained" and states[h100[0]] == "ready"
