"""Every read the console makes, and its one write, through Rota's NATS API.

A viewer is a team or the platform. A team viewer's questions go to the team-scoped subjects
(`rota.api.<query>.<team>`), where the submission service answers only about that team, exactly
as for the team's own credentials; the console never widens them. The platform-wide
`rota.sys.*` lists (allocations, preemption plans, notifications) are filtered to the team
here, keeping only what the team's own scoped reads could have told it, or what is anonymous
occupancy (a GPU in use by someone else).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import BaseModel
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s

SOURCE = "console"
PLATFORM = "*"
"""The viewer who sees every team: the platform team behind the proxy, or the admin."""


@dataclass(frozen=True)
class Viewer:
    team: str
    """A team's name, or `PLATFORM`."""

    @property
    def is_platform(self) -> bool:
        return self.team == PLATFORM

    def may_see(self, team: str | None) -> bool:
        return self.is_platform or team == self.team

    @property
    def label(self) -> str:
        return "platform (every team)" if self.is_platform else f"team {self.team}"


class ApiFailure(Exception):
    """The API said no, or did not answer: `code` is the API's (NOT_FOUND, UNAVAILABLE ...)."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


class Reader:
    def __init__(self, nc: Client, *, timeout_s: float = 5.0) -> None:
        self.nc = nc
        self.timeout_s = timeout_s

    async def request(self, subject: str, data: BaseModel) -> Any:
        try:
            raw = await self.nc.request(subject, envelope(data, source=SOURCE).to_bytes(),
                                        timeout=self.timeout_s)
        except NoRespondersError:
            raise ApiFailure("UNAVAILABLE", f"no service answers {subject}") from None
        except NatsTimeout:
            raise ApiFailure("UNAVAILABLE", f"no answer on {subject} in {self.timeout_s:g} s",
                             ) from None
        reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
        if not reply.ok:
            error = reply.error or m.ApiError(code="INTERNAL", message="no error given")
            raise ApiFailure(error.code, error.message, error.field)
        return reply.result

    def _scoped(self, subject: str, viewer: Viewer) -> str:
        return subject if viewer.is_platform else s.team_query(subject, viewer.team)

    async def queues(self, viewer: Viewer) -> list[dict[str, Any]]:
        rows = await self.request(self._scoped(s.API_QUEUES_SUMMARY, viewer), m.SummarizeQueues())
        return list(rows)

    async def jobs(self, viewer: Viewer, *, state: str | None = None, limit: int = 200,
                   **filters: Any) -> list[dict[str, Any]]:
        """The newest jobs the viewer may see; `filters` are `ListJobs`' others (team, queue,
        user, search, offset). A team viewer asks its own team's subject, where the service
        answers only about that team (and refuses another team's name)."""
        query = m.ListJobs.model_validate({"state": state, "limit": limit, **filters})
        return list(await self.request(self._scoped(s.API_JOBS_LIST, viewer), query))

    async def why(self, viewer: Viewer, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            self._scoped(s.API_JOB_WHY, viewer), m.GetJob(job_id=job_id))
        return result

    async def trace(self, viewer: Viewer, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            self._scoped(s.API_JOB_TRACE, viewer), m.GetJob(job_id=job_id))
        return result

    async def notifications(self, viewer: Viewer, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The notifications about `job`, a job the viewer's scoped read returned."""
        if not viewer.may_see(job.get("team")):
            return []
        rows = await self.request(s.NOTIFICATIONS_LIST,
                                  m.ListNotifications(job_id=job["job_id"], limit=200))
        return list(rows)

    async def allocations(self) -> list[dict[str, Any]]:
        """Every active allocation; callers anonymise other teams' (`views.cluster`)."""
        result = await self.request(s.LEDGER_ALLOCATIONS, m.ListAllocations(limit=10_000))
        return list(result["allocations"])

    async def plans(self, viewer: Viewer, *, open_only: bool = False, limit: int = 100,
                    job_id: str | None = None) -> list[dict[str, Any]]:
        """Preemption sagas (those of `job_id`, as preemptor or victim); a team sees those its
        jobs took part in, and of the other teams' victims only how many GPUs they gave up."""
        rows = await self.request(s.PREEMPTION_PLANS,
                                  m.ListPreemptions(open=open_only, limit=limit, job_id=job_id))
        if viewer.is_platform:
            return list(rows)
        return [redact_plan(plan, viewer) for plan in rows
                if plan.get("preemptor_team") == viewer.team
                or any(v.get("team") == viewer.team for v in plan.get("victims", []))]

    async def cancel(self, viewer: Viewer, job: dict[str, Any], reason: str) -> dict[str, Any]:
        """Cancel a job of the viewer's own team: always on the team's own subject, so the
        submission service refuses another team's job even if a check here were wrong."""
        if viewer.is_platform or job.get("team") != viewer.team:
            raise ApiFailure("UNAUTHORISED", f"only team {job.get('team')} may cancel this job",
                             "job_id")
        result: dict[str, Any] = await self.request(
            s.api_cancel(viewer.team),
            m.CancelJob(job_id=job["job_id"], team=viewer.team, reason=reason))
        return result


OTHER_TEAM = "another team"


def redact_plan(plan: dict[str, Any], viewer: Viewer) -> dict[str, Any]:
    """A plan as a team may see it: other teams' victims keep their GPUs and outcome only."""
    ours = plan.get("preemptor_team") == viewer.team
    victims = []
    for victim in plan.get("victims", []):
        if victim.get("team") == viewer.team:
            victims.append(victim)
        else:
            victims.append({"team": OTHER_TEAM, "gpus": victim.get("gpus"),
                            "state": victim.get("state"), "outcome": victim.get("outcome"),
                            **({"gpu_share": victim["gpu_share"]} if victim.get("gpu_share") else {})})
    redacted = {**plan, "victims": victims}
    if not ours:
        redacted.update(preemptor_job_id=None, preemptor_team=OTHER_TEAM, message=None)
    return redacted
