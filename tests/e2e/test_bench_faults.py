"""`rota bench faults` on embedded defaults, small: the whole stack on a NATS cluster of 3
through the ROTA_EVT leader's server killed with SIGKILL and restarted, then PostgreSQL killed
and restarted, under a steady load: no job lost, recorded or granted twice, no GPU granted to
two runs, no consumer left with work. (The stalls it reports are figures, not asserted.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.up import ROTA

pytestmark = pytest.mark.e2e


def test_a_node_and_the_database_lost_under_load_lose_and_double_nothing(
    env: dict[str, str], home: Path
) -> None:
    out = home / "faults.json"
    done = subprocess.run([ROTA, "bench", "faults", "--jobs", "150", "--rate", "25",
                           "--down-s", "2", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert [p["phase"] for p in figures["phases"]] == ["nats-leader-kill", "postgres-kill"]
    for phase in figures["phases"]:
        assert (phase["submitted"], phase["granted"]) == (150, 150), phase
        assert phase["lost_submissions"] == phase["lost_grants"] == 0, phase
        assert phase["submissions_recorded_twice"] == phase["jobs_granted_twice"] == 0, phase
        assert phase["gpus_granted_to_two_runs"] == 0, phase
        assert phase["stuck_consumers"] == {}, phase
