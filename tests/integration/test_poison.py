"""Poison input against a real submission service: every case is refused on first delivery
with a reason (JetStream) or an error naming the field (request/reply), nothing is stored,
and the service keeps answering."""

from __future__ import annotations

import json

import pytest
from nats.aio.client import Client
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.builders import spec_doc, submit_job
from tests.integration.harness import (
    ServiceProcess,
    api,
    events,
    eventually,
    publish_command,
    stream_last_seq,
)
from tests.integration.test_submission import job_rows

MARK = '"@@"'

# (case, the JSON text spliced in as data.<field>, field, the field the error names)
POISON = [
    ("huge-int", "1" * 5001, "workers", "data.workers"),
    ("deep", "[" * 3000 + "]" * 3000, "labels", None),
    ("infinity", '{"duration_s": Infinity}', "sim", "data.sim.duration_s"),
    ("nan", '{"duration_s": 10, "fail_after_s": NaN}', "sim", "data.sim.fail_after_s"),
    ("nul", '"a\\u0000b"', "name", "data.name"),
    ("nul-label", '{"k": "\\u0000"}', "labels", "data.labels.k"),
    ("string-int", '"8"', "gpus_per_worker", "data.gpus_per_worker"),
    ("bool-int", "true", "gpus_per_worker", "data.gpus_per_worker"),
    ("string-bool", '"yes"', "resumable", "data.resumable"),
]


def poison(value: str, where: str) -> tuple[bytes, str]:
    sid = f"poison-{new_id()}"
    doc = {"id": new_id(), "type": "SubmitJob", "occurred_at": "2026-01-01T00:00:00Z",
           "source": "test", "data": {**spec_doc(submission_id=sid), where: "@@"}}
    return json.dumps(doc).replace(MARK, value).encode(), sid


def at_the_limit(limit: int) -> tuple[bytes, str]:
    """A valid SubmitJob of exactly `limit` bytes, padded with command arguments."""
    sid = f"at-limit-{new_id()}"

    def sized(pad: int) -> bytes:
        args = ["a" * 4000 for _ in range(pad // 4000)] + ["b" * (pad % 4000)]
        return envelope(submit_job(submission_id=sid, local={"command": args}), source="test",
                        id="0190b5c2-0000-7000-8000-000000000001").to_bytes()

    pad = limit - len(sized(0))
    pad -= len(sized(pad)) - limit
    raw = sized(pad)
    assert len(raw) == limit
    return raw, sid


async def rejections(nc: Client, since: int) -> list[dict[str, object]]:
    return [e["data"] for e in await events(nc, "rota.evt.job.rejected", since_seq=since)]


@pytest.mark.parametrize(("case", "value", "where", "field"), POISON,
                         ids=[p[0] for p in POISON])
async def test_poison_command_is_rejected_on_first_delivery(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints, case: str, value: str,
    where: str, field: str | None,
) -> None:
    since = await stream_last_seq(nc)
    team = f"poison-{case}"  # the subject's team is all a rejection before parsing can name
    raw, sid = poison(value, where)
    await publish_command(nc, s.submit(team), raw, new_id())

    async def rejected() -> list[dict[str, object]]:
        return [r for r in await rejections(nc, since) if r["team"] == team]

    [rejection] = await eventually(rejected)
    assert rejection["code"] in ("INVALID_FIELD", "MALFORMED_JSON")
    if field is not None:
        assert rejection["field"] == field
    assert rejection["message"]
    assert await job_rows(endpoints, sid) == []
    assert (await api(nc, s.API_JOBS_LIST, m.ListJobs(limit=1))).ok  # still answering


@pytest.mark.parametrize(("case", "value", "where", "field"), POISON,
                         ids=[p[0] for p in POISON])
async def test_poison_request_is_answered_with_the_field(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints, case: str, value: str,
    where: str, field: str | None,
) -> None:
    raw, sid = poison(value, where)
    reply = await api(nc, s.api_submit("nlp"), None, raw=raw)
    assert not reply.ok and reply.error is not None
    assert reply.error.code in ("INVALID_FIELD", "MALFORMED_JSON")
    if field is not None:
        assert reply.error.field == field
    for leak in ("asyncpg", "sqlalchemy", "psycopg", "SQL", "Traceback"):
        assert leak not in reply.error.message
    assert await job_rows(endpoints, sid) == []


async def test_a_command_at_exactly_the_limit_is_rejected_for_its_derived_events(
    nc: Client, submission: ServiceProcess, endpoints: Endpoints
) -> None:
    since = await stream_last_seq(nc)
    raw, sid = at_the_limit(64 * 1024)
    await publish_command(nc, s.submit("nlp"), raw, new_id())

    async def rejected() -> list[dict[str, object]]:
        return [r for r in await rejections(nc, since) if r["submission_id"] == sid]

    [rejection] = await eventually(rejected)
    assert rejection["code"] == "PAYLOAD_TOO_LARGE"
    assert "JobSubmitted" in str(rejection["message"])
    assert await job_rows(endpoints, sid) == []
    reply = await api(nc, s.api_submit("nlp"), None, raw=raw)
    assert reply.error is not None and reply.error.code == "PAYLOAD_TOO_LARGE"
