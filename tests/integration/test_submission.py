"""The submission service against real NATS JetStream and real PostgreSQL."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from nats.aio.client import Client
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.db.engine import async_url
from rota.endpoints import Endpoints
from rota.ids import new_id
from sqlalchemy.ext.asyncio import create_async_engine

from tests.builders import spec_doc, submit_job
from tests.integration.harness import (
    ServiceProcess,
    api,
    events,
    eventually,
    publish_command,
    stream_last_seq,
)


async def job_rows(endpoints: Endpoints, submission_id: str) -> list[dict[str, object]]:
    engine = create_async_engine(async_url(endpoints.database_url))
    try:
        async with engine.connect() as conn:
            result = await conn.execute(
                sa.text("SELECT job_id, state FROM submission.jobs WHERE submission_id = :s"),
                {"s": submission_id},
            )
            return [dict(r._mapping) for r in result]
    finally:
        await engine.dispose()


async def test_submit_over_jetstream_then_read_back(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints
) -> None:
    since = await stream_last_seq(nc)
    spec = submit_job(name="read-back")
    env = envelope(spec, source="test")
    await publish_command(nc, s.submit("nlp"), env.to_bytes(), env.id)

    async def submitted() -> list[dict[str, object]]:
        found = await events(nc, "rota.evt.job.submitted", since_seq=since)
        return [e for e in found if e["data"]["spec"]["submission_id"] == spec.submission_id]

    [event] = await eventually(submitted)
    job_id = event["job_id"]
    assert event["type"] == "JobSubmitted" and event["source"] == "submission"
    reply = await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_id))
    assert reply.ok, reply.error
    assert reply.result["name"] == "read-back"
    assert reply.result["state"] == "pending"
    assert reply.result["gpus"] == 8
    by_prefix = await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_id[:13]))
    assert by_prefix.ok and by_prefix.result["job_id"] == job_id


async def test_resubmission_returns_the_same_job(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints
) -> None:
    since = await stream_last_seq(nc)
    spec = submit_job()
    first = await api(nc, s.api_submit("nlp"), spec)
    again = await api(nc, s.api_submit("nlp"), spec)
    env = envelope(spec, source="test")
    await publish_command(nc, s.submit("nlp"), env.to_bytes(), env.id)
    assert first.ok and again.ok
    assert first.result["duplicate"] is False
    assert again.result["duplicate"] is True
    assert again.result["job_id"] == first.result["job_id"]
    await eventually(lambda: _count_rejections_or_submits(nc, since, spec.submission_id, 1))
    assert len(await job_rows(endpoints, spec.submission_id)) == 1


async def _count_rejections_or_submits(nc: Client, since: int, sid: str, want: int) -> bool:
    found = await events(nc, "rota.evt.job.submitted", since_seq=since)
    return sum(e["data"]["spec"]["submission_id"] == sid for e in found) == want


async def test_reused_submission_id_with_another_spec_is_rejected(
    nc: Client, submission: ServiceProcess
) -> None:
    spec = submit_job()
    assert (await api(nc, s.api_submit("nlp"), spec)).ok
    changed = submit_job(submission_id=spec.submission_id, workers=2)
    reply = await api(nc, s.api_submit("nlp"), changed)
    assert not reply.ok and reply.error is not None
    assert reply.error.code == "SUBMISSION_ID_REUSED"
    assert reply.error.field == "submission_id"


INVALID = [
    ("malformed-json", b"{not json", "MALFORMED_JSON", None),
    ("wrong-type", None, "INVALID_FIELD", "data.workers"),
    ("unknown-field", None, "INVALID_FIELD", "data.gpu"),
    ("unknown-team", None, "UNKNOWN_TEAM", "team"),
    ("unauthorised", None, "UNAUTHORISED", "team"),
    ("too-large-gang", None, "EXCEEDS_CLUSTER", "workers"),
    ("oversized", None, "PAYLOAD_TOO_LARGE", None),
]


def _invalid_body(case: str, sid: str) -> bytes:
    doc = spec_doc(submission_id=sid)
    if case == "wrong-type":
        doc["workers"] = "two"
    elif case == "unknown-field":
        doc["gpu"] = 8
    elif case == "unknown-team":
        doc["team"] = "ghosts"
    elif case == "unauthorised":
        doc["team"] = "vision"
        doc["user"] = "carol"
    elif case == "too-large-gang":
        doc["workers"] = 5
    elif case == "oversized":
        doc["labels"] = {f"k{i}": "x" * 250 for i in range(32)}
        doc["name"] = "x" * 100
        # Over the 64 KiB cap, but within the streams' room for headers (a body beyond that
        # is refused at publish: tests/integration/test_stream_limits.py).
        head = {"id": new_id(), "type": "SubmitJob", "occurred_at": "2026-01-01T00:00:00Z",
                "source": "test", "data": doc, "pad": ""}
        pad = 66_000 - len(json.dumps(head))
        return json.dumps({**head, "pad": "y" * pad}).encode()
    return json.dumps({"id": new_id(), "type": "SubmitJob", "occurred_at": "2026-01-01T00:00:00Z",
                       "source": "test", "data": doc}).encode()


async def test_invalid_submissions_are_rejected_and_nothing_is_written(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints
) -> None:
    since = await stream_last_seq(nc)
    sids = {}
    for case, raw, code, field in INVALID:
        sid = f"bad-{case}-{uuid.uuid4().hex[:8]}"
        sids[case] = sid
        body = raw if raw is not None else _invalid_body(case, sid)
        team = "ghosts" if case == "unknown-team" else "nlp"
        reply = await api(nc, s.api_submit(team), None, raw=body)
        assert not reply.ok and reply.error is not None, case
        assert (reply.error.code, reply.error.field) == (code, field), (case, reply.error)
        # The same bad input over JetStream: rejected as an event, and acked (not retried).
        await publish_command(nc, s.submit(team), body, f"bad-{uuid.uuid4().hex}")
    rejected = await eventually(
        lambda: _rejections(nc, since, expect=2 * len(INVALID)), timeout=20
    )
    assert {r["data"]["code"] for r in rejected} == {code for _, _, code, _ in INVALID}
    for case, sid in sids.items():
        assert await job_rows(endpoints, sid) == [], case
    assert (await nc.request(s.ping("submission"), b"", timeout=2)).data
    assert submission.process is not None and submission.process.poll() is None


async def _rejections(nc: Client, since: int, expect: int) -> list[dict[str, object]] | None:
    found = await events(nc, "rota.evt.job.rejected", since_seq=since)
    return found if len(found) >= expect else None


async def test_cancel_is_authorised_idempotent_and_recorded(
    nc: Client, submission: ServiceProcess
) -> None:
    since = await stream_last_seq(nc)
    job_id = (await api(nc, s.api_submit("nlp"), submit_job())).result["job_id"]
    foreign = await api(nc, s.api_cancel("vision"), m.CancelJob(job_id=job_id, team="vision"))
    assert not foreign.ok and foreign.error is not None
    assert (foreign.error.code, foreign.error.field) == ("JOB_NOT_FOUND", "job_id")
    first = await api(nc, s.api_cancel("nlp"), m.CancelJob(job_id=job_id, team="nlp"))
    again = await api(nc, s.api_cancel("nlp"), m.CancelJob(job_id=job_id, team="nlp"))
    assert first.ok and again.ok
    assert first.result["state"] == again.result["state"] == "cancelled"

    async def cancelled_events() -> list[dict[str, object]]:
        return [e for e in await events(nc, "rota.evt.job.cancelled", since_seq=since)
                if e["job_id"] == job_id]

    assert len(await eventually(cancelled_events)) == 1
    missing = await api(nc, s.api_cancel("nlp"), m.CancelJob(job_id=new_id(), team="nlp"))
    assert missing.error is not None and missing.error.code == "JOB_NOT_FOUND"


async def test_list_filters_summary_and_unknown_subjects(
    nc: Client, submission: ServiceProcess
) -> None:
    mine = await api(nc, s.api_submit("research"),
                     submit_job(team="research", user="dave", queue="experiment"))
    assert mine.ok
    listed = await api(nc, s.API_JOBS_LIST, m.ListJobs(team="research", queue="experiment"))
    assert listed.ok
    assert mine.result["job_id"] in {row["job_id"] for row in listed.result}
    assert {row["team"] for row in listed.result} == {"research"}
    summary = await api(nc, s.API_QUEUES_SUMMARY, m.SummarizeQueues(team="research"))
    row = next(r for r in summary.result if r["queue"] == "experiment")
    assert row["pending_jobs"] >= 1 and row["pending_gpus"] >= 8
    assert (row["team"], row["flavor"], row["quota"]) == ("research", "h100", 8)
    unknown = await api(nc, "rota.api.jobs.delete", m.SummarizeQueues())
    assert unknown.error is not None and unknown.error.code == "UNKNOWN_SUBJECT"
    bad_filter = await api(nc, s.API_JOBS_LIST, None,
                           raw=envelope(m.SummarizeQueues(), source="t").to_bytes())
    assert bad_filter.error is not None and bad_filter.error.code == "WRONG_TYPE"


async def test_projection_follows_run_events_once(nc: Client, submission: ServiceProcess) -> None:
    job_id = (await api(nc, s.api_submit("nlp"), submit_job())).result["job_id"]
    run_id = new_id()
    placement = [{"worker": 0, "node": "h100-0", "gpus": list(range(8))}]
    started = envelope(m.RunStarted(run_id=run_id, job_id=job_id, attempt=1,
                                    placement=placement), source="executor",
                       job_id=job_id, run_id=run_id)
    js = nc.jetstream()
    for _ in range(2):  # a duplicate delivery must not count a second start
        await js.publish(s.EVENT_SUBJECTS["RunStarted"], started.to_bytes(), stream=s.STREAM_EVT)

    async def state() -> str:
        return str((await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_id))).result["state"])

    await eventually(lambda: _is(state, "running"))
    job = (await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_id))).result
    assert job["attempts"] == 1 and job["run_id"] == run_id
    finished = envelope(m.RunFinished(run_id=run_id, job_id=job_id), source="executor",
                        job_id=job_id, run_id=run_id)
    await js.publish(s.EVENT_SUBJECTS["RunFinished"], finished.to_bytes(), stream=s.STREAM_EVT)
    await eventually(lambda: _is(state, "finished"))
    late = envelope(m.RunStarted(run_id=new_id(), job_id=job_id, attempt=2,
                                 placement=placement), source="executor", job_id=job_id)
    await js.publish(s.EVENT_SUBJECTS["RunStarted"], late.to_bytes(), stream=s.STREAM_EVT)
    ping = await nc.request(s.ping("submission"), b"", timeout=2)  # let the late event land
    assert ping.data
    await eventually(lambda: _is(state, "finished"))


def _budget_report(used: float, as_of: datetime) -> bytes:
    use = m.BudgetUse(
        team="research", flavor="h100", period="month", period_start=datetime(2026, 12, 1, tzinfo=UTC),
        resets_at=datetime(2027, 1, 1, tzinfo=UTC), used_gpu_hours=used, budget_gpu_hours=100.0,
        when_exhausted="wait")
    return envelope(m.BudgetUsageRecorded(as_of=as_of, budgets=[use]), source="scheduler").to_bytes()


async def test_queue_summary_shows_the_latest_budget_report(nc: Client, submission: ServiceProcess) -> None:
    await api(nc, s.api_submit("research"), submit_job(team="research", user="dave", queue="experiment"))
    js = nc.jetstream()
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    await js.publish(s.EVENT_SUBJECTS["BudgetUsageRecorded"], _budget_report(42.0, now), stream=s.STREAM_EVT)
    # An older report arriving late changes nothing.
    older = _budget_report(7.0, now - timedelta(minutes=5))
    await js.publish(s.EVENT_SUBJECTS["BudgetUsageRecorded"], older, stream=s.STREAM_EVT)

    async def budget() -> object:
        summary = await api(nc, s.API_QUEUES_SUMMARY, m.SummarizeQueues(team="research"))
        row = next(r for r in summary.result if r["queue"] == "experiment")
        return (row["budget_used_gpu_hours"], row["budget_gpu_hours"], str(row["budget_resets_at"])[:10])

    await eventually(lambda: _is(budget, (42.0, 100.0, "2027-01-01")))
    ping = await nc.request(s.ping("submission"), b"", timeout=2)  # let the late report land
    assert ping.data and await budget() == (42.0, 100.0, "2027-01-01")


async def _is(state: object, want: object) -> bool:
    return bool(await state() == want)  # type: ignore[operator]


async def test_one_pull_batch_decides_each_command_as_if_alone(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints
) -> None:
    """Published back to back, so they likely share a pull batch (the outcome is the same
    either way): a repeat is the same job, a reused id is rejected, a broken command is
    rejected, and none of them holds up the others."""
    since = await stream_last_seq(nc)
    first, other = submit_job(), submit_job(name="other")
    reused = submit_job(submission_id=first.submission_id, workers=2)
    bodies = [envelope(spec, source="test").to_bytes() for spec in (first, first, reused)]
    bodies += [b"{not json", envelope(other, source="test").to_bytes()]
    for body in bodies:
        await publish_command(nc, s.submit("nlp"), body, f"batch-{uuid.uuid4().hex}")
    rejected = await eventually(lambda: _rejections(nc, since, expect=2), timeout=20)
    assert sorted(str(r["data"]["code"]) for r in rejected) == ["MALFORMED_JSON", "SUBMISSION_ID_REUSED"]
    await eventually(lambda: _count_rejections_or_submits(nc, since, other.submission_id, 1))
    assert await _count_rejections_or_submits(nc, since, first.submission_id, 1)
    [row] = await job_rows(endpoints, first.submission_id)
    assert len(await job_rows(endpoints, other.submission_id)) == 1
    reply = await api(nc, s.API_JOB_GET, m.GetJob(job_id=str(row["job_id"])))
    assert reply.ok and reply.result["workers"] == first.workers
