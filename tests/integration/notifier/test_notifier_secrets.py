"""Secrets (the webhook URL, the Slack token, the SMTP password) never reach the log output,
the stored errors, or `rota notifications --json`, even when every channel fails."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
import typer
from pydantic import SecretStr
from rota.cli import notifications as cli
from rota.contracts import subjects
from rota.settings import get_settings
from rota_notifier.redact import Redactor
from typer.testing import CliRunner

from tests.integration.notifier.conftest import (
    SLACK_TOKEN,
    SMTP_PASSWORD,
    WEBHOOK_SECRET_PATH,
    HarnessFactory,
    make_settings,
    rows,
)
from tests.integration.notifier.fakes import FakeSlack, Reply, SmtpSink, free_port
from tests.unit.notifier import events as ev

SECRETS = (WEBHOOK_SECRET_PATH, WEBHOOK_SECRET_PATH.rsplit("/", 1)[-1], SLACK_TOKEN,
           SMTP_PASSWORD)


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
async def test_secrets_never_reach_logs_errors_or_json(
    harness: HarnessFactory, slack: FakeSlack, caplog: pytest.LogCaptureFixture,
    api_subject: Callable[[Redactor], Awaitable[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    logging.getLogger("mail.log").setLevel(logging.WARNING)  # the test's own SMTP server
    smtp = SmtpSink(user="rota", password="not-the-configured-one")
    smtp.start()
    try:
        # 1. Webhook answers 403 and quotes its own secret path; SMTP refuses the login.
        webhook = make_settings(slack, smtp, smtp_user="rota",
                                smtp_password=SecretStr(SMTP_PASSWORD))
        slack.script.append(Reply(403, f"invalid_token for {WEBHOOK_SECRET_PATH}"))
        # 2. The Web API refuses the token.
        api = make_settings(slack, smtp, transport="api")
        slack.script.append(Reply(401, {"ok": False, "error": "invalid_auth"}))
        # 3. A webhook nobody listens on (the URL's secret path is in the failing request).
        dead_url = f"http://127.0.0.1:{free_port()}{WEBHOOK_SECRET_PATH}"
        unreachable = make_settings(slack, smtp, slack_webhook_url=SecretStr(dead_url),
                                    smtp_host=None)
        assert all(s not in repr(webhook) + repr(api) for s in SECRETS)

        for settings in (webhook, api, unreachable):
            h = await harness(settings)
            t0 = h.clock.now()
            job = ev.submitted(t0)
            await h.deliver(job)
            assert job.job_id
            await h.deliver(ev.run_failed(t0, job.job_id))
            await h.tick()
            await h.notifier.aclose()
    finally:
        smtp.stop()

    stored = await rows(h.engine)
    assert {r.status for r in stored} == {"dead", "retrying"}
    assert any("403" in (r.last_error or "") for r in stored)  # the errors are still useful
    assert any("invalid_auth" in (r.last_error or "") for r in stored)
    assert any("535" in (r.last_error or "") for r in stored)

    subject = await api_subject(h.notifier.redactor)
    # The command reads the subject from the contracts when it runs.
    monkeypatch.setattr(subjects, "NOTIFICATIONS_LIST", subject)
    get_settings.cache_clear()
    app = typer.Typer()
    app.command()(cli.notifications)
    try:
        output = (await asyncio.to_thread(CliRunner().invoke, app, ["--json"])).output
    finally:
        get_settings.cache_clear()

    assert "invalid_token" in output and "dead" in output
    assert "notification" in caplog.text  # the failures were logged...
    for secret in SECRETS:  # ...without a secret anywhere
        assert secret not in caplog.text
        assert secret not in output
        assert all(secret not in str(tuple(r)) for r in stored)
