"""Which events notify whom, once: long waits, starts, resumes, completions; the rate limit
and its digest; and the read API behind `rota notifications`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest
import typer
from rota.cli import notifications as cli
from rota.contracts import Envelope, envelope, subjects
from rota.contracts import messages as m
from rota.settings import get_settings
from rota_notifier.redact import Redactor
from typer.testing import CliRunner

from tests.integration.notifier.conftest import HarnessFactory, make_settings, rows
from tests.integration.notifier.fakes import FakeSlack, Reply, SmtpSink
from tests.unit.notifier import events as ev


async def kinds(h: object) -> list[str]:
    from tests.integration.notifier.conftest import Harness

    assert isinstance(h, Harness)
    return sorted({r.kind for r in await rows(h.engine)})


async def test_long_wait_once_per_wait_then_start_and_resume(harness: HarnessFactory) -> None:
    h = await harness()
    t0 = h.clock.now()
    job = ev.submitted(t0)  # experiment queue: long_wait_threshold_s 3600
    jid = job.job_id
    assert jid is not None
    await h.deliver(job)

    assert await h.deliver(ev.pending(t0 + timedelta(seconds=100), jid)) == 0
    assert await h.deliver(ev.pending(t0 + timedelta(seconds=3700), jid)) == 2
    assert await h.deliver(ev.pending(t0 + timedelta(seconds=4000), jid)) == 0  # once
    assert await h.deliver(ev.run_started(t0 + timedelta(seconds=5000), jid)) == 2
    assert await kinds(h) == ["long_wait", "run_started"]

    # Preempted: back in the queue with a new wait, then resumed from its checkpoint.
    await h.deliver(ev.run_stopped(t0 + timedelta(seconds=6000), jid))
    assert await h.deliver(ev.pending(t0 + timedelta(seconds=6100), jid)) == 0
    resumed = ev.run_started(t0 + timedelta(seconds=6200), jid, attempt=2,
                             resumed_from="s3://ckpt/x")
    assert await h.deliver(resumed) == 2
    assert await h.deliver(ev.pending(t0 + timedelta(seconds=9900), jid)) == 0  # ran, not waited
    assert await kinds(h) == ["long_wait", "run_resumed", "run_started"]


async def test_short_wait_start_and_opt_outs_notify_nobody(harness: HarnessFactory) -> None:
    h = await harness()
    t0 = h.clock.now()
    alice = ev.submitted(t0, user="alice")
    bob = ev.submitted(t0, user="bob")  # bob opted out of run_failed
    await h.deliver(alice)
    await h.deliver(bob)
    assert alice.job_id and bob.job_id
    assert await h.deliver(ev.run_started(t0 + timedelta(seconds=60), alice.job_id)) == 0
    assert await h.deliver(ev.run_failed(t0, bob.job_id)) == 0
    # ...but bob cannot opt out of a preemption notice; he only chose email for it.
    assert await h.deliver(ev.noticed(t0, job_id=bob.job_id, user="bob")) == 3
    bob_rows = [r for r in await rows(h.engine) if r.recipient == "user:ml/bob"]
    assert [(r.kind, r.channel) for r in bob_rows] == [("preemption_noticed", "email")]


async def test_stale_events_update_state_but_notify_nobody(harness: HarnessFactory) -> None:
    h = await harness()
    t0 = h.clock.now()
    old = t0 - timedelta(days=2)  # a replay of last week's stream
    job = ev.submitted(old)
    await h.deliver(job)
    assert job.job_id
    assert await h.deliver(ev.noticed(old, job_id=job.job_id)) == 0
    assert await h.deliver(ev.run_failed(old, job.job_id)) == 0
    assert await h.deliver(ev.run_failed(t0, job.job_id)) == 2  # the job view is still known


async def test_preemption_completed_per_victim(harness: HarnessFactory, smtp: SmtpSink) -> None:
    smtp.start()
    h = await harness()
    t0 = h.clock.now()
    first, second = ev.submitted(t0, name="a"), ev.submitted(t0, name="b")
    await h.deliver(first)
    await h.deliver(second)
    assert first.job_id and second.job_id
    done = ev.completed(t0, [first.job_id, second.job_id], outcome=m.VictimOutcome.forced)
    assert await h.deliver(done) == 8  # two victims x (alice + team) x (Slack + email)
    assert (await h.tick()).sent == 8
    subjects = sorted(e["Subject"] for e in smtp.to("alice@example.com"))
    assert subjects == ["[Rota] Preempted without a checkpoint: a",
                        "[Rota] Preempted without a checkpoint: b"]
    plain = smtp.to("alice@example.com")[0].get_body(("plain",))
    assert plain is not None and "Lost work: 1.50 GPU-h" in plain.get_content()


async def test_rate_limit_holds_the_excess_for_one_digest_but_never_a_preemption_notice(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink,
) -> None:
    smtp.start()
    h = await harness(make_settings(slack, smtp, notifier_rate_limit=2,
                                    notifier_rate_window_s=3600))
    t0 = h.clock.now()
    jobs = [ev.submitted(t0, name=f"job-{i}") for i in range(4)]
    for job in jobs:
        await h.deliver(job)
        assert job.job_id
        await h.deliver(ev.run_failed(t0, job.job_id))

    first = await h.tick()
    assert (first.sent, first.held) == (4, 4)  # two per channel go out, two per channel wait
    assert len(smtp.to("alice@example.com")) == 2

    await h.deliver(ev.noticed(t0, job_id=jobs[0].job_id))
    assert (await h.tick()).sent == 4  # over the limit, and still sent at once
    assert len(smtp.to("alice@example.com")) == 3

    h.clock.advance(3601)
    result = await h.tick()
    assert (result.digests, result.sent) == (2, 2)  # one digest per channel
    digest = smtp.to("alice@example.com")[-1]
    assert digest["Subject"] == "[Rota] 2 notifications"
    body = digest.get_body(("plain",))
    assert body is not None
    assert "job-2" in body.get_content() and "job-3" in body.get_content()
    assert (await h.tick()).sent == 0
    statuses = sorted(r.status for r in await rows(h.engine, recipient="user:ml/alice"))
    assert statuses.count("digested") == 4 and "held" not in statuses


async def test_rota_notifications_lists_the_dead_letter_over_nats(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink,
    api_subject: Callable[[Redactor], Awaitable[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    smtp.start()
    settings = make_settings(slack, smtp)
    h = await harness(settings)
    slack.script.append(Reply(403, "invalid_token"))
    t0 = h.clock.now()
    job = ev.submitted(t0)
    await h.deliver(job)
    assert job.job_id
    await h.deliver(ev.run_failed(t0, job.job_id))
    await h.tick()

    subject = await api_subject(h.notifier.redactor)
    # The command reads the subject from the contracts when it runs.
    monkeypatch.setattr(subjects, "NOTIFICATIONS_LIST", subject)
    get_settings.cache_clear()
    app = typer.Typer()
    app.command()(cli.notifications)
    try:
        failed = await asyncio.to_thread(CliRunner().invoke, app, ["--failed", "--json"])
        everything = await asyncio.to_thread(CliRunner().invoke, app, ["--limit", "10"])
    finally:
        get_settings.cache_clear()
    assert failed.exit_code == 0, failed.output
    (dead,) = json.loads(failed.output)
    assert (dead["status"], dead["channel"], dead["kind"]) == ("dead", "slack", "run_failed")
    assert dead["job_id"] == job.job_id and "403" in dead["last_error"]
    assert everything.exit_code == 0, everything.output
    assert "dead" in everything.output and "sent" in everything.output


def _budget(used: float, at: datetime, period_start: datetime) -> Envelope[m.BudgetUsageRecorded]:
    use = m.BudgetUse(team="ml", flavor="h100", period="week", period_start=period_start,
                      resets_at=period_start + timedelta(days=7), used_gpu_hours=used,
                      budget_gpu_hours=100.0, when_exhausted="wait")
    return envelope(m.BudgetUsageRecorded(as_of=at, budgets=[use]), source="scheduler", occurred_at=at)


async def test_budget_warning_once_per_team_flavor_and_period_across_restarts(
    harness: HarnessFactory,
) -> None:
    h = await harness()
    t0 = h.clock.now()
    week = t0 - timedelta(days=1)
    assert await h.deliver(_budget(79.0, t0, week)) == 0
    assert await h.deliver(_budget(85.0, t0, week)) == 2  # the team's Slack channel and email
    assert await h.deliver(_budget(99.0, t0 + timedelta(minutes=5), week)) == 0
    restarted = await harness()
    assert await restarted.deliver(_budget(120.0, t0 + timedelta(minutes=10), week)) == 0
    recipients = {(r.recipient, r.channel) for r in await rows(h.engine, kind="budget_warning")}
    assert recipients == {("team:ml", "slack"), ("team:ml", "email")}
    assert await restarted.deliver(_budget(90.0, t0 + timedelta(minutes=20), week + timedelta(days=7))) == 2
