"""`rota bench cli` on embedded defaults: a small run times every quick command as a process
of its own and says in which bytecode case it measured."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.up import ROTA

pytestmark = pytest.mark.e2e


def test_a_small_run_times_each_quick_command(env: dict[str, str], home: Path) -> None:
    out = home / "cli.json"
    done = subprocess.run([ROTA, "bench", "cli", "--runs", "2", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert json.loads(done.stdout) == figures
    commands = figures["commands"]
    assert [commands[c]["command"].split()[1] for c in ("jobs", "why", "submit", "help")] == [
        "jobs", "why", "submit", "--help"]
    for row in commands.values():
        assert row["runs"] == 2
        assert 0 < row["median_ms"] <= row["p90_ms"] <= row["max_ms"]
        assert row["import_ms"] > 0
    assert figures["python_ms"] > 0
    assert set(figures["bytecode"]) == {"PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX",
                                        "dependencies_compiled"}
