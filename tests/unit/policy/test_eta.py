"""ETAs from running work's expected ends, as `runtime_scale` corrects them. (The ETAs a user
meets in the cases the policy can foresee are rows of `test_policy_scenarios`.)"""

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
