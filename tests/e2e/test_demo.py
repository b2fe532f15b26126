"""`rota demo` on embedded defaults: the whole preemption story, judged by its own checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROTA = str(Path(sys.executable).parent / "rota")


def test_the_demo_tells_the_whole_story(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    env["ROTA_HOME"] = str(tmp_path)
    result = subprocess.run([ROTA, "demo", "--json"], env=env, capture_output=True, text=True,
                            timeout=300)
    verdict = json.loads(result.stdout)
    failed = [c["check"] for c in verdict["checks"] if not c["passed"]]
    assert result.returncode == 0 and verdict["ok"], (failed, verdict["events"], result.stderr[-2000:])
    jobs = verdict["jobs"]
    resumed = {name for name, job in jobs.items() if job["resumed_from"]}
    assert resumed == {"vision-train-c", "research-sweep", "vision-train-a"}
    assert any("drain of node" in line for line in verdict["events"])
    assert all(job["state"] == "finished" for job in jobs.values())
    assert any("acknowledged with checkpoint" in line for line in verdict["events"])
