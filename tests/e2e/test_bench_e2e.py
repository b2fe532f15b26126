"""`rota bench e2e` on embedded defaults: a small run grants, records and starts every job, and
prints each stage's latency in the order a job reaches it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.up import ROTA

pytestmark = pytest.mark.e2e


def test_a_small_bench_run_reports_every_stage_of_every_job(
    env: dict[str, str], home: Path
) -> None:
    out = home / "bench.json"
    done = subprocess.run([ROTA, "bench", "e2e", "--jobs", "30", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert json.loads(done.stdout) == figures
    assert (figures["jobs"], figures["granted"], figures["started"]) == (30, 30, 30)
    # Each job is recorded, then proposed, then granted, then started: so are the medians.
    assert 0 < figures["recorded_p50_ms"] <= figures["proposed_p50_ms"] <= figures["p50_ms"]
    assert figures["p50_ms"] <= figures["started_p50_ms"]
    assert figures["started_p99_ms"] <= figures["started_max_ms"]
    assert set(figures["cpu_s_per_job"]) >= {"submission", "scheduler", "ledger", "executor"}
