"""The whole preemption story with real processes: `rota up --executor local`, the example
training script, and the CLI. The victim really checkpoints to a file, acknowledges, stops,
and its next run resumes from that file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.rota_cli import play_preemption, rota, rota_up, training_job

pytestmark = pytest.mark.e2e

CONFIG = Path(__file__).with_name("local.rota.yaml")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    env["ROTA_HOME"] = str(tmp_path_factory.mktemp("rota-local"))
    return env


@pytest.fixture(scope="module")
def stack(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with rota_up(env, "local", "--config", str(CONFIG)) as process:
        yield process


def job_file(tmp: Path, name: str, team: str, queue: str, steps: int, declared_s: int = 120) -> Path:
    backend = {"local": {"command": [sys.executable, "examples/train_plain.py"]}}
    return training_job(tmp, name, team, queue, steps, backend=backend, declared_s=declared_s)


def test_production_preempts_a_real_process_that_checkpoints_and_resumes(
    stack: subprocess.Popen[bytes], env: dict[str, str], tmp_path: Path
) -> None:
    story = play_preemption(env, job_file, tmp_path, settle_s=2)
    timeline, checkpoint, stopped = story.timeline, story.checkpoint, story.stopped
    assert checkpoint.startswith("file://")
    assert stopped["data"]["checkpoint_uri"] == checkpoint
    restarts = [e for e in timeline if e["type"] == "RunStarted"]
    [completed] = [e for e in timeline if e["type"] == "PreemptionCompleted"]
    assert completed["data"]["victims"][0]["outcome"] == "acked"

    release_trace = rota(env, "trace", story.release_id)["timeline"]
    release_start = next(e["at"] for e in release_trace if e["type"] == "RunStarted")
    assert stopped["at"] <= release_start  # the preemptor ran only on GPUs already freed

    log = Path(env["ROTA_HOME"]) / "runs" / f"{restarts[1]['data']['run_id']}.log"
    assert "resum" in log.read_text().lower()

    [plan] = rota(env, "preemptions", "--job", story.sweep_id)
    assert plan["preemptor_job_id"] == story.release_id and plan["state"] == "completed"
    assert [(v["job_id"], v["outcome"]) for v in plan["victims"]] == [(story.sweep_id, "acked")]
    assert rota(env, "allocations")["allocations"] == []  # every GPU back in the ledger
