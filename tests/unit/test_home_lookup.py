"""Every command finds the `.rota` of `rota up` from a directory below it, as git finds .git."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rota.cli.main import app
from rota.settings import Settings, get_settings
from typer.testing import CliRunner


@pytest.fixture(autouse=True)
def _unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ROTA_HOME", "ROTA_NATS_URL", "ROTA_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()


def test_the_home_is_the_nearest_dot_rota_above_the_working_directory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".rota").mkdir(parents=True)
    deeper = project / "src" / "models"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)
    assert Settings().home.resolve() == (project / ".rota").resolve()
    (deeper / ".rota").mkdir()  # the nearest wins
    assert Settings().home.resolve() == (deeper / ".rota").resolve()


def test_rota_home_set_wins_over_any_dot_rota(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    (tmp_path / ".rota").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROTA_HOME", str(tmp_path / "elsewhere"))
    assert Settings().home == tmp_path / "elsewhere"


def test_without_any_dot_rota_the_home_is_here_and_the_error_says_how_to_point_at_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings().home == Path(".rota")
    result = CliRunner().invoke(app, ["jobs", "--json"])
    assert result.exit_code == 1, result.output
    message = json.loads(result.stdout)["error"]["message"]
    assert "rota up" in message and "ROTA_HOME" in message
