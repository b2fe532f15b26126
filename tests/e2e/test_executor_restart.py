"""`rota up` restarted with another executor: what could not continue fails, and says why;
what waited still waits, and then runs.

The first `rota up` runs the local executor: one job runs (a real process), one waits for its
GPUs, and one with only a `sim` section, which the local executor cannot run, is held
(`NO_EXECUTOR`, which `rota why` shows and says what to do about) instead of being started
and failing. The second runs the sim executor, which cannot take over a local process: that
run fails, with the restart as its reason in `rota why` and `rota jobs`; the waiting jobs are
still pending when the new executor starts, and are then admitted and run by it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.rota_cli import REPO, ROTA, isolated_env, rota, rota_up, training_job, wait_for

pytestmark = pytest.mark.e2e

CONFIG = Path(__file__).with_name("local.rota.yaml")  # one node of 8 GPUs


def _job(tmp: Path, name: str, steps: int, declared_s: int) -> Path:
    backend = {"local": {"command": [sys.executable, "examples/train_plain.py"]}}
    return training_job(tmp, name, "nlp", "training", steps, backend=backend,
                        declared_s=declared_s)


def _sim_only_job(tmp: Path, name: str) -> Path:
    """A job the simulator plays and no other executor can run: no `local` section."""
    doc = {"name": name, "team": "nlp", "user": "nlp", "queue": "training", "flavor": "gpu",
           "workers": 1, "gpus_per_worker": 8, "resumable": True, "declared_runtime_s": 5,
           "submission_id": f"sim-{name}", "sim": {"duration_s": 5.0}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _explained(env: dict[str, str], job_id: str, code: str, timeout: float) -> dict[str, Any]:
    """`rota why --json` once its primary reason is `code`."""
    deadline = time.monotonic() + timeout
    why: dict[str, Any] = {}
    while time.monotonic() < deadline:
        why = rota(env, "why", job_id)
        if why.get("reasons") and why["reasons"][0]["code"] == code:
            return why
        time.sleep(0.5)
    raise AssertionError(f"{job_id} is not explained by {code}: {why}")


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([ROTA, *args], env=env, capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(600)  # two stacks, one after the other
def test_a_restart_with_another_executor_fails_only_the_runs_it_cannot_continue(
        tmp_path: Path) -> None:
    env = isolated_env(tmp_path / "home", COLUMNS="200")
    with rota_up(env, "local", "--config", str(CONFIG)):
        runner = rota(env, "submit", "-f", str(_job(tmp_path, "runner", 100_000, 600)))["job_id"]
        run_id = wait_for(env, runner, {"running"}, 60)["run_id"]
        waiter = rota(env, "submit", "-f", str(_job(tmp_path, "waiter", 20, 5)))["job_id"]
        time.sleep(2)  # a scheduling cycle: it waits for the runner's 8 GPUs
        assert rota(env, "job", waiter)["state"] == "pending"
        # A job no running executor can run is held, not admitted into a StartRun that fails.
        simmer = rota(env, "submit", "-f", str(_sim_only_job(tmp_path, "simmer")))["job_id"]
        why = _explained(env, simmer, "NO_EXECUTOR", 30)
        assert why["state"] == "pending" and why["position"] == 0 and why["eta"] is None
        assert ("no running executor can run this job: it has only a `sim` section; the local"
                " executor runs jobs with a `local` section (a command)") in why["reasons"][0]["message"]
        assert "rota up --executor sim" in why["reasons"][0]["message"]  # what to do
        text = _cli(env, "why", simmer)
        assert "no running executor can run it" in text and "not estimated" in text
        assert any(simmer[-12:] in line and "pending" in line
                   for line in _cli(env, "jobs").splitlines())
    exit_file = tmp_path / "home" / "runs" / f"{run_id}.0.exit"
    with rota_up(env, "sim", "--config", str(CONFIG)):
        failed = wait_for(env, runner, {"failed", "finished", "cancelled"}, 60)
        assert failed["state"] == "failed"
        reason = "the executor restarted with the sim backend; this local run cannot continue"
        assert failed["detail"] == reason
        why = rota(env, "why", runner)
        assert why["state"] == "failed" and reason in why["summary"]
        assert reason in _cli(env, "why", runner)
        assert any(runner[-12:] in line and "failed" in line and "executor restarted" in line
                   for line in _cli(env, "jobs").splitlines())
        # Its process, which no executor watches any more, has ended (the example script
        # may end on its own when NATS stops with the first stack; else it was told to
        # stop: tests/unit/executor/test_orphaned_runs.py): the launcher writes this file.
        deadline = time.monotonic() + 30
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert exit_file.exists(), "the failed run's process still runs"
        # The waiting job was never placed on the local executor: it is not failed, and the
        # new executor runs it on the GPUs the failed run gave back (the simulator plays a
        # job without a `sim` section for its declared 5 s).
        done = wait_for(env, waiter, {"finished", "failed"}, 90)
        assert done["state"] == "finished" and done["attempts"] == 1
        kinds = [e["type"] for e in rota(env, "trace", waiter)["timeline"]]
        assert "RunFailed" not in kinds and kinds.count("RunStarted") == 1
        # The held job: the simulator, which runs any job, released it, and it ran once.
        done = wait_for(env, simmer, {"finished", "failed"}, 120)
        assert done["state"] == "finished" and done["attempts"] == 1
        kinds = [e["type"] for e in rota(env, "trace", simmer)["timeline"]]
        assert "RunFailed" not in kinds and kinds.count("RunStarted") == 1
