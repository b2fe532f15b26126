"""CLI behaviour that needs no server: exit codes and messages that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rota.cli.main import app
from rota.settings import get_settings
from typer.testing import CliRunner

runner = CliRunner()


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ROTA_NATS_URL", raising=False)
    monkeypatch.delenv("ROTA_DATABASE_URL", raising=False)
    monkeypatch.setenv("ROTA_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()


PHILLY_HEAD = Path(__file__).parents[1] / "data" / "philly-head-800.csv"
BASE = ["submit", "--team", "nlp", "--user", "alice", "--queue", "training", "--flavor", "h100",
        "--name", "x"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--gpus", "0"], "gpus"),
        (["--workers", "0", "--gpus-per-worker", "8"], "workers"),
        (["--gpus", "13"], "gpus"),
        (["--label", "novalue"], "labels"),
        (["--rack", "sometimes"], "rack"),
        (["--workers", "2", "--gpus-per-worker", "8", "--topology-required", "Not A Level"], "topology.required"),
        (["--gpu-share", "0.3"], "gpu_share"),
        (["--gpu-share", "0.5", "--gpus", "2"], "gpu_share"),
        (["--gpu-share", "0.5", "--workers", "2"], "gpu_share"),
    ],
)
def test_invalid_submit_exits_2_and_names_the_field(args: list[str], field: str) -> None:
    result = runner.invoke(app, [*BASE, *args, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["field"] == field


def test_missing_required_flag_names_it() -> None:
    result = runner.invoke(app, ["submit", "--team", "nlp", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["field"] in {"name", "user", "queue", "flavor"}


def test_job_file_is_read_and_flags_override(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: from-file\nteam: nlp\nuser: alice\nqueue: training\nflavor: h100\n"
                   "workers: 0\n")
    result = runner.invoke(app, ["submit", "-f", str(job), "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["field"] == "workers"


def test_commands_without_a_running_rota_fail_with_one_line() -> None:
    for args in (["jobs"], ["job", "0123456789ab"], ["queues"], [*BASE, "--gpus", "8"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert "rota up" in result.output
        assert "Traceback" not in result.output


def test_config_check(tmp_path: Path) -> None:
    from rota.config.loader import example_text

    good = tmp_path / "rota.yaml"
    good.write_text(example_text())
    ok = runner.invoke(app, ["config", "check", str(good), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["capacity"] == {"h100": 32, "a100": 32}
    bad = tmp_path / "bad.yaml"
    bad.write_text(example_text().replace("quota: {h100: 16, a100: 8}", "quota: {h100: -1}"))
    result = runner.invoke(app, ["config", "check", str(bad)])
    assert result.exit_code == 2
    assert "teams.nlp.quota.h100: must be >= 0" in result.output


def test_a_share_reads_as_a_fraction_of_one_gpu() -> None:
    from rota.cli.jobs import build_spec, gpus_shown

    assert gpus_shown({"gpus": 1, "gpu_share": 0.5}) == "0.5 of 1"
    assert gpus_shown({"gpus": 8, "gpu_share": None}) == "8"
    spec = build_spec({"name": "n", "team": "nlp", "user": "alice", "queue": "training",
                       "flavor": "h100", "gpu_share": 0.25, "submission_id": "s-1"})
    assert (spec.workers, spec.gpus_per_worker, spec.share) == (1, 1, 1)


@pytest.mark.parametrize(
    ("args", "words", "field"),
    [
        (["--shares"], "--shares needs --hetero", "shares"),
        (["--hetero", "--elastic-draw", "3"], "--elastic-draw needs --elastic", "elastic_draw"),
    ],
)
def test_convert_trace_refuses_a_switch_without_the_one_it_needs(
    tmp_path: Path, args: list[str], words: str, field: str
) -> None:
    out = tmp_path / "t.csv"
    command = ["convert-trace", "--trace", str(PHILLY_HEAD), "--out", str(out), *args]
    result = runner.invoke(app, command)
    assert result.exit_code == 2
    assert words in result.output
    as_json = runner.invoke(app, [*command, "--json"])
    assert as_json.exit_code == 2
    error = json.loads(as_json.stdout)["error"]
    assert words in error["message"] and error["field"] == field
    assert not out.exists()


def test_convert_trace_json_counts_what_the_rules_made(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    result = runner.invoke(app, ["convert-trace", "--trace", str(PHILLY_HEAD), "--out", str(out),
                                 "--hetero", "--shares", "--elastic", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = out.read_text().splitlines()[1:]
    assert doc["ok"] and doc["out"] == str(out) and doc["jobs"] == len(rows) == 800
    assert doc["accepting_several_flavors"] == sum(1 for r in rows if "|" in r.split(",")[5])
    assert doc["shares"] == sum(1 for r in rows if r.split(",")[4] == "0.5") > 0
    assert doc["elastic"] == sum(1 for r in rows if "-" in r.split(",")[3])
    assert set(doc["quotas"]) and all(set(q) <= {"a100", "v100", "t4"} for q in doc["quotas"].values())


def test_the_replay_table_gives_each_reasons_eta_figures_a_row() -> None:
    from rich.console import Console
    from rota.cli.replay import _table

    results = [{"policy": "rota", "jobs": 10, "eta_by_reason": {
                    "QUOTA_EXCEEDED": {"coverage": 1.0, "p50": 0.25}, "FRAGMENTATION": None}},
               {"policy": "kueue", "jobs": 10, "eta_by_reason": {
                    "QUOTA_EXCEEDED": None, "FRAGMENTATION": {"coverage": 0.5, "p50": 0.75}}}]
    console = Console(width=200, record=True)
    console.print(_table(results, "t"))
    lines = console.export_text().splitlines()

    def cells(name: str) -> list[str]:
        row = next(line for line in lines if f" {name} " in line)
        return [cell for cell in row.replace("│", " ").split()][1:]

    assert cells("eta_by_reason.QUOTA_EXCEEDED.p50") == ["0.2500", "-"]
    assert cells("eta_by_reason.FRAGMENTATION.coverage") == ["-", "0.5000"]
    assert cells("jobs") == ["10", "10"]


@pytest.mark.parametrize("command", [["preemptions"], ["allocations"], ["notifications"]])
def test_a_platform_command_with_team_credentials_says_it_needs_the_admins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str]
) -> None:
    from rota.auth.keys import AuthDir

    auth = AuthDir(tmp_path / "home" / "auth").ensure()
    team_creds = auth.issue_team("nlp", "alice", tmp_path / "nlp.creds")
    monkeypatch.setenv("ROTA_NATS_CREDS", str(team_creds))
    monkeypatch.setenv("ROTA_NATS_URL", "nats://127.0.0.1:4222")
    get_settings.cache_clear()

    async def no_connection(*args: object, **kwargs: object) -> None:
        raise AssertionError("said before connecting, not after the server's refusal")

    monkeypatch.setattr("nats.connect", no_connection)
    result = runner.invoke(app, [*command, "--json"])
    assert result.exit_code == 1, result.output
    message = json.loads(result.stdout)["error"]["message"]
    assert "team nlp" in message and "admin" in message
    assert str(auth.creds_path("admin")) in message and "ROTA_NATS_CREDS" in message
    assert "violation" not in message.lower()


@pytest.mark.parametrize("command", ["job", "why", "trace", "cancel"])
@pytest.mark.parametrize("job_id", ["my-training-run", "abc", "0123456789abcdef0123456789abcdef012345"])
def test_a_malformed_job_id_says_what_one_looks_like_and_how_to_find_it(
        command: str, job_id: str) -> None:
    result = runner.invoke(app, [command, job_id, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["field"] == "job_id"
    assert "rota jobs" in error["message"] and "hex" in error["message"]
    assert "String should" not in error["message"] and "pattern" not in error["message"]


def test_rota_jobs_filters_by_user_and_name_as_squeue_u_and_n(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rota.cli import jobs
    from rota.contracts import messages as m

    asked: list[m.ListJobs] = []

    def call(settings: object, subject: str, query: m.ListJobs) -> list[object]:
        asked.append(query)
        return []

    monkeypatch.setattr(jobs, "call", call)
    result = runner.invoke(app, ["jobs", "--user", "alice", "--name", "llama-ft", "--json"])
    assert result.exit_code == 0, result.output
    assert (asked[0].user, asked[0].name) == ("alice", "llama-ft")
    bad = runner.invoke(app, ["jobs", "--user", "Alice Smith", "--json"])
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["field"] == "user"


def test_rota_jobs_searches_and_pages_as_the_consoles_job_list(monkeypatch: pytest.MonkeyPatch) -> None:
    from rota.cli import jobs
    from rota.contracts import messages as m

    asked: list[m.ListJobs] = []

    def call(settings: object, subject: str, query: m.ListJobs) -> list[object]:
        asked.append(query)
        return []

    monkeypatch.setattr(jobs, "call", call)
    result = runner.invoke(app, ["jobs", "--search", "llama", "--limit", "20", "--offset", "40", "--json"])
    assert result.exit_code == 0, result.output
    assert (asked[0].search, asked[0].limit, asked[0].offset) == ("llama", 20, 40)
    bad = runner.invoke(app, ["jobs", "--search", "llama ft", "--json"])
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["field"] == "search"
