"""ETAs from running work's expected ends, as `runtime_scale` corrects them. (The ETAs a user
meets in the cases the policy can foresee are rows of `test_policy_scenarios`.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
from rota_policy import schedule
from rota_policy.model.runtimes import RuntimeScale

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


def test_the_runtime_scale_is_the_median_of_recent_jobs_refreshed_every_few_finishes() -> None:
    scale = RuntimeScale()
    for n in range(RuntimeScale.REFRESH - 1):
        scale.finished(actual_s=100.0 * (n % 3 + 1), declared_s=1000.0)  # 0.1, 0.2, 0.3, ...
    assert scale.value == 1.0  # nothing learned until the first refresh
    scale.finished(actual_s=300.0, declared_s=1000.0)
    assert scale.value == pytest.approx(0.2)
    for _ in range(RuntimeScale.RECENT):
        scale.finished(actual_s=900.0, declared_s=1000.0)
    assert scale.value == pytest.approx(0.9)  # only the latest jobs count
