"""`rota up` on embedded defaults brings back an embedded nats-server or PostgreSQL that is
killed -9: on the same port, socket and data, with no service restarted, and a job submitted
through the CLI afterwards is admitted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from rota.cli.stack import SERVICES

from tests.e2e.up import rota, up_log

pytestmark = pytest.mark.e2e

DEADLINE_S = 120.0
SERVICE_RESTARTED = re.compile(rf"rota up: ({'|'.join(SERVICES)}) exited")


def wait_for(what: str, check: Callable[[], bool], home: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {DEADLINE_S:.0f} s; rota up said:\n{up_log(home)}")
        time.sleep(0.5)


def nats_server(rota_up: subprocess.Popen[bytes]) -> psutil.Process:
    [server] = [p for p in psutil.Process(rota_up.pid).children(recursive=True)
                if p.name() == "nats-server" and p.status() != psutil.STATUS_ZOMBIE]
    return server


def postmaster_pid(home: Path) -> int:
    return int((home / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])


def submit_and_see_admitted(env: dict[str, str], home: Path, submission_id: str) -> None:
    """Through the CLI, retried while the services catch up (the same submission id makes a
    retry safe); then the job must be admitted (or running)."""
    submit = ["submit", "--team", "nlp", "--user", "alice", "--queue", "training",
              "--flavor", "h100", "--gpus", "8", "--name", submission_id,
              "--sim-duration", "3600", "--submission-id", submission_id]
    job_id = ""

    def submitted() -> bool:
        nonlocal job_id
        result = rota(env, *submit)
        job_id = result.stdout.strip() if result.returncode == 0 else ""
        return bool(job_id)

    wait_for(f"submitting {submission_id}", submitted, home)
    state = ""

    def admitted() -> bool:
        nonlocal state
        shown = rota(env, "job", job_id, "--json")
        state = json.loads(shown.stdout)["state"] if shown.returncode == 0 else ""
        return state in ("admitted", "running")

    wait_for(f"{submission_id} admitted (last state {state!r})", admitted, home)


def test_a_killed_nats_server_comes_back_on_the_same_port_and_data(
    rota_up: subprocess.Popen[bytes], env: dict[str, str], home: Path
) -> None:
    submit_and_see_admitted(env, home, "before-nats-kill")
    before = nats_server(rota_up)
    command = before.cmdline()
    before.send_signal(signal.SIGKILL)
    wait_for("the nats-server restart reported", lambda: (
        "rota up: embedded nats-server exited (code -9); restarted on the same port and data"
        in up_log(home)), home)
    after = nats_server(rota_up)
    assert after.pid != before.pid
    assert after.cmdline() == command  # the same port, store and everything else
    submit_and_see_admitted(env, home, "after-nats-kill")
    assert rota_up.poll() is None
    assert not SERVICE_RESTARTED.search(up_log(home)), up_log(home)


def test_a_killed_postmaster_comes_back_on_the_same_socket_and_data(
    rota_up: subprocess.Popen[bytes], env: dict[str, str], home: Path
) -> None:
    before = postmaster_pid(home)
    os.kill(before, signal.SIGKILL)
    wait_for("the PostgreSQL restart reported", lambda: (
        f"rota up: embedded PostgreSQL exited (postmaster pid {before}); restarted on the same"
        " socket and data" in up_log(home)), home)
    assert postmaster_pid(home) != before
    submit_and_see_admitted(env, home, "after-postgres-kill")
    # What was committed before the crash is still there: PostgreSQL recovered its WAL.
    listed = rota(env, "jobs", "--team", "nlp", "--json")
    assert listed.returncode == 0, listed.stderr
    names = {row["name"] for row in json.loads(listed.stdout)}
    assert {"before-nats-kill", "after-nats-kill", "after-postgres-kill"} <= names
    assert rota_up.poll() is None
    assert not SERVICE_RESTARTED.search(up_log(home)), up_log(home)


def test_it_still_stops_within_10_seconds(
    rota_up: subprocess.Popen[bytes], home: Path
) -> None:
    rota_up.send_signal(signal.SIGTERM)
    try:
        code = rota_up.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"rota up did not stop within 10 s: {up_log(home)}")
    assert code == 0
    assert "rota up: stopped in" in up_log(home)
