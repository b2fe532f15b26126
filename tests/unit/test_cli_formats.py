"""One format for ids, times and scores in every command: the same job reads the same in
`rota jobs`, `rota trace`, `rota preemptions`, `rota notifications`, `rota deadletter`,
`rota cluster nodes` and `rota watch`, and their tables keep to 80 columns."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rota.cli import cluster, deadletter, jobs, notifications, record, watch
from rota.cli.main import app
from rota.formats import age, moment, parse_time, score, short
from rota.ids import new_id, short_id
from rota.settings import get_settings
from rota_submission.explain import describe
from typer.testing import CliRunner

runner = CliRunner()
WIDTH = 80
MOMENT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
# How times were printed before there was one format: ISO's T, milliseconds, a bare clock.
OTHER_TIMES = re.compile(r"\d\dT\d\d:|:\d\d\.\d{3}|(?<![-\d] )(?<!\d)\d\d:\d\d:\d\d(?! UTC)")


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("ROTA_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()


def ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat()


def test_a_moment_is_to_the_second_in_utc_whatever_zone_it_came_in() -> None:
    assert moment("2026-12-07T18:47:07.123456+02:00") == "2026-12-07 16:47:07 UTC"
    assert moment("2026-12-07T16:47:07Z") == "2026-12-07 16:47:07 UTC"
    assert moment(datetime(2026, 12, 7, 16, 47, 7, tzinfo=timezone(timedelta(hours=-5)))) \
        == "2026-12-07 21:47:07 UTC"
    assert moment("2026-12-07T16:47:07") == "2026-12-07 16:47:07 UTC"  # no zone: UTC


@pytest.mark.parametrize("value", [None, "", "soon", 42, "2026-13-45T99:00:00Z"])
def test_what_is_not_a_time_prints_as_a_dash(value: Any) -> None:
    assert parse_time(value) is None
    assert moment(value) == "-" and age(value) == "-"


def test_an_id_is_its_last_twelve_digits_never_its_timestamp_prefix() -> None:
    first, second = new_id(), new_id()
    assert first[:8] == second[:8]  # UUIDv7s made close together share their first digits
    assert short(first) != short(second) and short(first) == first[-12:] == short_id(first)
    assert short(None) == short("") == "-"


def test_a_score_lists_the_factors_then_the_total_with_one_decimal() -> None:
    factors = {"total": 835.25, "queue": 333.333, "age": 0.6, "fairshare": 1.2,
               "quota_headroom": 500, "note": "not a number"}
    assert score(factors) == ("queue=333.3  age=0.6  fairshare=1.2  quota_headroom=500.0"
                              "  total=835.2")
    assert score(None) == score({}) == ""


def test_rota_trace_prints_short_plan_ids_moments_and_the_why_score(
        capsys: pytest.CaptureFixture[str]) -> None:
    plan_id, preemptor = new_id(), new_id()
    factors = {"queue": 1000.0, "age": 0.04, "total": 1000.04}
    result = {
        "job": {"name": "sweep", "job_id": new_id(), "state": "pending"},
        "timeline": [{"at": "2026-12-07T16:47:07.123+00:00", "source": "scheduler",
                      "summary": "waits", "type": "JobPending"}],
        "decisions": [{"decision": "hold", "factors": factors, "reasons": []}],
        "preemptions": [{"role": "suffered", "plan_id": plan_id, "preemptor_job_id": preemptor,
                         "preemptor_queue": "production", "reason": "priority",
                         "requested_at": "2026-12-07T16:47:08.5+00:00", "noticed_at": None,
                         "deadline": "2026-12-07T16:52:08+00:00", "acked_at": None,
                         "stopped_at": None, "outcome": None}],
        "notifications": [], "trace_id": "t",
    }
    record.print_record(result)
    out = re.sub(r" *\n *", " ", capsys.readouterr().out)  # prose wraps at 80: lines joined
    assert f"suffered {short_id(plan_id)} for production job {short_id(preemptor)}" in out
    assert "2026-12-07 16:47:07 UTC  scheduler" in out  # the timeline's lines are not wrapped
    assert "deadline 2026-12-07 16:52:08 UTC" in out and "noticed -" in out
    assert " ".join(f"score {score(factors)}".split()) in " ".join(out.split())
    assert not OTHER_TIMES.search(out), out


def test_rota_why_prints_its_score_and_times_in_the_same_formats(
        capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime(2026, 12, 7, 16, 0, tzinfo=UTC)
    factors = {"queue": 1000.0, "age": 0.04, "total": 1000.04}
    jobs.print_wait({"reasons": [{"code": "QUOTA_EXHAUSTED", "message": "m",
                                  "ends_at": "2026-12-07T17:00:00+00:00"}],
                     "eta": "2026-12-07T18:30:00.25+00:00", "factors": factors}, now)
    out = capsys.readouterr().out
    assert "until  2026-12-07 17:00:00 UTC" in out and "eta  2026-12-07 18:30:00 UTC" in out
    assert f"score  {score(factors)}" in out


def fits(text: str, full_ids: list[str]) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert all(len(line) <= WIDTH for line in lines), "\n".join(x for x in lines if len(x) > WIDTH)
    for full in full_ids:
        assert short_id(full) in text and full not in text
    return lines


def notification(**fields: Any) -> dict[str, Any]:
    return {"created_at": ago(minutes=12), "kind": "preemption_notice",
            "recipient": "a-researcher-with-a-long-address@computer-vision.example.org",
            "channel": "email", "status": "retrying", "attempts": 3, "job_id": new_id(),
            "sent_at": None, "next_attempt_at": ago(minutes=-2),
            "last_error": "SMTP 451: " + "temporary failure " * 6, **fields}


def test_rota_notifications_is_one_line_each_in_80_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [notification(), notification(status="sent", sent_at=ago(minutes=11))]
    monkeypatch.setattr(notifications, "call",
                        lambda *args: {"channels": ["email"], "notifications": rows})
    result = runner.invoke(app, ["notifications"])
    assert result.exit_code == 0, result.output
    lines = fits(result.stdout, [r["job_id"] for r in rows])
    assert len(lines) == 1 + len(rows) and "12m" in lines[1]
    failed = runner.invoke(app, ["notifications", "--failed"]).stdout
    assert len(fits(failed, [])) == 1 + len(rows) and "SMTP" in failed
    assert "SMTP 451: " + "temporary failure " * 5 in runner.invoke(
        app, ["notifications", "--failed", "-o", "wide"]).stdout
    wide = runner.invoke(app, ["notifications", "-o", "wide"]).stdout
    assert all(r["job_id"] in wide or short_id(r["job_id"]) in wide for r in rows)
    assert len(MOMENT.findall(wide)) == 2 * len(rows)  # CREATED and SENT / NEXT


def test_rota_deadletter_is_one_line_each_in_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    row = {"created_at": ago(hours=3), "consumer": "scheduler-intake-with-a-long-name",
           "subject": "rota.evt.job.pending.computer-vision-research", "stream_seq": 123456,
           "deliveries": 5, "error_type": "ValidationError", "error": "x" * 200}

    async def gather(settings: Any, services: list[str],
                     limit: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
        return [{"service": "scheduler", **row}], {}

    monkeypatch.setattr(deadletter, "_gather", gather)
    result = runner.invoke(app, ["deadletter"])
    assert result.exit_code == 0, result.output
    lines = fits(result.stdout, [])
    assert len(lines) == 2 and lines[1].startswith("3h ") and "…" in lines[1]
    wide = runner.invoke(app, ["deadletter", "-o", "wide"]).stdout
    assert "x" * 200 in wide and MOMENT.search(wide)


def test_rota_cluster_nodes_is_one_line_each_with_short_ids_and_moments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[dict[str, Any]] = [{"job_id": new_id(), "team": "computer-vision-research", "gpus": 4, "draining": True}
            for _ in range(3)]
    nodes = [{"node": "gpu-node-001", "flavor": "h100", "gpus": 8, "state": "draining",
              "deadline": "2026-12-07T18:00:00+00:00", "reason": "kernel upgrade", "runs": runs},
             {"node": "gpu-node-002", "flavor": "h100", "gpus": 8, "state": "ready",
              "deadline": None, "reason": None, "runs": []}]
    monkeypatch.setattr(cluster, "call", lambda *args: {"nodes": nodes})
    result = runner.invoke(app, ["cluster", "nodes"])
    assert result.exit_code == 0, result.output
    lines = fits(result.stdout, [])
    assert len(lines) == 3 and "draining until 2026-12-07 18:00:00 UTC" in lines[1]
    wide = runner.invoke(app, ["cluster", "nodes", "-o", "wide"]).stdout
    assert all(short_id(r["job_id"]) in wide for r in runs)


def test_rota_watch_prints_an_event_with_a_moment_and_a_short_id() -> None:
    job_id = new_id()
    line = watch._line({"occurred_at": "2026-12-07T16:47:07.5+00:00", "type": "PreemptionNoticed",
                        "job_id": job_id, "data": {"deadline": "2026-12-07T16:52:07+00:00"}})
    assert line.startswith("2026-12-07 16:47:07 UTC  PreemptionNoticed")
    assert short_id(job_id) in line and "save by 2026-12-07 16:52:07 UTC" in line


def test_a_job_out_of_line_has_no_position_in_why_or_trace(
        capsys: pytest.CaptureFixture[str]) -> None:
    reason = {"code": "NO_EXECUTOR", "message": "no running executor can run this job"}
    jobs.print_wait({"reasons": [reason], "eta": None, "position": 0, "flavor": "gpu"},
                    datetime.now(UTC))
    assert "position" not in capsys.readouterr().out
    line = describe("JobPending", {"reasons": [reason], "position": 0}, "j")
    assert "out of line" in line and "position" not in line
    assert "(position 3, ETA" in describe("JobPending", {"reasons": [reason], "position": 3,
                                                         "eta": "2026-12-07T18:00:00Z"}, "j")
