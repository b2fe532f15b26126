"""The `rota` script's quick start (rota.cli.entry): a command runs as the only one of an app
with the whole command line's settings, importing only what it needs.

The shortcut beside the plain path: every command's and group's help, a table, a usage
error and an invalid input come out the same through both. And, in a clean interpreter, the
quick commands reach their request without loading what only other commands need."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from rota.cli import jobs as jobs_cli
from rota.cli.entry import COMMANDS, GROUPS, command_app
from rota.cli.main import app
from typer.testing import CliRunner

# Modules that only other commands need (`up`, `bench`, `cluster`, `creds`, `demo`, `replay`,
# `migrate`), or that nothing of the CLI needs (aiohttp: nats-py over websockets).
HEAVY = ("aiohttp", "rota.cli.bench", "rota.cli.stack", "rota.cli.running", "rota.cli.up",
         "rota.cli.cluster", "rota.cli.creds", "rota.cli.replay", "rota.demo", "rota.embedded",
         "rota.bench", "rota.db", "rota.k8s", "rota.auth.keys", "rota.auth.permissions",
         "rota_replay", "matplotlib", "sqlalchemy", "alembic", "faststream", "kubernetes_asyncio",
         "pgserver", "psutil", "rich.progress")


def _help_paths() -> list[list[str]]:
    """Every command and group of the tables, and every command of those groups."""
    whole = typer.main.get_command(app)
    assert isinstance(whole, typer.main.TyperGroup)
    paths = [[name] for name in (*COMMANDS, *GROUPS)]
    for group in GROUPS:
        sub = whole.commands[group]
        assert isinstance(sub, typer.main.TyperGroup)
        paths += [[group, name] for name in sub.commands]
    return paths


def _run(target: typer.Typer, args: list[str]) -> tuple[int, str, str]:
    done = CliRunner().invoke(target, args, prog_name="rota", env={"COLUMNS": "120"})
    return done.exit_code, done.stdout, done.stderr


@pytest.mark.parametrize("path", _help_paths(), ids=" ".join)
def test_every_command_s_help_is_the_whole_command_line_s(path: list[str]) -> None:
    one = command_app(path[0])
    assert one is not None
    assert _run(one, [*path, "--help"]) == _run(app, [*path, "--help"])


def test_names_outside_the_tables_run_the_whole_command_line() -> None:
    for name in ("", "--help", "config", "migrate", "contracts", "jbos"):
        assert command_app(name) is None
    whole = typer.main.get_command(app)
    assert isinstance(whole, typer.main.TyperGroup)
    # The tables and main.py's own commands are the whole command line, nothing twice.
    assert sorted(whole.commands) == sorted({*COMMANDS, *GROUPS, "config", "migrate", "contracts"})


@pytest.mark.parametrize("args", [
    ["jobs", "--limit", "many"],          # a usage error (click's, exit 2)
    ["submit", "--name", "x", "--json"],  # invalid input (ours, exit 2, JSON)
    ["why"],                              # a missing argument
    ["bench", "nope"],                    # no such command of a group
], ids=" ".join)
def test_errors_and_exit_codes_are_the_same(args: list[str]) -> None:
    one = command_app(args[0])
    assert one is not None
    shortcut, plain = _run(one, args), _run(app, args)
    assert shortcut == plain
    assert plain[0] == 2


def test_a_table_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"job_id": "01a25169-794e-781f-a257-86cc414f61c7", "name": "train", "team": "vision",
             "queue": "training", "gpus": 8, "flavor": "h100", "state": "pending",
             "submitted_at": "2026-12-07T16:52:56+00:00", "user_name": "carol",
             "wait": {"reasons": [{"code": "QUOTA_EXCEEDED", "message": "over quota"}]}}]
    monkeypatch.setattr(jobs_cli, "call", lambda *args: rows)
    one = command_app("jobs")
    assert one is not None
    for args in (["jobs"], ["jobs", "-o", "wide"], ["jobs", "--json"]):
        shortcut = _run(one, args)
        assert shortcut == _run(app, args)
        assert shortcut[0] == 0 and "train" in shortcut[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_in_a_clean_interpreter(args: list[str], tmp_path: Path,
                                  nats_url: str) -> dict[str, Any]:
    """Run `rota ARGS` as the console script does, against a NATS that is not there (so the
    command goes as far as connecting), and report its exit code and loaded modules."""
    out = tmp_path / "modules.json"
    script = (
        "import json, sys\n"
        "from rota.cli.entry import main\n"
        f"sys.argv = ['rota', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "import nats.aio.transport\n"
        "loaded = [n for n, m in sys.modules.items() if m]\n"
        "import aiohttp  # still importable, for what needs it (kubernetes-asyncio)\n"
        f"json.dump({{'code': code, 'loaded': loaded,"
        f" 'transport_aiohttp': repr(nats.aio.transport.aiohttp)}}, open({str(out)!r}, 'w'))\n"
    )
    env = {"ROTA_NATS_URL": nats_url, "ROTA_HOME": str(tmp_path / ".rota"), "PATH": "/usr/bin"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert out.exists(), done.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    report["stdout"], report["stderr"] = done.stdout, done.stderr
    return report


@pytest.mark.parametrize("args", [
    ["jobs", "--json", "--limit", "50"],
    ["why", "01a25169-794e-781f-a257-86cc414f61c7", "--json"],
    ["submit", "-f", "JOB", "--json"],
], ids=lambda a: a[0])
def test_quick_commands_load_nothing_only_other_commands_need(args: list[str],
                                                              tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: a\nteam: vision\nuser: carol\nqueue: training\nflavor: h100\n"
                    "workers: 1\ngpus_per_worker: 8\n")
    args = [str(spec) if a == "JOB" else a for a in args]
    url = f"nats://127.0.0.1:{_closed_port()}"
    report = _start_in_a_clean_interpreter(args, tmp_path, url)
    # It went as far as the request: the contracts built it, nats-py tried to connect.
    assert report["code"] == 1, report
    assert json.loads(report["stdout"])["error"]["message"].startswith(f"cannot reach NATS at {url}")
    assert {"nats", "rota.contracts.messages", "rota.cli.client"} <= set(report["loaded"])
    heavy = sorted(n for n in report["loaded"] if n.startswith(HEAVY))
    assert heavy == []
    assert report["transport_aiohttp"] == "None"  # nats-py's transport has none


def test_nats_over_websockets_keeps_aiohttp(tmp_path: Path) -> None:
    report = _start_in_a_clean_interpreter(["jobs", "--json"], tmp_path,
                                           f"ws://127.0.0.1:{_closed_port()}")
    assert report["code"] == 1, report
    assert "cannot reach NATS" in json.loads(report["stdout"])["error"]["message"]
    assert "aiohttp" in report["loaded"]
    assert report["transport_aiohttp"].startswith("<module 'aiohttp'")
