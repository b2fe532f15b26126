"""The CLI at 80 columns: `rota jobs`, `rota preemptions`, `rota up` and the demo's live view
print one row per line, with short ids that every command takes back; `-o wide` adds the
long columns uncut, and `--json` has every field."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rota.cli import jobs as jobs_cli
from rota.cli import operations
from rota.cli.columns import Column, render
from rota.cli.main import app
from rota.cli.up import print_summary
from rota.demo.runner import _view
from rota.demo.story import Story
from rota.formats import age
from rota.ids import new_id, short_id
from rota.settings import get_settings
from typer.testing import CliRunner

WIDTH = 80
runner = CliRunner()
LONG_URI = "file:///home/researcher/experiments/llm-pretrain/checkpoints/attempt-3/step-00042000.pt"


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("ROTA_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()


def job_row(**fields: Any) -> dict[str, Any]:
    submitted = (datetime.now(UTC) - timedelta(minutes=7)).isoformat()
    return {"job_id": new_id(), "name": "llm-pretrain-with-a-very-long-descriptive-name",
            "team": "computer-vision-research", "user_name": "alice", "queue": "production",
            "flavor": "h100", "gpus": 128, "state": "pending", "submitted_at": submitted,
            "resume_from": LONG_URI, "detail": None,
            "wait": {"reasons": [{"code": "WAITING_FOR_PREEMPTION", "message": "m"}]}, **fields}


def assert_fits(text: str, ids: list[str]) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert all(len(line) <= WIDTH for line in lines), "\n".join(x for x in lines if len(x) > WIDTH)
    for full in ids:
        assert short_id(full) in text  # whole, so it can be pasted back
        assert full not in text        # and not the 36-character id, which would not fit
    return lines


def test_rota_jobs_prints_one_line_per_job_with_its_short_id(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [job_row(), job_row(state="running", wait=None, name="x")]
    monkeypatch.setattr(jobs_cli, "call", lambda *args: rows)
    result = runner.invoke(app, ["jobs"])
    assert result.exit_code == 0, result.output
    lines = assert_fits(result.stdout, [r["job_id"] for r in rows])
    assert len(lines) == 1 + len(rows)
    assert [line.split()[0] for line in lines[1:]] == [short_id(r["job_id"]) for r in rows]
    assert "7m" in lines[1] and "…" in lines[1]  # its age; the long name cut, not wrapped


def test_rota_jobs_wide_and_json_keep_every_long_field(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [job_row()]
    monkeypatch.setattr(jobs_cli, "call", lambda *args: rows)
    wide = runner.invoke(app, ["jobs", "-o", "wide"])
    assert wide.exit_code == 0, wide.output
    [_, line] = wide.stdout.splitlines()
    # The WHY column says the primary reason in words; `--json` keeps its code.
    for whole in (rows[0]["job_id"], LONG_URI, rows[0]["name"], "waiting for preempted runs to save and stop"):
        assert whole in line
    assert json.loads(runner.invoke(app, ["jobs", "--json"]).stdout) == rows


def plan(*victims: dict[str, Any]) -> dict[str, Any]:
    return {"plan_id": new_id(), "preemptor_job_id": new_id(), "preemptor_queue": "production",
            "state": "completed", "victims": list(victims)}


def victim(**fields: Any) -> dict[str, Any]:
    return {"job_id": new_id(), "job_name": "research-sweep-with-a-long-name", "run_id": new_id(),
            "outcome": "forced", "acked_at": None, "lost_gpu_seconds": 10.3,
            "checkpoint_uri": LONG_URI, **fields}


def test_rota_preemptions_prints_one_line_per_victim_with_short_ids(
        monkeypatch: pytest.MonkeyPatch) -> None:
    acked_at = (datetime.now(UTC) - timedelta(minutes=4, seconds=5)).isoformat()
    acked = victim(outcome="acked", acked_at=acked_at, lost_gpu_seconds=0)
    plans = [plan(acked, victim()), plan()]
    monkeypatch.setattr(operations, "call", lambda *args: plans)
    result = runner.invoke(app, ["preemptions"])
    assert result.exit_code == 0, result.output
    ids = [p["preemptor_job_id"] for p in plans] + [v["job_id"] for v in plans[0]["victims"]]
    lines = assert_fits(result.stdout, ids)
    assert len(lines) == 1 + 3  # two victims, and the plan that has none
    assert " 4m " in lines[1] and "10.3 GPU-s" in lines[2]  # ACKED: an age, as AGE columns are
    wide = runner.invoke(app, ["preemptions", "-o", "wide"]).stdout
    assert LONG_URI in wide and plans[0]["plan_id"] in wide


def test_rota_preemptions_wide_shows_a_share_victim_as_its_fraction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plans = [plan(victim(gpus=0, gpu_share=0.5))]
    monkeypatch.setattr(operations, "call", lambda *args: plans)
    wide = runner.invoke(app, ["preemptions", "-o", "wide"])
    assert wide.exit_code == 0, wide.output
    assert "0.5 of 1" in wide.stdout


def test_rota_up_prints_one_line_per_service_and_the_log_paths_only_when_wide(
        capsys: pytest.CaptureFixture[str]) -> None:
    services = {name: {"state": "ready", "pid": 12345 + i,
                       "metrics": f"http://127.0.0.1:{45000 + i}/metrics",
                       "log": f"/tmp/rota-home/logs/{name}.log"}
                for i, name in enumerate(("submission", "ledger", "scheduler", "preemption",
                                          "notifier", "executor"))}
    summary = {"nats_url": "nats://127.0.0.1:4222", "nats": "embedded", "nats_auth": "on",
               "database_url": "postgresql://postgres@/rota?host=/tmp/rota-home/pg",
               "database": "embedded", "executor": "local", "services": services}
    print_summary(summary)
    lines = assert_fits(capsys.readouterr().err, [])
    table = [line for line in lines if line.split()[0] in services]
    assert len(table) == len(services)
    assert all(info["metrics"] in "\n".join(lines) for info in services.values())
    assert "/tmp/rota-home/logs/<service>.log" in lines[3]
    print_summary(summary, wide=True)
    wide = capsys.readouterr().err
    assert all(info["log"] in wide for info in services.values())


def test_the_demo_view_keeps_every_job_and_event_on_one_line() -> None:
    story = Story()
    for n, job in enumerate(story.jobs.values()):
        job.state, job.attempts = ("checkpointing" if n % 2 else "running"), 2
        job.why = "WAITING_FOR_PREEMPTION: " + "a reason with a long message " * 4
        job.resumed_from = None if n % 2 else LONG_URI
    story.log = [f"{t:6.1f}s  a-victim acknowledged with checkpoint {LONG_URI}"
                 for t in range(3)]
    out = io.StringIO()
    Console(file=out, width=WIDTH, color_system=None).print(_view(story, 12.5))
    lines = assert_fits(out.getvalue(), [])
    for job in story.jobs.values():
        assert sum(job.name in line for line in lines) == 1
    assert sum("acknowledged with checkpoint" in line for line in lines) == 3


def test_whole_columns_are_never_cut_and_the_others_share_what_is_left() -> None:
    columns = [Column("ID", whole=True), Column("A"), Column("B")]
    [_, line] = render(columns, [["0123456789ab", "a" * 50, "b" * 10]], wide=False, width=40)
    assert line.startswith("0123456789ab  ") and len(line) <= 40
    assert "b" * 10 in line and "…" in line  # the short column kept whole, the long one cut


def test_age_is_short() -> None:
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    assert [age(now - timedelta(seconds=s), now) for s in (5, 125, 7300, 200_000)] == [
        "5s", "2m", "2h", "2d"]


def test_rota_queues_shows_a_share_as_its_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"queue": "experiment", "team": "research", "flavor": "t4", "pending_jobs": 1,
             "pending_gpus": 0.5, "running_jobs": 3, "gpus_in_use": 1.5, "borrowed_gpus": 2,
             "oldest_pending_at": None, "quota": 4}]
    monkeypatch.setattr(jobs_cli, "call", lambda *args: rows)
    result = runner.invoke(app, ["queues"])
    assert result.exit_code == 0, result.output
    assert "(0.5" in result.stdout and "1.5/4" in result.stdout  # 80 columns wrap "GPUs)"


def allocation_row(**fields: Any) -> dict[str, Any]:
    granted = (datetime.now(UTC) - timedelta(minutes=3)).isoformat()
    return {"run_id": new_id(), "job_id": new_id(), "team": "computer-vision-research",
            "queue": "production", "gpus": 64, "borrowed_gpus": 16,
            "placement": [{"node": f"gpu-node-{n:03d}.rack-a.zone-1", "gpus": list(range(8))}
                          for n in range(8)],
            "granted_at": granted, **fields}


def test_rota_allocations_prints_one_line_per_run_in_80_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [allocation_row(), allocation_row(gpus=8, borrowed_gpus=0)]
    monkeypatch.setattr(operations, "call", lambda *args: {"allocations": rows})
    result = runner.invoke(app, ["allocations"])
    assert result.exit_code == 0, result.output
    lines = assert_fits(result.stdout, [r["job_id"] for r in rows])
    assert len(lines) == 1 + len(rows)
    assert "3m" in lines[1]  # the grant's age, as `rota jobs` prints ages
    wide = runner.invoke(app, ["allocations", "-o", "wide"]).stdout
    assert all(r["run_id"] in wide and r["job_id"] in wide for r in rows)
    assert "gpu-node-007.rack-a.zone-1[0,1,2,3,4,5,6,7]" in wide


def test_rota_queues_prints_one_line_per_queue_and_team_in_80_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    oldest = (datetime.now(UTC) - timedelta(minutes=42)).isoformat()
    rows = [{"queue": queue, "team": "computer-vision-research", "flavor": "h100-80gb-sxm",
             "pending_jobs": 12, "pending_gpus": 96, "running_jobs": 30, "gpus_in_use": 240,
             "borrowed_gpus": 16, "oldest_pending_at": oldest, "quota": 256,
             "budget_gpu_hours": 10_000.0, "budget_used_gpu_hours": 1_234.0,
             "budget_resets_at": "2026-12-14T00:00:00+00:00"}
            for queue in ("production", "training", "experiment")]
    monkeypatch.setattr(jobs_cli, "call", lambda *args: rows)
    result = runner.invoke(app, ["queues"])
    assert result.exit_code == 0, result.output
    lines = assert_fits(result.stdout, [])
    assert len(lines) == 1 + len(rows)
    assert all(cell in lines[1] for cell in ("production", "12 (96)", "240/256", "42m", "12%"))
    wide = runner.invoke(app, ["queues", "-o", "wide"]).stdout
    assert "computer-vision-research" in wide and "1,234/10,000" in wide
    assert "2026-12-14" in wide and oldest[:19].replace("T", " ") in wide
