"""ETAs from running work's expected ends, as `runtime_scale` corrects them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rota_policy import schedule

from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config

NOW = 10_000.0


@pytest.mark.parametrize(("scale", "expected"), [
    # Declared 6,000 s, started 3,000 s ago. At scale 0.75 it should end in 1,500 s.
    (0.75, NOW + 1500.0),
    # At scale 0.25 it should have ended 1,500 s ago: one of the longer runs for what it
    # declared, so it is expected to use the rest of its declared runtime at the same scale,
    # not to end this very instant.
    (0.25, NOW + 750.0),
])
def test_a_waiting_jobs_eta_is_when_the_run_ahead_is_expected_to_end(scale: float, expected: float) -> None:
    world = cluster(1, Run("cv", "training", started=NOW - 3000, end=NOW + 3000))
    snapshot = replace(world.snapshot(gpu_jobs("nlp", "training", submitted=NOW)), runtime_scale=scale)
    decisions = schedule(snapshot, NOW, team_config({"nlp": 0, "cv": 8}, preemption=False))
    (waiting,) = decisions.pending
    assert waiting.eta == pytest.approx(expected)


def test_a_job_within_quota_is_told_when_its_lent_gpus_can_be_taken_back() -> None:
    # vision lent its 8 GPUs to nlp, whose run started 100 s ago: the minimum runtime (300 s)
    # protects it for 200 s more, so there is no plan yet, but the start is foreseeable.
    world = cluster(1, Run("nlp", "training", started=NOW - 100, end=NOW + 7200))
    decisions = schedule(world.snapshot(gpu_jobs("vision", "production", submitted=NOW)), NOW,
                         team_config({"vision": 8, "nlp": 0}))
    (waiting,) = decisions.pending
    assert decisions.plans == ()
    save = team_config().checkpoint_save_s
    assert waiting.eta == pytest.approx(NOW + 200 + save)
    reason = waiting.reasons[0]
    assert "within its quota" in reason.message and "8 GPUs to nlp" in reason.message
    assert dict(reason.details)["reclaimable_at"] == pytest.approx(NOW + 200 + save)


@pytest.mark.parametrize(("borrowing", "lending", "says"), [
    ({"nlp": 0}, None, "insufficient borrowing limit for gpu: 8 more needed"),
    (None, {"cv": 0}, "insufficient unused quota to borrow for gpu: 8 more needed"),
])
def test_a_quota_refusal_says_how_many_more_gpus_are_needed(
    borrowing: dict[str, int] | None, lending: dict[str, int] | None, says: str
) -> None:
    # nlp uses its 8 and asks for 8 more; cv's 8 are idle on the second node.
    world = cluster(2, Run("nlp", "training", node=0))
    config = team_config({"nlp": 8, "cv": 8}, borrowing=borrowing, lending=lending)
    (waiting,) = schedule(world.snapshot(gpu_jobs("nlp", "training", submitted=NOW)), NOW, config).pending
    assert waiting.reasons[0].message.startswith(says), waiting.reasons[0].message
