"""The job page's details: periodic checkpoints as one row, the caused card's victims, times
in prose shown as times; and the jobs list's filters and pages."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from rota_console import joblist, views
from rota_console.pages import JobFilters
from rota_console.reader import OTHER_TEAM, PLATFORM, ApiFailure, Viewer
from rota_console.times import parse_time, prose, relative, time_html

from tests.unit.console.fixtures import CONFIG, NOW, job

NLP, PLATFORM_VIEWER = Viewer("nlp"), Viewer(PLATFORM)


def _event(kind: str, seconds: int, **data: Any) -> dict[str, Any]:
    return {"at": (NOW + timedelta(seconds=seconds)).isoformat(), "type": kind,
            "source": "executor", "summary": f"{kind} {seconds}", "data": data}


def test_consecutive_periodic_checkpoints_are_one_row_that_keeps_each_of_them() -> None:
    events = [_event("RunStarted", 0, run_id="r"),
              *[_event("RunCheckpointed", 10 * i, checkpoint_uri=f"file:///c/{i}") for i in range(1, 6)],
              _event("PreemptionNoticed", 60),
              _event("RunCheckpointed", 61, checkpoint_uri="file:///c/ack", notice_id="n"),
              _event("RunCheckpointed", 62, checkpoint_uri="file:///c/after"),
              _event("RunStopped", 63)]
    rows = views.collapse_checkpoints(events)
    assert [(r.type, len(r.collapsed)) for r in rows] == [
        ("RunStarted", 0), ("RunCheckpointed", 5), ("PreemptionNoticed", 0),
        ("RunCheckpointed", 0), ("RunCheckpointed", 0), ("RunStopped", 0)]
    group = rows[1]
    assert group.at == NOW + timedelta(seconds=50) and group.checkpoint_uri == "file:///c/5"
    assert group.summary == "5 checkpoints saved, the last file:///c/5"
    assert [c.checkpoint_uri for c in group.collapsed] == [f"file:///c/{i}" for i in range(1, 6)]
    # The acknowledgement of a notice is never folded away.
    assert rows[3].checkpoint_uri == "file:///c/ack"


def _caused_trace() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    row = job("release", queue="production", state="running")
    plan = {"plan_id": "p1", "role": "caused", "reason": "RECLAIM", "outcome": "completed",
            "requested_at": NOW.isoformat(), "noticed_at": None, "deadline": None,
            "acked_at": None, "victims": [
                {"job_id": "v-ours", "run_id": "r1", "job_name": "sweep", "team": "nlp",
                 "gpus": 4, "outcome": "acked", "lost_gpu_seconds": 12.0,
                 "checkpoint_uri": "file:///ckpt/sweep"},
                {"job_id": "v-theirs", "run_id": "r2", "job_name": "secret", "team": "vision",
                 "gpus": 2, "outcome": "forced", "lost_gpu_seconds": 90.0}]}
    saga = {"plan_id": "p1", "victims": [
        {"run_id": "r1", "noticed_at": NOW.isoformat(), "deadline": NOW.isoformat(),
         "acked_at": NOW.isoformat(), "checkpoint_uri": "file:///ckpt/sweep"},
        {"run_id": "r2", "noticed_at": NOW.isoformat()}]}
    trace = {"job": row, "trace_id": "ab" * 16, "timeline": [], "preemptions": [plan]}
    return trace, [saga]


def test_the_preemptors_caused_card_has_each_victims_notice_ack_outcome_and_loss() -> None:
    trace, sagas = _caused_trace()
    page = views.job_page(PLATFORM_VIEWER, {"state": "running"}, trace, [], jaeger_url=None,
                          notifications_error=None, now=NOW, plans=sagas)
    [plan] = page.preemptions
    ours, theirs = plan["victims"]
    assert (ours["job_name"], ours["noticed_at"], ours["acked_at"], ours["outcome"],
            ours["lost_gpu_seconds"]) == ("sweep", NOW.isoformat(), NOW.isoformat(), "acked", 12.0)
    assert theirs["job_name"] == "secret" and theirs["noticed_at"] == NOW.isoformat()


def test_a_team_sees_another_teams_victim_in_its_caused_card_only_as_gpus_and_outcome() -> None:
    trace, sagas = _caused_trace()
    page = views.job_page(NLP, {"state": "running"}, trace, [], jaeger_url=None,
                          notifications_error=None, now=NOW, plans=sagas)
    ours, theirs = page.preemptions[0]["victims"]
    assert ours["job_name"] == "sweep"
    assert theirs == {"team": OTHER_TEAM, "gpus": 2, "outcome": "forced", "state": None}


def test_the_caused_card_shows_the_traces_victims_when_the_coordinator_does_not_answer() -> None:
    trace, _ = _caused_trace()
    page = views.job_page(PLATFORM_VIEWER, {"state": "running"}, trace, [], jaeger_url=None,
                          notifications_error=None, now=NOW, plans=[])
    assert [v["outcome"] for v in page.preemptions[0]["victims"]] == ["acked", "forced"]


@pytest.mark.parametrize("text", ["2026-12-01T11:57:00+00:00", "2026-12-01 11:57:00.123456+00:00",
                                  "2026-12-01T11:57:00Z", "2026-12-01 11:57:00 UTC"])
def test_a_raw_time_in_prose_is_shown_as_a_time_and_how_long_ago(text: str) -> None:
    shown = prose(f"running since {text} (attempt 1)", NOW)
    assert text not in re.sub("<[^>]+>", "", shown)  # not in what a reader sees
    assert shown.startswith('running since <time datetime="2026-12-01T11:57:00')
    assert ">11:57:00</time> <span class=\"ago\">(3 min ago)</span> (attempt 1)" in shown


def test_prose_escapes_what_is_not_a_time() -> None:
    assert prose("<b>x</b> at 2026-13-45T99:00:00", NOW) == "&lt;b&gt;x&lt;/b&gt; at 2026-13-45T99:00:00"
    assert parse_time("not a time") is None


def test_relative_times_say_ago_or_in() -> None:
    assert relative(NOW + timedelta(minutes=5), NOW) == "in 5 min"
    assert relative(NOW - timedelta(seconds=30), NOW) == "30 s ago"
    assert relative(NOW - timedelta(hours=3), NOW) == "3 h ago"
    assert relative(NOW, NOW) == "just now"
    assert time_html(None) == "\u2013"


class ListingApi:
    """`Reader.jobs` as the submission service answers it: filtered, newest first, paged."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows, self.asked = rows, []  # type: ignore[var-annotated]

    async def jobs(self, viewer: Viewer, *, state: str | None = None, limit: int = 200,
                   **filters: Any) -> list[dict[str, Any]]:
        self.asked.append({"viewer": viewer.team, "state": state, "limit": limit, **filters})
        offset = filters.get("offset", 0)
        return self.rows[offset:offset + limit]


async def test_the_jobs_list_pages_by_offset_and_says_whether_there_is_a_next_page() -> None:
    api = ListingApi([job(f"j{i}") for i in range(7)])
    first = await joblist.jobs_page(api, NLP, CONFIG, {"limit": "3"}, NOW)  # type: ignore[arg-type]
    assert [j["name"] for j in first.jobs] == ["j0", "j1", "j2"] and first.has_next
    last = await joblist.jobs_page(api, NLP, CONFIG, {"limit": "3", "offset": "6"}, NOW)  # type: ignore[arg-type]
    assert [j["name"] for j in last.jobs] == ["j6"] and not last.has_next
    assert api.asked[-1]["limit"] == 4 and api.asked[-1]["offset"] == 6
    assert joblist.page_url(JobFilters(search="sw", state="pending"), 50, 50) == (
        "/jobs?q=sw&state=pending&offset=50")


async def test_the_jobs_list_passes_every_filter_to_the_api() -> None:
    api = ListingApi([])
    page = await joblist.jobs_page(api, PLATFORM_VIEWER, CONFIG, {  # type: ignore[arg-type]
        "q": " sweep ", "team": "vision", "user": "alice", "state": "pending",
        "queue": "training"}, NOW)
    assert api.asked == [{"viewer": PLATFORM, "state": "pending", "limit": 51, "offset": 0,
                          "search": "sweep", "team": "vision", "user": "alice",
                          "queue": "training"}]
    assert page.teams == ["nlp", "vision", "research"]


@pytest.mark.parametrize(("params", "field"), [
    ({"state": "sleeping"}, "state"), ({"queue": "gold"}, "queue"), ({"team": "nobody"}, "team"),
    ({"offset": "-1"}, "offset"), ({"limit": "100000"}, "limit")])
async def test_the_jobs_list_refuses_a_filter_that_cannot_match_naming_it(
        params: dict[str, str], field: str) -> None:
    with pytest.raises(ApiFailure) as refused:
        await joblist.jobs_page(ListingApi([]), PLATFORM_VIEWER, CONFIG, params, NOW)  # type: ignore[arg-type]
    assert refused.value.field == field


async def test_a_team_may_filter_only_by_its_own_team() -> None:
    api = ListingApi([])
    page = await joblist.jobs_page(api, NLP, CONFIG, {"team": "nlp"}, NOW)  # type: ignore[arg-type]
    assert page.teams == ["nlp"]
    with pytest.raises(ApiFailure) as refused:
        await joblist.jobs_page(api, NLP, CONFIG, {"team": "vision"}, NOW)  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.field) == ("UNAUTHORISED", "team")
    assert len(api.asked) == 1
