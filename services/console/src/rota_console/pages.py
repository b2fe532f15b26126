"""What each page shows, as typed models: the HTML renders them, the JSON twin is them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class Page(BaseModel):
    model_config = ConfigDict(extra="forbid")

    viewer: str
    generated_at: datetime


class QueueRow(BaseModel):
    team: str
    flavor: str
    pending_jobs: int
    pending_gpus: int | float
    """A GPU share counts its fraction of one GPU (0.5)."""
    running_jobs: int
    gpus_in_use: int | float
    quota: int
    borrowed_gpus: int
    oldest_pending_at: datetime | None = None


class WaitingJob(BaseModel):
    job_id: str
    short_id: str
    name: str
    team: str
    waited_s: float
    primary_reason: str
    message: str
    eta: datetime | None = None
    title: str = ""
    """The primary reason in a few words (`rota.waits.title`)."""


class QueueDiagnosis(BaseModel):
    team: str
    flavor: str
    cause: str
    """quota_too_low, flavor_too_narrow, request_too_large, fragmentation, queue_weight, capacity."""
    long_waiters: int
    message: str


class TierBlock(BaseModel):
    tier: str
    rows: list[QueueRow]
    longest_waits: list[WaitingJob]
    diagnoses: list[QueueDiagnosis]


class QueuesPage(Page):
    tiers: list[TierBlock]
    borrowers: list[str]
    """Teams using GPUs above their quota right now."""
    jobs: list[dict[str, Any]]
    """The newest jobs the viewer may see (the API's job rows)."""


class Reason(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = {}
    title: str = ""
    """The code in a few words (`rota.waits.title`): what the page shows, with the message."""
    ends_at: datetime | None = None
    """When what holds the job ends, for a hold (`rota.waits.ends_at`)."""


class Factor(BaseModel):
    name: str
    value: float
    percent: float
    """Its share of the sum of the factors' magnitudes: the bar's width."""


class TimelineEntry(BaseModel):
    at: datetime
    type: str
    source: str
    summary: str
    checkpoint_uri: str | None = None
    collapsed: list[TimelineEntry] = []
    """Consecutive periodic checkpoints shown as this one row (the last of them), each here:
    `at` is the last one's, `checkpoint_uri` the last URI."""


class Notification(BaseModel):
    kind: str
    channel: str
    status: str
    created_at: datetime | None = None
    sent_at: datetime | None = None


class JobPage(Page):
    job: dict[str, Any]
    state: str
    eta_basis: str | None = None
    """What the ETA rests on, in words (`rota.waits.eta_basis`)."""
    no_eta: str | None = None
    """Why a pending job has no ETA, in words (`rota.waits.no_eta`)."""
    position: int | None = None
    eta: datetime | None = None
    summary: str | None = None
    reasons: list[Reason]
    factors: list[Factor]
    timeline: list[TimelineEntry]
    preemptions: list[dict[str, Any]]
    notifications: list[Notification]
    notifications_error: str | None = None
    trace_id: str
    jaeger_link: str | None = None
    can_cancel: bool


class GpuCell(BaseModel):
    index: int
    team: str | None = None
    """None: idle. Another team's GPU, for a team viewer, is `another team`."""
    tier: str | None = None
    job_id: str | None = None
    job_name: str | None = None
    borrowed: bool = False
    preempting: bool = False
    """Its run is a victim of a preemption in progress."""


class NodeCells(BaseModel):
    name: str
    rack: str
    flavor: str
    gpus: list[GpuCell]


class PendingPreemption(BaseModel):
    plan_id: str
    state: str
    preemptor_team: str
    reason: str = ""
    """`drain`: a node drain's plan, for no team (DECISIONS 100)."""
    victim_gpus: int | float
    """A GPU share victim counts its fraction of one GPU."""


class JobFilters(BaseModel):
    """What the jobs list was asked for: each filter, or None for any."""

    search: str | None = None
    """A part of the name (any case), or of the id from its start or end."""
    team: str | None = None
    user: str | None = None
    state: str | None = None
    queue: str | None = None


class JobsPage(Page):
    filters: JobFilters
    jobs: list[dict[str, Any]]
    """This page of the jobs that match, newest first (the API's job rows)."""
    offset: int
    limit: int
    has_next: bool
    teams: list[str]
    """The teams the viewer may filter by: every team for the platform, else its own."""
    states: list[str]
    queues: list[str]


class ClusterPage(Page):
    nodes: list[NodeCells]
    teams: list[str]
    gpus_total: int
    gpus_in_use: int
    pending_preemptions: list[PendingPreemption]


class SharePoint(BaseModel):
    at: datetime
    usage_share: float
    """The team's part of all teams' decayed usage, 0 to 1."""


class TeamShare(BaseModel):
    team: str
    share: float
    """Its part of the quotas (its fair share), 0 to 1."""
    usage_share: float
    series: list[SharePoint]


class FairSharePage(Page):
    half_life_s: float
    sample_interval_s: float
    teams: list[TeamShare]


class PreemptionsPage(Page):
    plans: list[dict[str, Any]]
    """Each saga as the preemption coordinator reports it: its victims with notice, deadline,
    acknowledgement or forced stop, checkpoint and lost GPU-seconds."""


PAGE_MODELS: dict[str, type[Page]] = {
    "queues": QueuesPage, "job": JobPage, "cluster": ClusterPage, "fairshare": FairSharePage,
    "preemptions": PreemptionsPage, "jobs": JobsPage,
}
