"""A job's short id: the last 12 characters of its id, unique in practice, where the first
characters (a UUIDv7's timestamp) are shared by every job submitted in the same moment."""

from __future__ import annotations

from nats.aio.client import Client
from rota.contracts import messages as m
from rota.contracts import subjects as s

from tests.builders import submit_job
from tests.integration.harness import ServiceProcess, api


async def test_jobs_submitted_together_are_told_apart_by_their_short_ids(
    nc: Client, submission: ServiceProcess
) -> None:
    job_ids = []
    for i in range(3):
        reply = await api(nc, s.api_submit("nlp"), submit_job(name=f"together-{i}"))
        assert reply.ok, reply.error
        job_ids.append(reply.result["job_id"])
    prefix = await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_ids[0][:8]))
    assert prefix.error is not None and prefix.error.code == "AMBIGUOUS_ID"  # one timestamp

    listed = await api(nc, s.API_JOBS_LIST, m.ListJobs(team="nlp", limit=3))
    shorts = {row["job_id"]: row["short_id"] for row in listed.result}
    for job_id in job_ids:
        assert shorts[job_id] == job_id[-12:]
        for subject in (s.API_JOB_GET, s.API_JOB_WHY, s.team_query(s.API_JOB_TRACE, "nlp")):
            found = await api(nc, subject, m.GetJob(job_id=shorts[job_id]))
            assert found.ok, (subject, found.error)
            got = found.result["job"] if "timeline" in found.result else found.result
            assert got["job_id"] == job_id
        tail = await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_id[-8:]))
        assert tail.ok and tail.result["job_id"] == job_id and tail.result["short_id"] == shorts[job_id]
        full = await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_id))
        assert full.ok and full.result["job_id"] == job_id
    other_team = await api(nc, s.team_query(s.API_JOB_GET, "vision"),
                           m.GetJob(job_id=shorts[job_ids[0]]))
    assert other_team.error is not None and other_team.error.code == "JOB_NOT_FOUND"


async def test_jobs_are_listed_by_user_and_by_name(nc: Client, submission: ServiceProcess) -> None:
    mine = {}
    for user, name in (("alice", "by-user-a"), ("bob", "by-user-b"), ("alice", "by-user-c")):
        reply = await api(nc, s.api_submit("nlp"), submit_job(user=user, name=name))
        assert reply.ok, reply.error
        mine[reply.result["job_id"]] = (user, name)
    by_name = await api(nc, s.API_JOBS_LIST, m.ListJobs(name="by-user-b"))
    assert [row["job_id"] for row in by_name.result] == [
        job_id for job_id, (_, name) in mine.items() if name == "by-user-b"]
    by_user = await api(nc, s.API_JOBS_LIST, m.ListJobs(team="nlp", user="alice", limit=1000))
    assert by_user.ok and {row["user_name"] for row in by_user.result} == {"alice"}
    assert {j for j, (user, _) in mine.items() if user == "alice"} <= {
        row["job_id"] for row in by_user.result}
    scoped = await api(nc, s.team_query(s.API_JOBS_LIST, "nlp"), m.ListJobs(user="bob", name="by-user-b"))
    assert [row["job_id"] for row in scoped.result] == [
        job_id for job_id, (_, name) in mine.items() if name == "by-user-b"]
