"""The notifier's batch path: a fetched batch in one transaction, as its durable consumer hands
it over. One job's events in a batch are folded in order, each on the view the ones before it
left; a copy of an event in the same batch, or a whole batch redelivered, records nothing
again; and a preemption notice is sent exactly once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from nats.js.api import ConsumerConfig, DeliverPolicy
from rota.bus.broker import publish_headers
from rota.contracts import Envelope
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota_notifier.ingest import SUBJECTS

from tests.integration.notifier.conftest import Harness, HarnessFactory, rows
from tests.integration.notifier.fakes import FakeSlack, SmtpSink
from tests.unit.notifier import events as ev


async def fetch_batch(h: Harness, envs: list[Envelope[Any]]) -> list[bytes]:
    """Publish `envs` to ROTA_EVT and fetch them back as one batch, as the durable does. A
    repeated envelope goes without its Nats-Msg-Id, so JetStream keeps the copy: a re-send
    after the duplicate window (a relay that crashed before marking its rows)."""
    js = h.nc.jetstream()
    seqs, sent = [], set()
    for env in envs:
        headers = publish_headers(env)
        if env.id in sent:
            headers.pop("Nats-Msg-Id")
        sent.add(env.id)
        ack = await js.publish(EVENT_SUBJECTS[env.type], env.to_bytes(), stream=STREAM_EVT,
                               headers=headers)
        seqs.append(ack.seq)
    sub = await js.pull_subscribe("rota.evt.>", stream=STREAM_EVT, config=ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=seqs[0], ack_wait=30,
        inactive_threshold=30, filter_subjects=list(SUBJECTS)))
    msgs = await sub.fetch(len(envs), timeout=5)
    for msg in msgs:
        await msg.ack()
    await sub.unsubscribe()
    # Other tests' events may sit between ours in the shared stream.
    ours = {env.to_bytes() for env in envs}
    assert seqs == sorted(set(seqs))
    return [msg.data for msg in msgs if msg.data in ours]


async def test_a_batch_folds_one_jobs_events_in_order_and_records_each_notice_once(
    harness: HarnessFactory, slack: FakeSlack, smtp: SmtpSink,
) -> None:
    smtp.start()
    h = await harness()
    t0 = h.clock.now()
    job = ev.submitted(t0)  # experiment queue: long_wait_threshold_s 3600
    jid = job.job_id
    assert jid is not None
    waited = ev.pending(t0 + timedelta(seconds=3700), jid)
    notice = ev.noticed(t0 + timedelta(seconds=3800), job_id=jid)
    stopped = ev.run_stopped(t0 + timedelta(seconds=3900), jid)
    batch = [
        job,
        waited,  # a long wait only on the view `job` made, earlier in this batch
        waited,  # the same event twice in one fetch (a redelivery of an unacked copy)
        ev.pending(t0 + timedelta(seconds=3750), jid),  # the same wait: not told twice
        notice,
        notice,
        stopped,  # preempted: a new episode...
        stopped,  # (one: folding a copy again would count a second preemption)
        ev.run_started(t0 + timedelta(seconds=4000), jid, attempt=2),  # ...so a resume
    ]
    raws = await fetch_batch(h, batch)
    assert len(raws) == len(batch)

    # A long wait and a resume to alice, the preemption notice to her and her team.
    assert await h.notifier.ingest.handle_batch(raws) == 2 + 4 + 2
    assert await h.notifier.ingest.handle_batch(raws) == 0  # the whole batch redelivered
    recorded = await rows(h.engine)
    assert sorted((r.kind, r.recipient, r.channel) for r in recorded) == sorted(
        [(kind, "user:ml/alice", channel) for kind in ("long_wait", "run_resumed")
         for channel in ("email", "slack")]
        + [("preemption_noticed", recipient, channel) for recipient in ("team:ml", "user:ml/alice")
           for channel in ("email", "slack")])

    async with h.engine.connect() as conn:
        episode = (await conn.execute(sa.text(
            "SELECT episode FROM notifier.jobs WHERE job_id = :j"), {"j": jid})).scalar_one()
    assert episode == 1

    await h.tick()
    assert await h.notifier.ingest.handle_batch(raws) == 0  # and once more after sending
    await h.tick()
    notices = [r for r in await rows(h.engine) if r.kind == "preemption_noticed"]
    assert [r.status for r in notices] == ["sent"] * 4
    preemption_mails = [e for e in smtp.to("alice@example.com")
                        if e["Subject"].startswith("[Rota] Preemption:")]
    assert len(preemption_mails) == 1
    assert len([d for d in slack.delivered if "must checkpoint" in str(d)]) == 2


async def test_events_the_notifier_ignores_record_nothing_and_touch_no_job(
    harness: HarnessFactory,
) -> None:
    h = await harness()
    t0 = h.clock.now()
    job = ev.submitted(t0)
    assert job.job_id is not None
    # Not among the durable's subjects: filtered out by the server, never handed over.
    assert EVENT_SUBJECTS["RunFinished"] not in SUBJECTS
    assert EVENT_SUBJECTS["AllocationGranted"] not in SUBJECTS
    assert await h.notifier.ingest.handle_batch([b"not json", job.to_bytes()]) == 0
    assert await h.notifier.ingest.handle_batch(
        [ev.run_started(t0 + timedelta(hours=2), job.job_id).to_bytes()]) == 2
