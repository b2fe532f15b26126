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


async def test_jobs_are_searched_by_a_part_of_the_name_or_the_id_and_paged(
        nc: Client, submission: ServiceProcess) -> None:
    ids: dict[str, str] = {}
    for team, name in (("nlp", "Search-Alpha"), ("nlp", "search-beta"), ("nlp", "other"),
                       ("research", "search-gamma")):
        member = {"research": {"user": "dave", "queue": "experiment"}}.get(team, {})
        reply = await api(nc, s.api_submit(team), submit_job(team=team, name=name, **member))
        assert reply.ok, reply.error
        ids[name] = reply.result["job_id"]
    found = await api(nc, s.API_JOBS_LIST, m.ListJobs(search="SEARCH-", limit=1000))
    named = {row["name"] for row in found.result}
    assert {"Search-Alpha", "search-beta", "search-gamma"} <= named and "other" not in named
    # By the short id (the id's last 12 characters), and by the id's start.
    for part in (ids["other"][-12:], ids["other"][:13]):
        by_id = await api(nc, s.API_JOBS_LIST, m.ListJobs(search=part, limit=1000))
        assert ids["other"] in [row["job_id"] for row in by_id.result], part
    # `_`, a LIKE wildcard, is a character like any other: no name has one.
    assert (await api(nc, s.API_JOBS_LIST, m.ListJobs(search="search_", limit=1000))).result == []
    # A team's own subject searches only that team's jobs.
    scoped = await api(nc, s.team_query(s.API_JOBS_LIST, "nlp"), m.ListJobs(search="search-"))
    assert {row["team"] for row in scoped.result} == {"nlp"}
    refused = await api(nc, s.team_query(s.API_JOBS_LIST, "nlp"), m.ListJobs(team="research"))
    assert refused.error is not None and refused.error.code == "UNAUTHORISED"
    # Pages: newest first, each page the next `limit` after `offset`, no job twice.
    everyone = (await api(nc, s.API_JOBS_LIST, m.ListJobs(search="search-", limit=1000))).result
    pages = [(await api(nc, s.API_JOBS_LIST,
                        m.ListJobs(search="search-", limit=2, offset=offset))).result
             for offset in range(0, len(everyone) + 2, 2)]
    assert [row["job_id"] for page in pages for row in page] == [r["job_id"] for r in everyone]
    assert pages[-1] == []
