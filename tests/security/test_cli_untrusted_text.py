"""A team's free text on the admin's terminal: every CLI command prints what the services
answer (job names, reasons, checkpoint URIs, recipients, dead letters' causes) with no
escape sequence, OSC 8 link, bidi override or C1 control left in, and with Rich markup shown
as text, not obeyed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from rota.cli import client, deadletter, jobs, notifications, operations, record
from rota.cli.main import app
from rota.cli.output import InvalidInput
from rota.config.loader import EXAMPLE_NAME
from rota.contracts import subjects as s
from typer.testing import CliRunner

LINK = "\x1b]8;;http://evil\x07click\x1b]8;;\x07"
EVIL = f"{LINK}\x1b[2J\u202e\x9b2J[bold red]x[/]"
SHOWN = "[bold red]x[/]"
"""The markup in EVIL, as the terminal must show it: as text."""
TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
JOB_ID = "01a00000-0000-7000-8000-000000000001"

JOB = {"job_id": JOB_ID, "short_id": JOB_ID[-12:], "name": EVIL, "team": "nlp",
       "user_name": EVIL, "queue": "training", "flavor": "h100", "workers": 1,
       "gpus_per_worker": 8, "gpus": 8, "state": "pending", "submission_id": "s-1",
       "submitted_at": "2026-12-01T12:00:00+00:00", "resume_from": EVIL, "detail": EVIL,
       "wait": {"reasons": [{"code": "QUOTA", "message": EVIL, "details": {}}], "eta": None,
                "position": 1}}
PLAN = {"plan_id": "p-1", "preemptor_job_id": JOB_ID, "preemptor_queue": "production",
        "state": "completed", "reason": EVIL, "role": "caused", "outcome": EVIL,
        "requested_at": "2026-12-01T12:00:00", "victims": [
            {"job_id": JOB_ID, "job_name": EVIL, "team": "nlp", "gpus": 8, "outcome": EVIL,
             "checkpoint_uri": EVIL, "lost_gpu_seconds": 0.0}]}
NOTIFICATION = {"created_at": "2026-12-01T12:00:00", "kind": EVIL, "recipient": EVIL,
                "channel": "email", "status": "failed", "attempts": 3, "job_id": JOB_ID,
                "last_error": EVIL, "sent_at": None, "next_attempt_at": None}


def answer(subject: str, data: BaseModel) -> Any:
    """What a team's free text looks like coming back from each service."""
    if subject == s.API_JOBS_LIST:
        return [JOB]
    if subject == s.API_JOB_GET:
        return JOB
    if subject == s.API_JOB_WHY:
        return {**JOB, "reasons": JOB["wait"]["reasons"], "eta": EVIL, "summary": EVIL,
                "factors": {"age": 1.0}}
    if subject == s.API_JOB_TRACE:
        return {"job": JOB, "timeline": [{"at": "2026-12-01T12:00:00", "source": EVIL,
                                          "summary": EVIL, "type": "JobSubmitted"}],
                "decisions": [], "preemptions": [PLAN], "trace_id": EVIL}
    if subject == s.API_QUEUES_SUMMARY:
        return [{"queue": "training", "team": EVIL, "flavor": EVIL, "pending_jobs": 1,
                 "pending_gpus": 8, "running_jobs": 0, "gpus_in_use": 0, "quota": 8,
                 "borrowed_gpus": 0, "oldest_pending_at": EVIL}]
    if subject == s.PREEMPTION_PLANS:
        return [PLAN]
    if subject == s.LEDGER_ALLOCATIONS:
        return {"allocations": [{"run_id": EVIL, "job_id": JOB_ID, "team": EVIL, "queue": "training",
                                 "gpus": 8, "borrowed_gpus": 0, "granted_at": EVIL,
                                 "placement": [{"node": EVIL, "gpus": [0, 1]}]}]}
    if subject == s.NOTIFICATIONS_LIST:
        if getattr(data, "with_channels", False):
            return {"notifications": [NOTIFICATION], "channels": [EVIL]}
        return [NOTIFICATION]
    if subject.startswith(s.SYS_DEADLETTER):
        return [{"created_at": "2026-12-01T12:00:00", "service": "submission",
                 "consumer": EVIL, "subject": EVIL, "stream_seq": 1, "deliveries": 5,
                 "error_type": EVIL, "error": EVIL}]
    if subject.startswith(s.API_CANCEL):
        raise InvalidInput(f"no job {EVIL}", "job_id")
    raise AssertionError(f"unexpected {subject}")


@pytest.fixture(autouse=True)
def services(monkeypatch: pytest.MonkeyPatch) -> None:
    async def request(settings: Any, subject: str, data: BaseModel) -> Any:
        return answer(subject, data)

    def call(settings: Any, subject: str, data: BaseModel) -> Any:
        return answer(subject, data)

    for module in (jobs, operations, notifications):
        monkeypatch.setattr(module, "call", call)
    for module in (client, record, deadletter):
        monkeypatch.setattr(module, "request", request)


@pytest.mark.parametrize("args", [["jobs"], ["jobs", "-o", "wide"], ["job", JOB_ID],
                                  ["why", JOB_ID], ["trace", JOB_ID], ["queues"],
                                  ["preemptions", "-o", "wide"], ["allocations"],
                                  ["notifications", "--failed"], ["deadletter"],
                                  ["cancel", JOB_ID]])
def test_a_teams_text_reaches_the_terminal_inert(args: list[str]) -> None:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    output = result.stdout + result.stderr
    assert result.exit_code in (0, 2), output
    assert TERMINAL_CONTROLS.search(output) is None, repr(output)
    assert SHOWN in output, output  # the markup is text, not a style


def test_config_check_shows_a_rules_pattern_whole(tmp_path: Path) -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "packages/contracts/src/rota/config" / EXAMPLE_NAME)
                         .read_text())
    doc["cluster"]["flavors"][0]["name"] = "H100"
    path = tmp_path / "rota.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["config", "check", str(path)], env={"COLUMNS": "400"})
    assert result.exit_code == 2
    assert "must match ^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$" in result.stderr, result.stderr


def test_the_helper_keeps_newlines_and_tabs_only_where_asked() -> None:
    from rota.cli.untrusted import plain, untrusted

    assert plain(EVIL) == "]8;;http://evilclick]8;;[2J2J[bold red]x[/]"
    assert untrusted(EVIL).endswith("\\[bold red]x\\[/]")
    assert plain("a\tb\nc\rd\u2028e") == "a b cd e"
    assert plain("a\tb\nc\rd", multiline=True) == "a\tb\ncd"
    assert untrusted("ends in a backslash\\").endswith("\\\\")  # cannot escape what follows
