"""The jobs list: search by name or id, filters by team, user, state and queue, and pages, as
a batch system's job browser has them (Armada's Lookout, `squeue -u -n -t -p`).

The filters go to the API's `ListJobs` as they are: the submission service filters and pages
in its query, and a team viewer's question goes to its own team's subject, where the service
answers only about that team. Pure but for the one read, so each rule is unit-tested alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, get_args
from urllib.parse import urlencode

from rota.config import RotaConfig
from rota.contracts import messages as m
from rota.contracts.common import TIER_ORDER

from rota_console.pages import JobFilters, JobsPage
from rota_console.reader import ApiFailure, Reader, Viewer

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
STATES = list(get_args(m.JobStateName))
QUEUES = [t.value for t in TIER_ORDER]
PARAMS = {"q": "search", "team": "team", "user": "user", "state": "state", "queue": "queue"}
"""URL parameter → filter."""


def _int(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name) or ""
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise ApiFailure("INVALID_FIELD", f"a whole number from {low} to {high}", name)
    return int(text)


def filters_of(params: dict[str, str], viewer: Viewer, config: RotaConfig) -> JobFilters:
    """The filters a URL asks for (empty = any), checked here where the API would say it less
    plainly: a state or queue that does not exist, or a team the viewer may not read."""
    asked = {field: (params.get(param) or "").strip() or None for param, field in PARAMS.items()}
    if asked["state"] is not None and asked["state"] not in STATES:
        raise ApiFailure("INVALID_FIELD", f"one of {', '.join(STATES)}", "state")
    if asked["queue"] is not None and asked["queue"] not in QUEUES:
        raise ApiFailure("INVALID_FIELD", f"one of {', '.join(QUEUES)}", "queue")
    team = asked["team"]
    if team is not None and not viewer.may_see(team):
        raise ApiFailure("UNAUTHORISED", f"team {viewer.team} may not read team {team}", "team")
    if team is not None and team not in config.teams:
        raise ApiFailure("INVALID_FIELD", f"no team {team!r} in rota.yaml", "team")
    return JobFilters.model_validate(asked)


def page_url(filters: JobFilters, offset: int, limit: int) -> str:
    """The list's URL for these filters at `offset`: what the next and previous links are."""
    params = {param: getattr(filters, field) for param, field in PARAMS.items()
              if getattr(filters, field)}
    if offset:
        params["offset"] = str(offset)
    if limit != PAGE_SIZE:
        params["limit"] = str(limit)
    return "/jobs" + (f"?{urlencode(params)}" if params else "")


async def jobs_page(api: Reader, viewer: Viewer, config: RotaConfig, params: dict[str, str],
                    now: datetime) -> JobsPage:
    filters = filters_of(params, viewer, config)
    offset = _int(params, "offset", 0, 0, 1_000_000)
    limit = _int(params, "limit", PAGE_SIZE, 1, MAX_PAGE_SIZE)
    # One more than a page: whether there is a next page, without counting every match.
    rows: list[dict[str, Any]] = await api.jobs(
        viewer, state=filters.state, limit=limit + 1, offset=offset, search=filters.search,
        team=filters.team, user=filters.user, queue=filters.queue)
    teams = list(config.teams) if viewer.is_platform else [viewer.team]
    return JobsPage(viewer=viewer.team, generated_at=now, filters=filters, jobs=rows[:limit],
                    offset=offset, limit=limit, has_next=len(rows) > limit, teams=teams,
                    states=STATES, queues=QUEUES)
