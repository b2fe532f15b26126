"""Driving a `rota up` stack through the CLI, as the preemption stories of the local and the
kubernetes executors do: start it, ask it, wait for a job's state, write a training job."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROTA = str(Path(sys.executable).parent / "rota")
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def rota_up(env: dict[str, str], executor: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """`rota up --executor E ARGS --json`, once it says it is ready; stopped with SIGTERM."""
    process = subprocess.Popen(
        [ROTA, "up", "--executor", executor, *args, "--json"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=REPO)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 120)
    assert ready and json.loads(process.stdout.readline())["executor"] == executor
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


def rota(env: dict[str, str], *args: str) -> Any:
    result = subprocess.run([ROTA, *args, "--json"], env=env, capture_output=True, text=True,
                            timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def training_job(tmp: Path, name: str, team: str, queue: str, steps: int, *, backend: dict[str, Any],
                 declared_s: int = 120) -> Path:
    """A job file of one 8-GPU worker; `backend` is its `local:` or `kubernetes:` section, whose
    `env` gets the example script's step settings."""
    section, spec = next(iter(backend.items()))
    spec = {**spec, "env": {"TRAIN_STEPS": str(steps), "TRAIN_STEP_S": "0.05", "TRAIN_CHECKPOINT_EVERY": "20"}}
    doc = {"name": name, "team": team, "user": team, "queue": queue, "flavor": "gpu",
           "workers": 1, "gpus_per_worker": 8, "resumable": True, "declared_runtime_s": declared_s,
           "submission_id": f"{section}-{name}", section: spec}
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
