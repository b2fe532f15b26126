"""Every answer to a command can be matched to it: the command's envelope id and its
submission id ride in each event that answers it, on the JetStream path as on request/reply,
and the producer's trace goes on in the answers' headers."""

from __future__ import annotations

import json
import uuid
from typing import Any

from nats.aio.client import Client
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.versions import PROTOCOL_VERSION
from rota.ids import new_id

from tests.builders import spec_doc, submit_job
from tests.integration.harness import (
    ServiceProcess,
    api,
    events_with_headers,
    eventually,
    stream_last_seq,
)


async def answers(nc: Client, since_seq: int) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Every job event after `since_seq`, with its headers."""
    return await events_with_headers(nc, "rota.evt.job.>", since_seq=since_seq)


def producer_trace() -> tuple[str, str]:
    trace_id = uuid.uuid4().hex
    return trace_id, f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"


async def send(nc: Client, subject: str, body: bytes, msg_id: str, traceparent: str) -> None:
    await nc.jetstream().publish(subject, body, stream=s.STREAM_CMD,
                                 headers={"Nats-Msg-Id": msg_id, "traceparent": traceparent})


async def test_a_rejected_jetstream_submit_names_its_command_and_submission_id(
    nc: Client, submission: ServiceProcess
) -> None:
    since = await stream_last_seq(nc)
    trace_id, traceparent = producer_trace()
    sid = f"bad-{uuid.uuid4().hex[:8]}"
    command_id = new_id()
    body = json.dumps({"id": command_id, "type": "SubmitJob", "version": 1,
                       "occurred_at": "2026-12-01T10:00:00Z", "source": "test",
                       "data": spec_doc(submission_id=sid, workers="2")}).encode()
    await send(nc, s.submit("nlp"), body, command_id, traceparent)

    async def rejected() -> list[tuple[dict[str, Any], dict[str, str]]]:
        return [(e, h) for e, h in await answers(nc, since)
                if e["type"] == "JobRejected" and e["data"].get("command_id") == command_id]

    [(event, headers)] = await eventually(rejected)
    assert event["data"]["submission_id"] == sid
    assert (event["data"]["code"], event["data"]["field"]) == ("INVALID_FIELD", "data.workers")
    assert headers["traceparent"].split("-")[1] == trace_id  # the producer's trace goes on


async def test_an_accepted_and_a_duplicate_jetstream_submit_each_answer_their_command(
    nc: Client, submission: ServiceProcess
) -> None:
    since = await stream_last_seq(nc)
    spec = submit_job(name="correlated")
    first, again = envelope(spec, source="test"), envelope(spec, source="test")
    _, traceparent = producer_trace()
    await send(nc, s.submit("nlp"), first.to_bytes(), first.id, traceparent)

    async def answer_to(command_id: str) -> dict[str, Any] | None:
        return next((e for e, _ in await answers(nc, since)
                     if e["data"].get("command_id") == command_id), None)

    submitted = await eventually(lambda: answer_to(first.id))
    assert submitted["type"] == "JobSubmitted"
    assert submitted["data"]["submission_id"] == spec.submission_id
    await send(nc, s.submit("nlp"), again.to_bytes(), again.id, traceparent)
    duplicate = await eventually(lambda: answer_to(again.id))
    assert duplicate["type"] == "JobResubmitted" and duplicate["data"]["duplicate"] is True
    assert duplicate["job_id"] == duplicate["data"]["job_id"] == submitted["job_id"]
    assert duplicate["data"]["submission_id"] == spec.submission_id
    assert duplicate["data"]["team"] == "nlp"


async def test_request_reply_answers_name_their_command_too(
    nc: Client, submission: ServiceProcess
) -> None:
    spec = submit_job(name="asked")
    request = envelope(spec, source="test")
    reply = await api(nc, s.api_submit("nlp"), None, raw=request.to_bytes())
    assert reply.ok and reply.command_id == request.id
    assert reply.submission_id == spec.submission_id
    wrong = envelope(m.GetJob(job_id=new_id()), source="test")
    missing = await api(nc, s.API_JOB_GET, None, raw=wrong.to_bytes())
    assert not missing.ok and missing.command_id == wrong.id
    cancel = envelope(m.CancelJob(job_id=reply.result["job_id"], team="nlp"), source="test")
    cancelled = await api(nc, s.api_cancel("nlp"), None, raw=cancel.to_bytes())
    assert cancelled.ok and cancelled.command_id == cancel.id


async def _reply(nc: Client, subject: str, body: bytes,
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
    answer = await nc.request(subject, body, timeout=10, headers=headers)
    envelope_doc: dict[str, Any] = json.loads(answer.data)
    return envelope_doc


async def test_an_oversized_submit_is_answered_by_its_nats_msg_id(
    nc: Client, submission: ServiceProcess
) -> None:
    """Too large to read: a UUID `Nats-Msg-Id` is its command id; a producer that
    deduplicates by its key (a `Nats-Msg-Id` that is no UUID) gets it back as the
    submission id, on request/reply and on the JetStream path (`JobRejected`)."""
    body = b'{"pad": "' + b"x" * (64 * 1024 + 10) + b'"}'
    command_id = new_id()
    by_id = (await _reply(nc, s.api_submit("nlp"), body, {"Nats-Msg-Id": command_id}))["data"]
    assert (by_id["error"]["code"], by_id["command_id"]) == ("PAYLOAD_TOO_LARGE", command_id)
    key = f"big-{uuid.uuid4().hex[:8]}"
    by_key = (await _reply(nc, s.api_submit("nlp"), body, {"Nats-Msg-Id": key}))["data"]
    assert (by_key["error"]["code"], by_key["submission_id"]) == ("PAYLOAD_TOO_LARGE", key)
    assert by_key["command_id"] is None
    garbled_id = new_id()
    garbled = (await _reply(nc, s.api_submit("nlp"), b"{not json",
                            {"Nats-Msg-Id": garbled_id}))["data"]
    assert (garbled["error"]["code"], garbled["command_id"]) == ("MALFORMED_JSON", garbled_id)
    since = await stream_last_seq(nc)
    await nc.jetstream().publish(s.submit("nlp"), body, stream=s.STREAM_CMD,
                                 headers={"Nats-Msg-Id": key})

    async def rejected() -> list[dict[str, Any]]:
        return [e for e, _ in await answers(nc, since)
                if e["type"] == "JobRejected" and e["data"].get("submission_id") == key]

    [event] = await eventually(rejected)
    assert event["data"]["code"] == "PAYLOAD_TOO_LARGE" and event["data"]["team"] == "nlp"


async def test_every_answer_about_a_job_names_it_in_its_envelope(
    nc: Client, submission: ServiceProcess
) -> None:
    submitted = await _reply(nc, s.api_submit("nlp"),
                             envelope(submit_job(name="named"), source="test").to_bytes())
    job_id = submitted["data"]["result"]["job_id"]
    assert submitted["job_id"] == job_id
    for query in (s.API_JOB_GET, s.API_JOB_WHY, s.API_JOB_TRACE):
        answer = await _reply(nc, s.team_query(query, "nlp"),
                              envelope(m.GetJob(job_id=job_id), source="test").to_bytes())
        assert answer["data"]["ok"] and answer["job_id"] == job_id, query
    listed = await _reply(nc, s.team_query(s.API_JOBS_LIST, "nlp"),
                          envelope(m.ListJobs(), source="test").to_bytes())
    assert listed["data"]["ok"] and listed["job_id"] is None  # about several jobs
    cancelled = await _reply(nc, s.api_cancel("nlp"), envelope(
        m.CancelJob(job_id=job_id, team="nlp"), source="test").to_bytes())
    assert cancelled["job_id"] == job_id


async def test_a_team_pings_the_service_it_talks_to(
    nc: Client, submission: ServiceProcess
) -> None:
    pong = await _reply(nc, s.api_ping("nlp"), b"")
    assert pong["type"] == "ApiReply" and pong["data"]["ok"]
    assert pong["data"]["result"] == {"ok": True, "service": "submission", "team": "nlp",
                                      "protocol_version": PROTOCOL_VERSION}
    bad = await _reply(nc, "rota.api.ping.ml.nlp", b"")
    assert (bad["data"]["error"]["code"], bad["data"]["error"]["field"]) == (
        "UNKNOWN_SUBJECT", "subject")
