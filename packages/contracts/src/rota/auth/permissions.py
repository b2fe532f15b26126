"""Who may publish and subscribe to what: the one table that the server config, the shipped
deploy files and the consumers' sender checks are all made from (contracts/README.md,
"Who publishes what").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rota.contracts.common import TEAM_NAME_RULE, is_team_name
from rota.contracts.subjects import (
    API_CANCEL,
    EVENT_SUBJECTS,
    FEED_PREFIX,
    LEDGER_ALLOCATIONS,
    NOTIFICATIONS_LIST,
    PREEMPTION_PLANS,
    RUN_PROTOCOL,
    RUN_START,
    RUN_STOP,
    SCHEDULER_WHY,
    STREAM_CMD,
    STREAM_CTL,
    STREAM_EVT,
    STREAM_SUBJECTS,
    TEAM_QUERIES,
    api_cancel,
    api_ping,
    api_submit,
    cancel,
    run_checkpoint,
    submit,
    team_feed,
    team_query,
)

SERVICES = ("submission", "ledger", "scheduler", "preemption", "notifier", "executor")

EVENT_OWNERS: dict[str, frozenset[str]] = {
    "JobSubmitted": frozenset({"submission"}),
    "JobResubmitted": frozenset({"submission"}),
    "JobRejected": frozenset({"submission"}),
    "JobCancelled": frozenset({"submission"}),
    "JobPending": frozenset({"scheduler"}),
    "AllocationProposed": frozenset({"scheduler"}),
    "AllocationGranted": frozenset({"ledger"}),
    "AllocationRejected": frozenset({"ledger"}),
    "AllocationReleased": frozenset({"ledger"}),
    "UsageRecorded": frozenset({"ledger"}),
    "BudgetUsageRecorded": frozenset({"scheduler"}),
    "RunStarted": frozenset({"executor"}),
    # A job's own report reaches the executor by request (`ReportCheckpoint`, with its run
    # token); the executor publishes the token-free event once the token is verified.
    "RunCheckpointed": frozenset({"executor"}),
    "RunFinished": frozenset({"executor"}),
    "RunFailed": frozenset({"executor"}),
    # The scheduler records the stop of a run that was granted but never started.
    "RunStopped": frozenset({"executor", "scheduler"}),
    "PreemptionRequested": frozenset({"scheduler"}),
    "PreemptionNoticed": frozenset({"preemption"}),
    "PreemptionCompleted": frozenset({"preemption"}),
    "GrowRequested": frozenset({"scheduler"}),
    "GrowCompleted": frozenset({"preemption"}),
    "NodeWithdrawn": frozenset({"executor"}),
    "NodeRestored": frozenset({"executor"}),
    # An admin's drain comes through the API (submission); a cordon through the executor.
    "NodeDrainRequested": frozenset({"submission", "executor"}),
    "NodeDrainCancelled": frozenset({"submission", "executor"}),
    # A Kubernetes EvictionRequest for a run's pod, seen by the executor's watch.
    "RunEvictionRequested": frozenset({"executor"}),
    # What each executor replica can run, for the scheduler's hold (NO_EXECUTOR).
    "ExecutorAnnounced": frozenset({"executor"}),
}
"""Every event type and the services that may publish it."""

COMMAND_OWNERS: dict[str, frozenset[str]] = {
    RUN_START: frozenset({"scheduler"}),
    RUN_STOP: frozenset({"scheduler", "preemption"}),
}

SERVICE_REQUESTS: dict[str, tuple[str, ...]] = {
    # The scheduler reconciles its view with the ledger's allocations at start.
    "scheduler": ("rota.sys.ledger.allocations",),
    "preemption": ("rota.ctl.run.*",),
    # Each team's live feed of its own jobs' events (rota_submission.feed), and `rota why`
    # asked of the scheduler afresh (rota_scheduler.asking).
    "submission": (f"{FEED_PREFIX}.>", SCHEDULER_WHY),
}

SERVICE_STREAMS: dict[str, tuple[str, ...]] = {
    "submission": (STREAM_CMD, STREAM_EVT),
    "ledger": (STREAM_EVT,),
    "scheduler": (STREAM_EVT,),
    "preemption": (STREAM_EVT,),
    "notifier": (STREAM_EVT,),
    "executor": (STREAM_CMD, STREAM_CTL),
}
"""The streams each service consumes: its durables, and the scheduler's replay."""

LEASE_BUCKETS: dict[str, str] = {
    # A single active scheduler (rota.lease), and ledger replicas owning their flavors
    # (rota_ledger.owners): each a NATS KV bucket, which is a stream `KV_<bucket>`.
    "scheduler": "rota_scheduler_lease",
    "ledger": "rota_ledger_lease",
}

_API = "$JS.API"
_SERVICE_INBOX = "_INBOX.>"


def jetstream_subjects(service: str) -> tuple[str, ...]:
    """The JetStream API a service uses, and no more: the account's and the streams' info,
    its consumers on the streams it reads (create or update, info, list, fetch, ack, flow
    control), direct gets there, and its lease bucket's keys. Creating, updating, purging
    or deleting a stream (a KV bucket included), and deleting a consumer, are the admin's:
    `rota up` and `rota migrate` make the streams and buckets as the admin. Consumer names
    are not bound to the service (partitioned and per-flavor durables are named at start)."""
    reads = SERVICE_STREAMS[service]
    bucket = LEASE_BUCKETS.get(service)
    kv = (f"KV_{bucket}",) if bucket else ()
    return (
        f"{_API}.INFO", f"{_API}.STREAM.NAMES",
        *(f"{_API}.STREAM.INFO.{stream}" for stream in (*STREAM_SUBJECTS, *kv)),
        *(subject for stream in reads for subject in (
            f"{_API}.CONSUMER.CREATE.{stream}", f"{_API}.CONSUMER.CREATE.{stream}.>",
            f"{_API}.CONSUMER.DURABLE.CREATE.{stream}.*", f"{_API}.CONSUMER.INFO.{stream}.*",
            f"{_API}.CONSUMER.LIST.{stream}", f"{_API}.CONSUMER.NAMES.{stream}",
            f"{_API}.CONSUMER.MSG.NEXT.{stream}.*", f"$JS.ACK.{stream}.>",
            f"$JS.FC.{stream}.>")),
        *(f"{_API}.DIRECT.GET.{stream}.>" for stream in (*reads, *kv)),
        *(f"{_API}.STREAM.MSG.GET.{stream}" for stream in kv),
        *((f"$KV.{bucket}.>",) if bucket else ()),
    )


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    # May answer the requests it receives (a reply subject it was given), nothing more.
    responses: bool = False
    inbox_prefix: str = "_INBOX"
    tags: tuple[str, ...] = field(default=())
    subscribe_deny: tuple[str, ...] = field(default=())


RUN_TOKEN_READER = "executor"


def service_permissions(service: str) -> Permissions:
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}")
    events = sorted(EVENT_SUBJECTS[t] for t, owners in EVENT_OWNERS.items() if service in owners)
    commands = sorted(s for s, owners in COMMAND_OWNERS.items() if service in owners)
    return Permissions(
        publish=(*events, *commands, *SERVICE_REQUESTS.get(service, ()),
                 *jetstream_subjects(service)),
        subscribe=("rota.>", _SERVICE_INBOX),
        responses=True,
        tags=(f"service:{service}",),
        # A run's reports carry its token: only the executor, which checks them, reads them.
        subscribe_deny=() if service == RUN_TOKEN_READER else (RUN_PROTOCOL,),
    )


def team_inbox(team: str) -> str:
    return f"_INBOX_team_{team}"


def team_subjects(team: str) -> tuple[str, ...]:
    """Every subject a team may publish on, each named in full: no wildcard, so the team's
    token is always the subject's last and no team's subjects match another's or an unscoped
    one (with `rota.api.*.{team}`, a team named `list` could ask `rota.api.jobs.list`, the
    platform's view of every team)."""
    return (submit(team), cancel(team), api_submit(team), api_cancel(team),
            *(team_query(query, team) for query in sorted(TEAM_QUERIES)), api_ping(team))


def team_permissions(team: str) -> Permissions:
    """Its own commands and requests, its own replies, its own jobs' live events, and nothing
    else: no `$JS.API`, so no stream of anyone's is readable. The services take the team from
    the subject, which these permissions bind to the credentials."""
    if not is_team_name(team):
        raise ValueError(f"team {team!r}: {TEAM_NAME_RULE}")
    return _team_permissions(team)


def _team_permissions(team: str) -> Permissions:
    inbox = team_inbox(team)
    return Permissions(
        publish=team_subjects(team),
        subscribe=(f"{inbox}.>", team_feed(team)),
        inbox_prefix=inbox,
        tags=(f"team:{team}",),
    )


CONSOLE = "console"
CONSOLE_INBOX = "_INBOX_console"


def console_permissions() -> Permissions:
    """The web console's: every read query, plain (for the platform viewer) and team-scoped,
    the platform-wide lists it filters to the viewer, a team's cancel, and the teams' live
    feeds. No submit, no command stream, no `$JS.API`, and no event of its own to sign."""
    queries = sorted(TEAM_QUERIES)
    return Permissions(
        publish=(*queries, *(f"{q}.*" for q in queries), f"{API_CANCEL}.*",
                 LEDGER_ALLOCATIONS, NOTIFICATIONS_LIST, PREEMPTION_PLANS),
        subscribe=(f"{FEED_PREFIX}.>", f"{CONSOLE_INBOX}.>"),
        inbox_prefix=CONSOLE_INBOX,
        tags=("role:console",),
    )


RUN_NAME = "{{name()}}"
"""A run user's name is its run id; the scoped signing key fills it into the template."""


def run_inbox(run_id: str) -> str:
    return f"_INBOX_run_{run_id}"


def run_template() -> Permissions:
    """What every run identity may do, bound to its own run id by the server: read its own
    notices (live, and the last one kept on ROTA_CTL), and report its checkpoints (its
    acknowledgement) to the executor."""
    return Permissions(
        publish=(run_checkpoint(RUN_NAME),
                 f"$JS.API.DIRECT.GET.{STREAM_CTL}.rota.ctl.run.{RUN_NAME}"),
        subscribe=(f"rota.ctl.run.{RUN_NAME}", f"{run_inbox(RUN_NAME)}.>"),
        inbox_prefix=run_inbox(RUN_NAME),
    )


def shipped_table() -> dict[str, object]:
    """The table as `contracts/permissions.json` ships it, for servers configured by hand."""

    def rendered(p: Permissions) -> dict[str, object]:
        doc: dict[str, object] = {"publish": list(p.publish), "subscribe": list(p.subscribe),
                                  "allow_responses": p.responses,
                                  "inbox_prefix": p.inbox_prefix}
        if p.subscribe_deny:
            doc["subscribe_deny"] = list(p.subscribe_deny)
        return doc

    return {
        "event_owners": {t: sorted(owners) for t, owners in EVENT_OWNERS.items()},
        "command_owners": {s: sorted(owners) for s, owners in COMMAND_OWNERS.items()},
        "services": {name: rendered(service_permissions(name)) for name in SERVICES},
        "console": rendered(console_permissions()),
        "team": rendered(_team_permissions("<team>")),
        "run": rendered(run_template()),
        "admin": "everything",
    }
