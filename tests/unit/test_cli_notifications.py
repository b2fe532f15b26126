"""`rota notifications` tells "nothing sent yet" from "nothing can be sent": no channel."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rota.cli import notifications
from rota.cli.main import app
from rota.contracts import messages as m
from typer.testing import CliRunner

runner = CliRunner()


def answering(channels: list[str], rows: list[dict[str, Any]]) -> Any:
    def call(settings: Any, subject: str, query: m.ListNotifications) -> Any:
        assert query.with_channels
        return {"channels": channels, "notifications": rows}
    return call


def test_no_channel_configured_is_said_with_how_to_configure_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notifications, "call", answering([], []))
    result = runner.invoke(app, ["notifications"])
    assert result.exit_code == 0, result.output
    assert "no notifications yet" not in result.output
    assert "no channel is configured" in result.output
    for variable in ("ROTA_SLACK_TOKEN", "ROTA_SLACK_WEBHOOK_URL", "ROTA_SMTP_HOST"):
        assert variable in result.output


def test_with_a_channel_and_nothing_sent_it_is_no_notifications_yet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notifications, "call", answering(["slack"], []))
    result = runner.invoke(app, ["notifications"])
    assert result.exit_code == 0, result.output
    assert "no notifications yet" in result.output and "no channel" not in result.output
    as_json = runner.invoke(app, ["notifications", "--json"])
    assert json.loads(as_json.stdout) == []  # the list, as before
