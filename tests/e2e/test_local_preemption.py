"""The whole preemption story with real processes: `rota up --executor local`, the example
training script, and the CLI. The victim really checkpoints to a file, acknowledges, stops,
and its next run resumes from that file."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.e2e

ROTA = str(Path(sys.executable).parent / "rota")
REPO = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("local.rota.yaml")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    env["ROTA_HOME"] = str(tmp_path_factory.mktemp("rota-local"))
    return env


@pytest.fixture(scope="module")
def stack(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [ROTA, "up", "--executor", "local", "--config", str(CONFIG), "--json"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=REPO)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 120)
    assert ready and json.loads(process.stdout.readline())["executor"] == "local"
    yield process
    process.send_signal(signal.SIGTERM)
    process.wait(15)


def rota(env: dict[str, str], *args: str) -> Any:
    result = subprocess.run([ROTA, *args, "--json"], env=env, capture_output=True, text=True,
                            timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def job_file(tmp: Path, name: str, team: str, queue: str, steps: int, declared_s: int = 120) -> Path:
    doc = {"name": name, "team": team, "user": team, "queue": queue, "flavor": "gpu",
           "workers": 1, "gpus_per_worker": 8, "resumable": True, "declared_runtime_s": declared_s,
           "submission_id": f"local-{name}",
           "local": {"command": [sys.executable, "examples/train_plain.py"],
                     "env": {"TRAIN_STEPS": str(steps), "TRAIN_STEP_S": "0.05",
                             "TRAIN_CHECKPOINT_EVERY": "20"}}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def wait_for(env: dict[str, str], job_id: str, states: set[str], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = rota(env, "job", job_id)
        if job["state"] in states:
            return job
        time.sleep(0.5)
    raise AssertionError(f"{job_id} still {job.get('state')} after {timeout} s")


def test_production_preempts_a_real_process_that_checkpoints_and_resumes(
    stack: subprocess.Popen[bytes], env: dict[str, str], tmp_path: Path
) -> None:
    # The sweep declares two hours: its GPUs would come too late for production's wait target,
    # so production preempts rather than waits (DECISIONS 43).
    sweep = rota(env, "submit", "-f", str(job_file(tmp_path, "sweep", "research", "experiment", 400, 7200)))
    wait_for(env, sweep["job_id"], {"running"}, 60)
    time.sleep(2)  # past its minimum runtime, with a few checkpoints behind it
    release = rota(env, "submit", "-f", str(job_file(tmp_path, "release", "nlp", "production", 40)))

    done = wait_for(env, release["job_id"], {"finished", "failed"}, 120)
    assert done["state"] == "finished"
    victim = wait_for(env, sweep["job_id"], {"finished", "failed"}, 180)
    assert victim["state"] == "finished" and victim["attempts"] == 2

    timeline = rota(env, "trace", sweep["job_id"])["timeline"]
    kinds = [entry["type"] for entry in timeline]
    for expected in ("PreemptionRequested", "PreemptionNoticed", "RunCheckpointed", "RunStopped",
                     "PreemptionCompleted", "RunFinished"):
        assert expected in kinds, (expected, kinds)
    [ack] = [e for e in timeline if e["type"] == "RunCheckpointed" and e["data"].get("notice_id")]
    checkpoint = ack["data"]["checkpoint_uri"]
    assert checkpoint.startswith("file://")
    [stopped] = [e for e in timeline if e["type"] == "RunStopped"]
    assert stopped["data"]["reason"] == "preempted" and not stopped["data"]["forced"]
    assert stopped["data"]["checkpoint_uri"] == checkpoint
    restarts = [e for e in timeline if e["type"] == "RunStarted"]
    assert [r["data"]["attempt"] for r in restarts] == [1, 2]
    assert restarts[1]["data"]["resumed_from"] == checkpoint
    [completed] = [e for e in timeline if e["type"] == "PreemptionCompleted"]
    assert completed["data"]["victims"][0]["outcome"] == "acked"

    release_trace = rota(env, "trace", release["job_id"])["timeline"]
    release_start = next(e["at"] for e in release_trace if e["type"] == "RunStarted")
    assert stopped["at"] <= release_start  # the preemptor ran only on GPUs already freed

    log = Path(env["ROTA_HOME"]) / "runs" / f"{restarts[1]['data']['run_id']}.log"
    assert "resum" in log.read_text().lower()

    [plan] = rota(env, "preemptions", "--job", sweep["job_id"])
    assert plan["preemptor_job_id"] == release["job_id"] and plan["state"] == "completed"
    assert [(v["job_id"], v["outcome"]) for v in plan["victims"]] == [(sweep["job_id"], "acked")]
    assert rota(env, "allocations")["allocations"] == []  # every GPU back in the ledger
