"""Generates `contracts/asyncapi.yaml` and `contracts/schemas/*.json` from the models.

The AsyncAPI document comes from a FastStream broker that declares every channel Rota uses
with its typed envelope: commands and requests as operations Rota receives, events, feeds
and control notices as operations Rota sends. Each request operation is then given its reply
(FastStream declares none), and the ping its non-envelope messages. No handler here runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from faststream.nats import NatsBroker
from faststream.specification import AsyncAPI
from pydantic import BaseModel

from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.envelope import EVENT_TYPES, MESSAGE_TYPES, Envelope
from rota.contracts.job import JobSpec
from rota.contracts.versions import PROTOCOL_VERSION, message_version

JOB_ROW = ("a job: job_id, short_id, name, team, user_name, queue, flavor, workers, "
           "gpus_per_worker, gpus, state, submission_id, submitted_at, updated_at, started_at, "
           "ended_at, run_id, attempts, resume_from, wait, detail, borrowed_gpus")


@dataclass(frozen=True)
class Received:
    """A subject Rota listens on. `result` is the shape of a reply's `data.result` when the
    subject is a request (core NATS request/reply); None for a JetStream command."""

    subject: str
    model: type[BaseModel]
    description: str
    result: str | None = None


RECEIVED: list[Received] = [
    Received("rota.cmd.submit.{team}", m.SubmitJob,
             "JetStream ROTA_CMD. Submit one job; the subject's team must equal data.team. "
             "Answered on ROTA_EVT (and the team's feed) by JobSubmitted, JobResubmitted (a "
             "duplicate) or JobRejected, each with data.command_id = this envelope's id."),
    Received("rota.cmd.cancel.{team}", m.CancelJob,
             "JetStream ROTA_CMD. Cancel a job of the subject's team. Answered by JobCancelled "
             "or JobRejected (data.command_id = this envelope's id); cancelling a job that has "
             "ended already changes nothing and publishes nothing."),
    Received(s.RUN_START, m.StartRun, "JetStream ROTA_CMD, from the scheduler to the executor."),
    Received(s.RUN_STOP, m.StopRun,
             "JetStream ROTA_CMD, from the preemption coordinator (or the scheduler, for a "
             "cancelled job) to the executor."),
    Received("rota.api.submit.{team}", m.SubmitJob,
             "The synchronous twin of rota.cmd.submit.{team}: the subject's team must equal "
             "data.team. The same events are published as on the JetStream path.",
             "{job_id, duplicate, state, submission_id}"),
    Received(s.API_SUBMIT, m.SubmitJob,
             "For trusted producers (services, the admin): like rota.api.submit.{team}, with "
             "no subject team to match. No team identity may publish here.",
             "{job_id, duplicate, state, submission_id}"),
    Received("rota.api.cancel.{team}", m.CancelJob,
             "The synchronous twin of rota.cmd.cancel.{team}.", "{job_id, state}"),
    Received(s.API_JOB_GET, m.GetJob,
             "One job, by id, short id or 8+ characters from either end of its id. Also on "
             "rota.api.job.get.{team}, scoped to that team.", JOB_ROW),
    Received(s.API_JOB_WHY, m.GetJob,
             "Why a job waits: every wait reason (primary first), the ETA and the score "
             "factors, as the scheduler explains it now when its leader answers in time (fresh), "
             "else as it last published it. Also on rota.api.job.why.{team}.",
             "{job_id, name, state, queue, team, flavor, resume_from}, and for a pending job "
             "reasons [{code, message, details, title, ends_at}], eta, position (1-based), "
             "factors (age as of now), fresh, explained_at; else summary"),
    Received(s.API_JOB_TRACE, m.GetJob,
             "A job's decision record. Also on rota.api.job.trace.{team}.",
             "{job, timeline [{at, type, source, summary, data}], decisions, preemptions, "
             "trace_id}"),
    Received(s.API_JOBS_LIST, m.ListJobs,
             "Jobs, newest first. Also on rota.api.jobs.list.{team}, scoped to that team.",
             f"a list of {JOB_ROW}"),
    Received(s.API_QUEUES_SUMMARY, m.SummarizeQueues,
             "Jobs and GPUs per queue, team and flavor. Also on rota.api.queues.summary.{team}.",
             "a list of {queue, team, flavor, pending_jobs, pending_gpus, running_jobs, "
             "gpus_in_use, borrowed_gpus, oldest_pending_at, quota}; pending_gpus and "
             "gpus_in_use count a GPU share as its fraction (an integer when whole, else a "
             "number such as 1.5)"),
    Received(s.API_NODE_DRAIN, m.DrainNode,
             "Admin only (no team identity, nor the console, may publish here): drain a node of "
             "rota.yaml. Publishes NodeDrainRequested.", "{node, deadline, reason}"),
    Received(s.API_NODE_UNDRAIN, m.UndrainNode,
             "Admin only: end a node's drain. Publishes NodeDrainCancelled.", "{node}"),
    Received(s.SCHEDULER_NODES, m.ListNodes,
             "Answered by the active scheduler: each node's state and its runs.",
             "{nodes: [{node, flavor, gpus, state (ready | draining | drained | lost),"
             " deadline, reason, runs [{run_id, job_id, team, gpus, expected_end, draining}]}]}"),
    *(Received(f"{query}.{{team}}", model,
               f"{query}, scoped to the subject's team: the only form of it a team identity "
               "may ask. Another team's job is JOB_NOT_FOUND.", result)
      for query, model, result in (
          (s.API_JOB_GET, m.GetJob, JOB_ROW),
          (s.API_JOB_WHY, m.GetJob, "as on rota.api.job.why"),
          (s.API_JOB_TRACE, m.GetJob, "as on rota.api.job.trace"),
          (s.API_JOBS_LIST, m.ListJobs, f"a list of {JOB_ROW}"),
          (s.API_QUEUES_SUMMARY, m.SummarizeQueues, "as on rota.api.queues.summary"))),
    Received(s.NOTIFICATIONS_LIST, m.ListNotifications, "Answered by the notifier.",
             "a list of notifications (kind, channel, recipient, status, created_at, sent_at, "
             "next_attempt_at, attempts, last_error, job_id, ...)"),
    Received(s.PREEMPTION_PLANS, m.ListPreemptions, "Answered by the preemption coordinator.",
             "a list of plans {plan_id, preemptor_job_id, preemptor_queue, preemptor_team, "
             "state, reason, message, created_at, updated_at, completed_at, victims [...]}"),
    Received(s.SCHEDULER_WHY, m.GetJob,
             "Answered by the scheduler's leader once its next cycle has explained the job "
             "(the submission service asks it for rota.api.job.why).",
             "{pending: true, job_id, team, queue, reasons, eta, position, factors, "
             "explained_at} (a JobPending's fields), or {pending: false, state}"),
    Received(s.LEDGER_ALLOCATIONS, m.ListAllocations,
             "Answered by the ledger: allocations per run (the scheduler's rebuild).",
             "{allocations: [...], truncated}"),
    Received("rota.sys.deadletter.{service}", m.ListDeadLetters,
             "Answered by every service: the messages it gave up on, newest first.",
             "a list of dead letters {consumer, stream, subject, stream_seq, deliveries, "
             "error_type, error, payload, ...}"),
    Received("rota.run.checkpoint.{run_id}", m.ReportCheckpoint,
             "Core NATS request, on no stream: a run reports a checkpoint (with notice_id: "
             "acknowledges that notice) with its run token. The executor answers once it has "
             "recorded it and published RunCheckpointed (without the token).",
             "{recorded: true}, or false for a repeat"),
]

REPLY_CHANNEL = "reply:ApiReply"
PING_CHANNEL = "rota.sys.ping.{service}"


def _receiver(model: type[BaseModel]) -> Any:
    async def handler(msg: Any) -> None:  # pragma: no cover - documentation only
        return None

    handler.__annotations__ = {"msg": Envelope[model], "return": None}  # type: ignore[valid-type]
    handler.__name__ = model.__name__
    return handler


def spec_broker() -> NatsBroker:
    broker = NatsBroker("nats://localhost:4222", description="Rota over NATS JetStream")
    for item in RECEIVED:
        kind = f" The reply's data.result: {item.result}." if item.result else ""
        broker.subscriber(
            item.subject, title=f"{item.subject}:{item.model.__name__}",
            description=item.description + kind,
        )(_receiver(item.model))
    for name, model in EVENT_TYPES.items():
        subject = s.EVENT_SUBJECTS[name]
        broker.publisher(
            subject, title=f"{subject}:{name}", schema=Envelope[model],  # type: ignore[valid-type]
            description=f"JetStream ROTA_EVT. {model.__doc__ or ''}".strip(),
        )
    for name in sorted(s.FEED_TYPES):
        subject = s.feed("{team}", s.EVENT_SUBJECTS[name])
        broker.publisher(
            subject, title=f"{subject}:{name}",
            schema=Envelope[EVENT_TYPES[name]],  # type: ignore[valid-type]
            description=f"Core NATS, no stream: the team's live copy of {name} for its own "
            "jobs, body and headers unchanged, at most once.",
        )
    broker.publisher(
        "rota.ctl.run.{run_id}", title="rota.ctl.run.{run_id}:PreemptionNotice",
        schema=Envelope[m.PreemptionNotice],
        description=f"JetStream ROTA_CTL, to the job. {m.PreemptionNotice.__doc__}",
    )
    broker.publisher(
        "{reply}", title=REPLY_CHANNEL, schema=Envelope[m.ApiReply],
        description="The answer to a request, on the request's own reply subject (its inbox).",
    )
    return broker


def _with_replies(document: dict[str, Any]) -> dict[str, Any]:
    """FastStream declares no replies: every request operation gets the ApiReply envelope,
    on the request's reply subject; and the ping, whose messages are not envelopes."""
    reply_channel = document["channels"][REPLY_CHANNEL]
    reply_channel["address"] = None  # the requester's inbox, known only at run time
    reply_message = next(iter(reply_channel["messages"]))
    document["operations"].pop(REPLY_CHANNEL, None)
    reply = {
        "address": {"location": "$message.header#/reply",
                    "description": "The NATS reply subject of the request."},
        "channel": {"$ref": f"#/channels/{_ref(REPLY_CHANNEL)}"},
        "messages": [{"$ref": f"#/channels/{_ref(REPLY_CHANNEL)}/messages/{reply_message}"}],
    }
    for item in RECEIVED:
        if item.result is not None:
            document["operations"][f"{item.subject}:{item.model.__name__}"]["reply"] = reply
    document["channels"][PING_CHANNEL] = {
        "address": PING_CHANNEL,
        "description": "Liveness: an empty request, answered by every instance of the service "
        "(not an envelope).",
        "messages": {"Ping": {"payload": {"type": "string", "maxLength": 0}},
                     "Pong": {"payload": {
                         "type": "object", "required": ["ok", "service", "pid"],
                         "properties": {"ok": {"const": True}, "service": {"type": "string"},
                                        "pid": {"type": "integer"}}}}},
    }
    document["channels"]["reply:Pong"] = {"address": None, "messages": {
        "Pong": {"$ref": f"#/channels/{_ref(PING_CHANNEL)}/messages/Pong"}}}
    document["operations"][PING_CHANNEL] = {
        "action": "receive", "channel": {"$ref": f"#/channels/{_ref(PING_CHANNEL)}"},
        "messages": [{"$ref": f"#/channels/{_ref(PING_CHANNEL)}/messages/Ping"}],
        "reply": {**reply, "channel": {"$ref": "#/channels/reply:Pong"},
                  "messages": [{"$ref": "#/channels/reply:Pong/messages/Pong"}]},
    }
    return document


def _ref(name: str) -> str:
    return name.replace("{", "%7B").replace("}", "%7D")


def asyncapi_yaml() -> str:
    spec = AsyncAPI(
        spec_broker(), title="Rota", version=str(PROTOCOL_VERSION),
        description="Messages of Rota, a checkpoint-aware queue for GPU training jobs. "
        "Every message is one envelope; see contracts/README.md.",
    )
    # FastStream orders channels by registration internals; sorted keys keep the file stable.
    from rota.contractgen.spec_security import complete

    document = complete(_with_replies(yaml.safe_load(spec.to_specification().to_yaml())))
    return yaml.safe_dump(document, sort_keys=True, width=100)


def _envelope_schema(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """The envelope's schema, its `version` the type's own (rota.contracts.versions)."""
    schema: dict[str, Any] = Envelope[model].model_json_schema()  # type: ignore[valid-type]
    version = message_version(name)
    schema["properties"]["version"].update(default=version, maximum=version)
    return schema


def json_schemas() -> dict[str, str]:
    schemas = {f"{name}.json": _envelope_schema(name, model)
               for name, model in MESSAGE_TYPES.items()}
    schemas["JobSpec.json"] = JobSpec.model_json_schema()
    return {name: json.dumps(schema, indent=2, sort_keys=True) + "\n"
            for name, schema in sorted(schemas.items())}


def generated(root: Path) -> dict[Path, str]:
    from rota.auth.permissions import shipped_table

    files = {root / "asyncapi.yaml": asyncapi_yaml(),
             root / "permissions.json": json.dumps(shipped_table(), indent=2) + "\n"}
    files.update({root / "schemas" / name: text for name, text in json_schemas().items()})
    return files


def current_release() -> Any:
    """The contracts as the code would release them (rota.contracts.release.Release)."""
    from rota.auth.permissions import shipped_table
    from rota.contracts import release

    return release.current(json_schemas(), yaml.safe_load(asyncapi_yaml()), shipped_table())


def release_problems(root: Path) -> list[str]:
    """Incompatible changes without their version bump, against `root/released`."""
    from rota.contracts import release

    return release.problems(root, current_release())


def write(root: Path) -> list[Path]:
    files = generated(root)
    (root / "schemas").mkdir(parents=True, exist_ok=True)
    for stale in (root / "schemas").glob("*.json"):
        if stale not in files:
            stale.unlink()
    for path, text in files.items():
        path.write_text(text)
    return sorted(files)


def differences(root: Path) -> list[str]:
    """Files under `root` that differ from what the code generates (empty when in sync)."""
    files = generated(root)
    stale = [str(p) for p in (root / "schemas").glob("*.json") if p not in files]
    changed = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
    return sorted(stale + changed)
