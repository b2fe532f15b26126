"""Every NATS subject Rota uses, in one place."""

from __future__ import annotations

STREAM_CMD = "ROTA_CMD"
STREAM_EVT = "ROTA_EVT"
STREAM_CTL = "ROTA_CTL"

SUBMIT_PREFIX = "rota.cmd.submit"
SUBMIT_ALL = f"{SUBMIT_PREFIX}.*"
CANCEL_ALL = "rota.cmd.cancel.*"
RUN_START = "rota.cmd.run.start"
RUN_STOP = "rota.cmd.run.stop"

STREAM_SUBJECTS: dict[str, list[str]] = {
    # Exactly what the durable consumers read: a command on any other subject (a team token
    # with a dot in it, `rota.cmd.submit.ml.nlp`) is refused by JetStream at publish ("no
    # stream") instead of being acknowledged and then never read.
    STREAM_CMD: [SUBMIT_ALL, CANCEL_ALL, RUN_START, RUN_STOP],
    STREAM_EVT: ["rota.evt.>"],
    STREAM_CTL: ["rota.ctl.>"],
}

API_PREFIX = "rota.api"
API_ALL = "rota.api.>"
API_SUBMIT = "rota.api.submit"
API_JOB_GET = "rota.api.job.get"
API_CANCEL = "rota.api.cancel"
API_JOB_WHY = "rota.api.job.why"
API_JOB_TRACE = "rota.api.job.trace"
API_JOBS_LIST = "rota.api.jobs.list"
API_QUEUES_SUMMARY = "rota.api.queues.summary"
API_NODE_DRAIN = "rota.api.node.drain"
API_NODE_UNDRAIN = "rota.api.node.undrain"
ADMIN_COMMANDS = frozenset({API_NODE_DRAIN, API_NODE_UNDRAIN})
"""Unscoped, with no `.<team>` twin: no team identity (nor the console) may publish here, so
only the admin and the services can (rota.auth.permissions)."""
API_PING = "rota.api.ping"
"""`rota.api.ping.<team>`: a team's liveness check (and the protocol version), answered by
the submission service, which is all a team talks to."""

TEAM_QUERIES = frozenset({API_JOB_GET, API_JOB_WHY, API_JOB_TRACE, API_JOBS_LIST,
                          API_QUEUES_SUMMARY})
"""Each also answers on `<subject>.<team>`, scoped to that team: a team identity may
publish only there (rota.auth.permissions.team_permissions)."""

SYS_PING = "rota.sys.ping"
SYS_DEADLETTER = "rota.sys.deadletter"
NOTIFICATIONS_LIST = "rota.sys.notifier.list"
LEDGER_ALLOCATIONS = "rota.sys.ledger.allocations"
PREEMPTION_PLANS = "rota.sys.preemption.plans"
SCHEDULER_WHY = "rota.sys.scheduler.why"
"""The scheduler's leader explains a pending job afresh, for `rota why` (rota_scheduler.asking)."""
SCHEDULER_NODES = "rota.sys.scheduler.nodes"


def submit(team: str) -> str:
    return f"{SUBMIT_PREFIX}.{team}"


def cancel(team: str) -> str:
    return f"rota.cmd.cancel.{team}"


def api_submit(team: str) -> str:
    return f"{API_SUBMIT}.{team}"


def api_cancel(team: str) -> str:
    return f"{API_CANCEL}.{team}"


def api_ping(team: str) -> str:
    return f"{API_PING}.{team}"


def team_query(subject: str, team: str) -> str:
    return f"{subject}.{team}"


def subject_team(subject: str, prefix: str) -> str | None:
    """The team `<prefix>.<team>` is scoped to, None for `prefix` itself (unscoped), and ""
    for a subject not under `prefix`. Everything after the prefix counts: on
    `rota.api.cancel.ml.nlp` the team is `ml.nlp`, which is no team's name, never `nlp`."""
    if subject == prefix:
        return None
    return subject.removeprefix(f"{prefix}.") if subject.startswith(f"{prefix}.") else ""


def control(run_id: str) -> str:
    return f"rota.ctl.run.{run_id}"


RUN_CHECKPOINT_ALL = "rota.run.checkpoint.*"
RUN_PROTOCOL = "rota.run.>"
"""Core NATS only, never captured by a stream: the run's requests carry its token."""


def run_checkpoint(run_id: str) -> str:
    """Where a run reports its checkpoints (and acknowledges a notice): a request to the
    executor, which answers once it has recorded it."""
    return f"rota.run.checkpoint.{run_id}"


FEED_PREFIX = "rota.feed"


def feed(team: str, event_subject: str) -> str:
    """A team's live copy of one of its jobs' events: `rota.evt.run.started` of a job of team
    `nlp` is also on `rota.feed.nlp.run.started` (core NATS, published by submission)."""
    return f"{FEED_PREFIX}.{team}.{event_subject.removeprefix('rota.evt.')}"


FEED_TYPES = frozenset({
    "JobSubmitted", "JobResubmitted", "JobRejected", "JobCancelled", "JobPending",
    "AllocationGranted", "AllocationRejected", "AllocationReleased", "RunStarted",
    "RunCheckpointed", "RunFinished", "RunFailed", "RunStopped", "PreemptionNoticed",
})
"""The event types a team's feed carries: those about one job (a plan names several teams'
jobs, and the services' bookkeeping is no team's business)."""


def team_feed(team: str) -> str:
    return f"{FEED_PREFIX}.{team}.>"


def ping(service: str) -> str:
    return f"{SYS_PING}.{service}"


def replica_ping(service: str, replica: int) -> str:
    """Replica `replica` of a service with several (`ROTA_REPLICA`) also answers here."""
    return f"{SYS_PING}.{service}.{replica}"


def deadletter(service: str) -> str:
    return f"{SYS_DEADLETTER}.{service}"


EVENT_SUBJECTS: dict[str, str] = {
    "JobSubmitted": "rota.evt.job.submitted",
    "JobResubmitted": "rota.evt.job.resubmitted",
    "JobRejected": "rota.evt.job.rejected",
    "JobCancelled": "rota.evt.job.cancelled",
    "JobPending": "rota.evt.job.pending",
    "AllocationProposed": "rota.evt.allocation.proposed",
    "AllocationGranted": "rota.evt.allocation.granted",
    "AllocationRejected": "rota.evt.allocation.rejected",
    "AllocationReleased": "rota.evt.allocation.released",
    "UsageRecorded": "rota.evt.usage.recorded",
    "BudgetUsageRecorded": "rota.evt.budget.recorded",
    "RunStarted": "rota.evt.run.started",
    "RunCheckpointed": "rota.evt.run.checkpointed",
    "RunFinished": "rota.evt.run.finished",
    "RunFailed": "rota.evt.run.failed",
    "RunStopped": "rota.evt.run.stopped",
    "PreemptionRequested": "rota.evt.preemption.requested",
    "PreemptionNoticed": "rota.evt.preemption.noticed",
    "PreemptionCompleted": "rota.evt.preemption.completed",
    "GrowRequested": "rota.evt.grow.requested",
    "GrowCompleted": "rota.evt.grow.completed",
    "NodeWithdrawn": "rota.evt.node.withdrawn",
    "NodeRestored": "rota.evt.node.restored",
    "NodeDrainRequested": "rota.evt.node.drain_requested",
    "NodeDrainCancelled": "rota.evt.node.drain_cancelled",
    "RunEvictionRequested": "rota.evt.run.eviction_requested",
    "ExecutorAnnounced": "rota.evt.executor.announced",
}
