"""Restarts at another size in flight (`Snapshot.restarts`, DECISIONS 81): the live
scheduler's way of holding a shrunk victim's kept GPUs, or a growing run's added ones, until
its job waits again and is admitted on exactly them."""

from __future__ import annotations

from dataclasses import replace

from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import PendingJob, Restart, Slot, schedule
from rota_policy.model.decisions import Decisions

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 10_000.0
CONFIG = team_config({"nlp": 16, "cv": 16})


def _elastic_world(nodes: int = 2) -> tuple[World, Restart]:
    """An elastic nlp run of 4 workers x 2 GPUs on n0, shrunk to 2 (it keeps n0's GPUs 0-3)."""
    world = World(nodes=nodes)
    run = world.run("nlp", "training", node=[0, 0, 0, 0], gpus=2, elastic_min=2, run_id="el")
    restart = Restart(run.job_id, run.run_id, run.placement[:2], requested_at=NOW - 10)
    return world, restart


def _restarting_job(restart: Restart) -> list[PendingJob]:
    return gpu_jobs("nlp", "training", gpus=2, workers=2, workers_max=4,
                    name=restart.job_id, submitted=-5000.0)


def _decide(world: World, pending: list[PendingJob], restart: Restart) -> Decisions:
    snapshot = replace(world.snapshot(pending), restarts=(restart,))
    return schedule(snapshot, NOW, CONFIG)


def test_a_shrunk_job_restarts_on_exactly_the_gpus_it_kept_before_a_higher_tier() -> None:
    world, restart = _elastic_world(nodes=1)
    run = world.runs[0]
    world.finish(run)  # it saved and stopped: n0 is all free again
    production = gpu_jobs("cv", "production", gpus=8, name="prod", submitted=0.0)
    d = _decide(world, [*_restarting_job(restart), *production], restart)
    (admitted,) = d.admissions
    assert admitted.job_id == restart.job_id and admitted.via_plan
    assert admitted.placement == restart.target
    assert admitted.placement == (Slot(0, "n0", (0, 1)), Slot(1, "n0", (2, 3)))
    assert "prod" in {e.job_id for e in d.pending}


def test_while_its_run_still_holds_gpus_the_job_waits_and_starts_nowhere_else() -> None:
    world, restart = _elastic_world(nodes=2)  # n1 is all free: room for its max elsewhere
    d = _decide(world, _restarting_job(restart), restart)
    assert d.admissions == ()
    (waiting,) = d.pending
    reason = waiting.reasons[0]
    assert reason.code is Code.WAITING_FOR_PREEMPTION
    assert "shrunk to 2 workers" in reason.message
    assert reason.detail("restart") == "shrink" and reason.detail("restart_workers") == 2
    assert waiting.eta is not None and waiting.eta >= NOW


def test_its_kept_gpus_are_held_from_others_once_free() -> None:
    """The kept GPUs came free (the ledger released the run) but the job is not admitted in
    this cycle's walk before another: a job that fits only there must not take them."""
    world, restart = _elastic_world(nodes=1)
    world.finish(world.runs[0])
    other = gpu_jobs("cv", "production", gpus=2, workers=4, name="other", submitted=0.0)
    d = _decide(world, [*_restarting_job(restart), *other], restart)
    taken = {(s.node, g) for a in d.admissions if a.job_id == "other" for s in a.placement
             for g in s.gpus}
    assert taken.isdisjoint({(s.node, g) for s in restart.target for g in s.gpus})


def test_a_restart_whose_gpus_another_run_took_is_abandoned() -> None:
    world, restart = _elastic_world(nodes=2)
    world.finish(world.runs[0])
    world.run("cv", "production", node=0, gpus=2)  # takes GPUs 0 and 1 of n0
    d = _decide(world, _restarting_job(restart), restart)
    assert restart.job_id in d.abandoned_plans
    (admitted,) = d.admissions  # it starts where the ladder admits it, as any requeued job
    assert not admitted.via_plan and admitted.placement != restart.target


def test_a_running_run_that_is_restarting_is_no_victim_and_does_not_grow() -> None:
    world, restart = _elastic_world(nodes=2)
    world.runs[0] = replace(world.runs[0], started_at=NOW - 7200)  # old enough to grow
    grown = Restart(restart.job_id, restart.run_id, world.runs[0].placement, grow=True)
    d = schedule(replace(world.snapshot([]), restarts=(grown,)), NOW, CONFIG)
    assert d.grows == ()
    big = gpu_jobs("cv", "production", gpus=8, workers=2, name="big")
    d = schedule(replace(world.snapshot(big), restarts=(grown,)), NOW, CONFIG)
    assert all(v.run_id != "el" for p in d.plans for v in p.victims)


def test_a_growing_run_holds_its_added_gpus_from_waiting_jobs() -> None:
    world = World(nodes=1)
    run = world.run("nlp", "training", node=[0, 0], gpus=2, elastic_min=2, run_id="el")
    added = (Slot(2, "n0", (4, 5)), Slot(3, "n0", (6, 7)))
    grow = Restart(run.job_id, run.run_id, run.placement + added, requested_at=NOW, grow=True)
    small = gpu_jobs("cv", "training", gpus=2, name="small")
    d = schedule(replace(world.snapshot(small), restarts=(grow,)), NOW, CONFIG)
    taken = {(s.node, g) for a in d.admissions for s in a.placement for g in s.gpus}
    assert d.admissions == () or taken.isdisjoint({("n0", g) for g in (4, 5, 6, 7)})
    # Once its run stopped, it is admitted at 4 workers on its GPUs and the added ones.
    world.finish(run)
    pending = gpu_jobs("nlp", "training", gpus=2, workers=2, workers_max=4, name=run.job_id)
    d = schedule(replace(world.snapshot([*pending, *small]), restarts=(grow,)), NOW, CONFIG)
    mine = next(a for a in d.admissions if a.job_id == run.job_id)
    assert mine.placement == grow.target and len(mine.placement) == 4
