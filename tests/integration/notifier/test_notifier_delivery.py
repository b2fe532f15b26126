"""The notifier end to end on real servers: the preemption notice, and the failure-injection list
of the issue (SMTP down then up, Slack 429 + Retry-After, permanent 4xx, redelivery)."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy
from rota.contracts import messages as m

from tests.integration.notifier.conftest import HarnessFactory, make_settings, rows
from tests.integration.notifier.fakes import FakeSlack, Reply, SmtpSink
from tests.unit.notifier import events as ev

TRANSPORTS = ["webhook", "api"]


def plain_and_html(message: object) -> tuple[str, str]:
    from email.message import EmailMessage

    assert isinstance(message, EmailMessage)
    assert message.get_content_type() == "multipart/alternative"
    plain = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert plain is not None and html is not None
    return plain.get_content(), html.get_content()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_preemption_notice_reaches_each_recipient_once_with_the_deadline(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink, transport: str,
) -> None:
    smtp.start()
    h = await harness(make_settings(slack, smtp, transport=transport))
    now = h.clock.now()
    job = ev.submitted(now, user="alice", name="llama-ft")
    await h.deliver(job)
    notice = ev.noticed(now, job_id=job.job_id, user="alice", grace_s=300)

    assert await h.deliver(notice) == 4  # alice and the team, each by Slack and email
    result = await h.tick()
    assert result.sent == 4
    assert (await h.tick()).sent == 0

    # Exactly one email and one Slack message per recipient.
    assert len(smtp.to("alice@example.com")) == 1
    assert len(smtp.to("ml-team@example.com")) == 1
    assert len(smtp.messages) == 2
    assert len(slack.delivered) == 2

    data = notice.data
    assert isinstance(data, m.PreemptionNoticed)
    deadline_utc = data.deadline.strftime("%Y-%m-%d %H:%M UTC")
    deadline_berlin = data.deadline.astimezone(ZoneInfo("Europe/Berlin")).strftime(
        "%Y-%m-%d %H:%M %Z")
    (email,) = smtp.to("alice@example.com")
    assert deadline_utc in email["Subject"] and "llama-ft" in email["Subject"]
    plain, html = plain_and_html(email)
    for text in (plain, html):
        assert deadline_utc in text
        assert f"{deadline_berlin} (Europe/Berlin)" in text
        assert "in 5 min" in text
        assert "llama-ft" in text and data.job_id in text
        assert "PRIORITY" in text and "production" in text
        assert "run.acknowledge" in text and f"rota.ctl.run.{data.run_id}" in text
        assert "s3://ckpt/llama-ft/step-1200" in text
    (team_email,) = smtp.to("ml-team@example.com")
    team_plain, _ = plain_and_html(team_email)
    assert "of alice" in team_plain and "Europe/Berlin" not in team_plain

    by_target = {}
    for request in slack.delivered:
        payload = request.payload
        assert deadline_utc in payload["text"]  # the plain-text fallback
        assert [b["type"] for b in payload["blocks"]] == ["header", "section", "context"]
        section = payload["blocks"][1]["text"]["text"]
        assert deadline_utc in section and "PRIORITY" in section
        by_target[payload.get("channel") or section.split(" ")[0]] = request
    if transport == "api":
        assert set(by_target) == {"U0ALICE", "C0MLTEAM"}  # a DM by user id, and a channel
        assert all(r.headers["Authorization"].startswith("Bearer ") for r in slack.delivered)
    else:
        assert "<@U0ALICE>" in by_target  # webhooks go to one channel: mention the owner


async def test_redelivered_event_sends_nothing_twice(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink,
) -> None:
    smtp.start()
    h = await harness()
    now = h.clock.now()
    job = ev.submitted(now)
    await h.deliver(job)
    notice = ev.noticed(now, job_id=job.job_id)

    msg, sub = await h.publish(notice)
    assert await h.notifier.ingest.handle(msg.data) == 4
    await msg.nak()  # as if the handler had died before its ack
    (again,) = await sub.fetch(1, timeout=5)
    assert again.metadata.num_delivered == 2 and again.data == msg.data
    assert await h.notifier.ingest.handle(again.data) == 0
    await again.ack()
    await sub.unsubscribe()
    assert (await h.tick()).sent == 4

    # A producer's retry outside JetStream's duplicate window: same envelope, new Nats-Msg-Id.
    js = h.nc.jetstream()
    ack = await js.publish("rota.evt.preemption.noticed", notice.to_bytes(),
                           headers={"Nats-Msg-Id": f"retry-{notice.id}"})
    copy = await js.pull_subscribe("rota.evt.preemption.noticed", stream="ROTA_EVT",
                                   config=_from_seq(ack.seq))
    (late,) = await copy.fetch(1, timeout=5)
    assert await h.notifier.ingest.handle(late.data) == 0
    await late.ack()
    await copy.unsubscribe()

    assert (await h.tick()).sent == 0
    assert len(smtp.messages) == 2 and len(slack.delivered) == 2


def _from_seq(seq: int) -> ConsumerConfig:
    return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=seq,
                          inactive_threshold=30)


async def test_smtp_down_then_up_delivers_once(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink,
) -> None:
    h = await harness()  # the SMTP server is not running yet
    t0 = h.clock.now()
    job = ev.submitted(t0)
    await h.deliver(job)
    assert await h.deliver(ev.run_failed(t0, job.job_id)) == 2  # alice: Slack and email

    first = await h.tick()
    assert (first.sent, first.retrying) == (1, 1)  # Slack went; email waits for a retry
    (email_row,) = await rows(h.engine, channel="email")
    assert email_row.status == "retrying" and email_row.attempts == 1
    assert email_row.last_error.startswith("smtp:")
    assert email_row.next_attempt_at > t0

    smtp.start()
    assert (await h.tick()).sent == 0  # not due yet: backoff, not a hot loop
    h.clock.advance((email_row.next_attempt_at - t0).total_seconds())
    assert (await h.tick()).sent == 1
    h.clock.advance(3600)
    assert (await h.tick()).sent == 0

    assert len(smtp.to("alice@example.com")) == 1
    (email_row,) = await rows(h.engine, channel="email")
    assert email_row.status == "sent" and email_row.attempts == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_slack_429_is_retried_after_retry_after_and_delivered_once(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink, transport: str,
) -> None:
    smtp.start()
    h = await harness(make_settings(slack, smtp, transport=transport))
    body: object = "rate_limited" if transport == "webhook" else {"ok": False,
                                                                  "error": "ratelimited"}
    slack.script.append(Reply(429, body, {"Retry-After": "120"}))
    t0 = h.clock.now()
    job = ev.submitted(t0)
    await h.deliver(job)
    await h.deliver(ev.run_failed(t0, job.job_id))

    assert (await h.tick()).retrying == 1
    (row,) = await rows(h.engine, channel="slack")
    assert row.status == "retrying"
    assert row.next_attempt_at >= t0 + timedelta(seconds=120)  # Retry-After beats our backoff

    h.clock.advance(60)
    await h.tick()
    assert len(slack.requests) == 1  # still waiting, as Slack asked

    h.clock.advance(61)
    assert (await h.tick()).sent == 1
    assert len(slack.requests) == 2 and len(slack.delivered) == 1
    (row,) = await rows(h.engine, channel="slack")
    assert row.status == "sent" and row.attempts == 2
    assert row.sent_at - row.created_at >= timedelta(seconds=120)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_permanent_4xx_ends_in_the_dead_letter(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink, transport: str,
) -> None:
    smtp.start()
    h = await harness(make_settings(slack, smtp, transport=transport))
    if transport == "webhook":
        slack.script.append(Reply(404, "no_service"))
    else:
        slack.script.append(Reply(200, {"ok": False, "error": "channel_not_found"}))
    t0 = h.clock.now()
    job = ev.submitted(t0)
    await h.deliver(job)
    await h.deliver(ev.run_failed(t0, job.job_id))

    result = await h.tick()
    assert (result.sent, result.dead) == (1, 1)
    h.clock.advance(86_400)
    await h.tick()
    assert len(slack.requests) == 1  # never retried

    (row,) = await rows(h.engine, channel="slack")
    assert row.status == "dead" and row.attempts == 1
    assert ("404" in row.last_error) if transport == "webhook" else (
        "channel_not_found" in row.last_error)


async def test_transient_failures_end_in_the_dead_letter_after_n_tries(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink,
) -> None:
    h = await harness(make_settings(slack, smtp, notifier_max_attempts=3))  # SMTP stays down
    t0 = h.clock.now()
    job = ev.submitted(t0)
    await h.deliver(job)
    await h.deliver(ev.run_failed(t0, job.job_id))

    statuses = []
    for _ in range(4):
        await h.tick()
        (row,) = await rows(h.engine, channel="email")
        statuses.append((row.status, row.attempts))
        h.clock.advance(3600)  # past any backoff
    assert statuses == [("retrying", 1), ("retrying", 2), ("dead", 3), ("dead", 3)]
