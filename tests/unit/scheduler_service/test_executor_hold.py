"""The scheduler's hold on jobs no running executor can run (`rota_scheduler.executors`), folded
from `ExecutorAnnounced` as the stream delivers it and decided through the policy: what the
announcements say, how long they count, and which jobs they hold."""

from __future__ import annotations

from typing import Any

from rota.contracts import messages as m
from rota.ids import new_id

from tests.unit.scheduler_service.test_view_and_actions import Story, of


def announce(story: Story, backend: str, needs: str | None, *, replica: int = 0,
             replicas: int = 1, valid_for_s: float = 90.0) -> None:
    story.event(m.ExecutorAnnounced, backend=backend, needs=needs, instance=new_id(),
                replica=replica, replicas=replicas, valid_for_s=valid_for_s)


def proposed(out: list[Any]) -> set[str]:
    return {p.job_id for p in of(out, m.AllocationProposed)}


def waits(out: list[Any]) -> dict[str, list[str]]:
    return {p.job_id: [r.code.value for r in p.reasons] for p in of(out, m.JobPending)}


def test_before_any_announcement_nothing_is_held() -> None:
    story = Story()
    job = story.submit(sim={"duration_s": 60.0})
    assert proposed(story.cycle()) == {job}


def test_the_local_executor_holds_a_sim_only_job_and_the_simulator_releases_it() -> None:
    story = Story()
    announce(story, "local", "local")
    sim_only = story.submit(sim={"duration_s": 60.0})
    bare = story.submit()
    runnable = story.submit(local={"command": ["python", "train.py"]}, sim={"duration_s": 60.0})
    out = story.cycle()
    assert proposed(out) == {runnable}
    assert waits(out) == {sim_only: ["NO_EXECUTOR"], bare: ["NO_EXECUTOR"]}
    [bare_wait] = [p for p in of(out, m.JobPending) if p.job_id == bare]
    assert "it has no `local`, `kubernetes` or `sim` section" in bare_wait.reasons[0].message
    story.now += 10
    announce(story, "sim", None)  # the same replica restarted with the simulator
    assert proposed(story.cycle()) == {sim_only, bare}


def test_an_announcement_lapses_and_then_holds_nothing() -> None:
    story = Story()
    announce(story, "kubernetes", "kubernetes", valid_for_s=30.0)
    job = story.submit(local={"command": ["python", "train.py"]})
    assert waits(story.cycle()) == {job: ["NO_EXECUTOR"]}
    story.now += 31  # no announcement since: that executor has gone, and no other is known
    assert proposed(story.cycle()) == {job}


def test_any_live_replica_that_can_run_the_job_is_enough() -> None:
    story = Story()
    announce(story, "local", "local", replica=0, replicas=2)
    announce(story, "kubernetes", "kubernetes", replica=1, replicas=2)
    job = story.submit(kubernetes={"image": "train:1"})
    assert proposed(story.cycle()) == {job}


def test_fewer_replicas_drop_the_ones_past_them() -> None:
    story = Story()
    announce(story, "sim", None, replica=1, replicas=2)
    announce(story, "local", "local", replica=0, replicas=1)  # scaled down to one replica
    job = story.submit(sim={"duration_s": 60.0})
    assert waits(story.cycle()) == {job: ["NO_EXECUTOR"]}


def test_an_executor_that_needs_a_section_this_version_does_not_know_holds_nothing() -> None:
    story = Story()
    announce(story, "slurm", "slurm")
    job = story.submit(sim={"duration_s": 60.0})
    assert proposed(story.cycle()) == {job}


def test_an_older_announcement_read_late_does_not_replace_a_newer_one() -> None:
    story = Story()
    announce(story, "sim", None)
    story.now -= 5  # an announcement made before the simulator's, delivered after it
    announce(story, "local", "local")
    story.now += 5
    job = story.submit(sim={"duration_s": 60.0})
    assert proposed(story.cycle()) == {job}


def test_a_renewal_changes_nothing_that_would_explain_the_queue_again() -> None:
    story = Story()
    announce(story, "local", "local")
    before = story.view.changes
    story.now += 30
    announce(story, "local", "local")
    assert story.view.changes == before
    announce(story, "sim", None)  # another backend in its place: a change
    assert story.view.changes == before + 1
