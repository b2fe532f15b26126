"""Driving a `rota up` stack through the CLI, as the preemption stories of the local and the
kubernetes executors do: start it, ask it, wait for a job's state, write a training job."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment for a `rota up` of its own under `home`: no NATS, database
    or config of the caller's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    return {**env, "ROTA_HOME": str(home), **extra}


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


@dataclass(frozen=True)
class PreemptionStory:
    """What `play_preemption` saw: the victim's timeline, its acknowledged checkpoint and its
    stop, and the preemptor's id."""

    sweep_id: str
    release_id: str
    timeline: list[dict[str, Any]]
    checkpoint: str
    stopped: dict[str, Any]


def play_preemption(env: dict[str, str], job_file: Callable[..., Path], tmp: Path,
                    settle_s: float) -> PreemptionStory:
    """research's experiment sweep borrows the node; nlp's production release reclaims it.
    Checks that both finish, the sweep in two runs: noticed, acknowledged, stopped without
    force, resumed from the acknowledged checkpoint."""
    # The sweep declares two hours: its GPUs would come too late for production's wait target,
    # so production preempts rather than waits (DECISIONS 43).
    sweep = rota(env, "submit", "-f", str(job_file(tmp, "sweep", "research", "experiment", 400, 7200)))
    wait_for(env, sweep["job_id"], {"running"}, 60)
    time.sleep(settle_s)  # past its minimum runtime, with a few checkpoints behind it
    release = rota(env, "submit", "-f", str(job_file(tmp, "release", "nlp", "production", 40)))

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
    [stopped] = [e for e in timeline if e["type"] == "RunStopped"]
    assert stopped["data"]["reason"] == "preempted" and not stopped["data"]["forced"]
    restarts = [e for e in timeline if e["type"] == "RunStarted"]
    assert [r["data"]["attempt"] for r in restarts] == [1, 2]
    assert restarts[1]["data"]["resumed_from"] == checkpoint
    return PreemptionStory(sweep["job_id"], release["job_id"], timeline, checkpoint, stopped)


@dataclass(frozen=True)
class DrainStory:
    """What a job moved by a drain shows in its trace: the drain's plan, the acknowledgement
    the coordinator accepted, the stop, and its runs' starts."""

    requested: dict[str, Any]
    ack: dict[str, Any]
    stopped: dict[str, Any]
    starts: list[dict[str, Any]]


def moved_by_drain(env: dict[str, str], job_id: str, timeout: float) -> DrainStory:
    """Waits for the job's second run, then checks the move: one plan with the reason `drain`,
    stopped `drained` without force, resumed from the checkpoint it acknowledged."""
    deadline = time.monotonic() + timeout
    job = rota(env, "job", job_id)
    while job["attempts"] < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        job = rota(env, "job", job_id)
    assert job["attempts"] == 2, job
    timeline = rota(env, "trace", job_id)["timeline"]
    [requested] = [e for e in timeline if e["type"] == "PreemptionRequested"]
    assert requested["data"]["reason"] == "drain" and "drain" in requested["summary"]
    [ack] = [e for e in timeline if e["type"] == "RunCheckpointed" and e["data"].get("notice_id")
             and "acknowledged" in e["summary"]]
    [stopped] = [e for e in timeline if e["type"] == "RunStopped"]
    assert stopped["data"]["reason"] == "drained" and not stopped["data"]["forced"]
    assert stopped["data"]["checkpoint_uri"] == ack["data"]["checkpoint_uri"]
    starts = [e for e in timeline if e["type"] == "RunStarted"]
    assert starts[1]["data"]["resumed_from"] == ack["data"]["checkpoint_uri"]
    return DrainStory(requested, ack, stopped, starts)
