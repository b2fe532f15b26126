"""Every answer about one job names it in its envelope (contracts/README.md, "Correlation"):
the request/reply helper every service answers through, and the submission API's replies."""

from __future__ import annotations

import json

from rota.bus.query import answer_query
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.ids import new_id
from rota_submission.app import reply_job_id

MAX = 64 * 1024


def _report() -> tuple[bytes, str, str]:
    run_id, job_id = new_id(), new_id()
    request = m.ReportCheckpoint(run_id=run_id, job_id=job_id, checkpoint_uri="s3://b/1",
                                 run_token="t" * 32)
    return envelope(request, source=f"run/{run_id}").to_bytes(), job_id, run_id


async def test_a_checkpoint_reports_answer_names_its_job_and_run() -> None:
    raw, job_id, run_id = _report()

    async def recorded(_: m.ReportCheckpoint) -> m.ApiReply:
        return m.ApiReply(ok=True, result={"recorded": True})

    answer = json.loads(await answer_query(raw, m.ReportCheckpoint, recorded, source="executor",
                                           max_bytes=MAX))
    assert (answer["job_id"], answer["run_id"]) == (job_id, run_id)
    assert answer["data"]["command_id"] == json.loads(raw)["id"]


async def test_a_refused_report_names_no_job() -> None:
    raw, _, _ = _report()

    async def refused(_: m.ReportCheckpoint) -> m.ApiReply:
        return m.ApiReply(ok=False, error=m.ApiError(code="UNAUTHORISED", field="run_token",
                                                     message="wrong token"))

    answer = json.loads(await answer_query(raw, m.ReportCheckpoint, refused, source="executor",
                                           max_bytes=MAX))
    assert (answer["job_id"], answer["run_id"]) == (None, None)


def test_the_submission_apis_replies_name_the_job_they_are_about() -> None:
    job_id = new_id()
    assert reply_job_id(m.ApiReply(ok=True, result={"job_id": job_id, "state": "pending"})) \
        == job_id
    assert reply_job_id(m.ApiReply(ok=True, result={"job": {"job_id": job_id},
                                                    "timeline": []})) == job_id
    assert reply_job_id(m.ApiReply(ok=True, result=[{"job_id": job_id}])) is None
    assert reply_job_id(m.ApiReply(ok=False, error=m.ApiError(
        code="JOB_NOT_FOUND", field="job_id", message="no job"))) is None
