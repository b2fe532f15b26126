"""The README path: `rota up` on embedded defaults, then submit, list and cancel via the CLI."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.up import ROTA, rota

pytestmark = pytest.mark.e2e


def test_submit_list_cancel_through_the_cli(
    rota_up: subprocess.Popen[bytes], env: dict[str, str]
) -> None:
    submit = ["submit", "--team", "nlp", "--user", "alice", "--queue", "training",
              "--flavor", "h100", "--gpus", "16", "--name", "e2e-train", "--resumable",
              "--submission-id", "e2e-1"]
    first = rota(env, *submit)
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.strip()
    assert len(job_id) == 36
    again = rota(env, *submit, "--json")
    assert again.returncode == 0
    duplicate = json.loads(again.stdout)
    assert (duplicate["job_id"], duplicate["duplicate"]) == (job_id, True)

    bad = rota(env, *submit[:-2], "--submission-id", "e2e-2", "--flavor", "tpu")
    assert bad.returncode == 2
    assert "flavor" in bad.stderr and "Traceback" not in bad.stderr

    listed = rota(env, "jobs", "--team", "nlp", "--json")
    assert listed.returncode == 0
    [row] = [r for r in json.loads(listed.stdout) if r["job_id"] == job_id]
    assert (row["gpus"], row["workers"]) == (16, 2)
    assert row["state"] in ("pending", "admitted", "running")

    cancelled = rota(env, "cancel", job_id[:13], "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["state"] == "cancelled"
    shown = rota(env, "job", job_id, "--json")
    assert json.loads(shown.stdout)["state"] == "cancelled"
    queues = rota(env, "queues", "--json")
    assert queues.returncode == 0
    assert all(r["running_jobs"] == 0 for r in json.loads(queues.stdout) if r["team"] == "nlp")


def one_job_each(env: dict[str, str], name: str) -> dict[str, str]:
    """A small job for nlp and one for vision: team -> job id."""
    submitted = {}
    for team, user in (("nlp", "alice"), ("vision", "carol")):
        done = rota(env, "submit", "--team", team, "--user", user, "--queue", "experiment",
                    "--flavor", "a100", "--gpus", "1", "--name", f"{name}-{team}")
        assert done.returncode == 0, done.stderr
        submitted[team] = done.stdout.strip()
    return submitted


def test_team_credentials_see_and_touch_only_their_own_team(
    rota_up: subprocess.Popen[bytes], env: dict[str, str], home: Path
) -> None:
    submitted = one_job_each(env, "scoped")
    issued = rota(env, "creds", "issue", "--team", "nlp", "--user", "alice",
                  "--out", str(home / "nlp.creds"), "--json")
    assert issued.returncode == 0, issued.stderr
    as_nlp = {**env, "ROTA_NATS_CREDS": json.loads(issued.stdout)["creds"]}

    listed = rota(as_nlp, "jobs", "--json")
    assert listed.returncode == 0, listed.stderr
    teams = {row["team"] for row in json.loads(listed.stdout)}
    assert teams == {"nlp"} and submitted["nlp"] in {r["job_id"] for r in json.loads(listed.stdout)}
    asked = rota(as_nlp, "jobs", "--team", "vision", "--json")
    assert asked.returncode == 2 and "UNAUTHORISED" in asked.stderr + asked.stdout
    theirs = rota(as_nlp, "job", submitted["vision"], "--json")
    assert theirs.returncode == 2 and "JOB_NOT_FOUND" in theirs.stderr + theirs.stdout
    cancel = rota(as_nlp, "cancel", submitted["vision"])
    assert cancel.returncode != 0
    still = rota(env, "job", submitted["vision"], "--json")
    assert json.loads(still.stdout)["state"] != "cancelled"
    mine = rota(as_nlp, "cancel", submitted["nlp"], "--json")
    assert mine.returncode == 0, mine.stderr
    forged = rota(as_nlp, "submit", "--team", "vision", "--user", "carol", "--queue",
                  "experiment", "--flavor", "a100", "--gpus", "1", "--name", "forged")
    # The CLI refuses a subject the team's credentials may not publish before the server would.
    assert forged.returncode != 0 and "needs the admin's credentials" in forged.stderr + forged.stdout


def test_a_team_watches_its_own_jobs_live_and_no_one_elses(
    rota_up: subprocess.Popen[bytes], env: dict[str, str], home: Path
) -> None:
    issued = rota(env, "creds", "issue", "--team", "nlp", "--out", str(home / "watch.creds"),
                  "--json")
    assert issued.returncode == 0, issued.stderr
    as_nlp = {**env, "ROTA_NATS_CREDS": json.loads(issued.stdout)["creds"]}
    theirs = rota(as_nlp, "watch", "--team", "vision", "--for", "1")
    assert theirs.returncode == 2 and "--team" in theirs.stderr

    watcher = subprocess.Popen([ROTA, "watch", "--json", "--for", "20"], env=as_nlp,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watcher.stderr is not None
        assert "watching rota.feed.nlp.>" in watcher.stderr.readline()  # subscribed
        jobs = one_job_each(env, "watched")
        out, _ = watcher.communicate(timeout=40)
    finally:
        watcher.kill()
    events = [json.loads(line) for line in out.splitlines()]
    mine = [e["type"] for e in events if e["job_id"] == jobs["nlp"]]
    assert mine[:1] == ["JobSubmitted"] and "AllocationGranted" in mine, mine
    assert jobs["vision"] not in out
    assert all(e["job_id"] is None or e["data"].get("team", "nlp") == "nlp" for e in events)


def test_sigterm_stops_everything_within_10_seconds(
    rota_up: subprocess.Popen[bytes], env: dict[str, str], home: Path
) -> None:
    rota_up.send_signal(signal.SIGTERM)
    try:
        code = rota_up.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"rota up did not stop within 10 s: {(home / 'up.log').read_text()}")
    assert code == 0
    assert "rota up: stopped in" in (home / "up.log").read_text()
    assert not (home / "run" / "endpoints.json").exists()
    after = rota(env, "jobs")
    assert after.returncode == 1 and "rota up" in after.stderr
