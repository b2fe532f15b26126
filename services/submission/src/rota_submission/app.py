"""The submission service's handlers: thin wiring from subjects to `Commands`, queries, projection."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from pydantic import BaseModel, ValidationError
from rota.bus.partition import by_job
from rota.bus.query import api_error, internal_error
from rota.config import RotaConfig, load_config
from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.common import TEAM_NAME_RULE, is_team_name
from rota.contracts.envelope import first_error
from rota.contracts.versions import PROTOCOL_VERSION
from rota.ids import new_id
from rota.service import RotaService

from rota_submission import queries, retention, store
from rota_submission.commands import SOURCE, Commands, Origin
from rota_submission.feed import FEED_SUBJECTS, Feeder
from rota_submission.nodes import NodeCommands
from rota_submission.producer import command_ids
from rota_submission.projection import project_batch

log = logging.getLogger("rota.submission")

Query = Callable[[bytes, str | None], Awaitable[m.ApiReply]]
Scoped = Callable[[bytes, Origin, str | None], Awaitable[m.ApiReply]]
"""An API subject's handler: the body, where it came from, and the team the subject names."""


def _ignoring_origin(query: Query) -> Scoped:
    async def handle(raw: bytes, origin: Origin, team: str | None) -> m.ApiReply:
        return await query(raw, team)

    return handle


PROJECTION_GATHER_S = 0.2
"""How long a trickle of events gathers into one batch (one transaction) for the read model.
Nothing waits on the projection to decide (a submission's reply comes from its command), and a
job listed 0.2 s late is not missed; at 100 jobs/s a transaction per event or two made the
service's CPU per job 5.8 ms instead of 4.7 (DECISIONS 96)."""


FEED_DURABLE = "submission-feed"
"""The teams' feeds' own durable: it never gathers, so a feed copy follows its event on
ROTA_EVT within milliseconds (`rota bench feed`), where the read model's gathering made it
wait up to PROJECTION_GATHER_S."""

SUBMIT_DURABLE = "submission-submit"
"""The submit commands of teams `rota.yaml` does not name; each named team has its own."""

UNNAMED_TEAMS_GATHER_S = 0.5
"""The shared durable mostly acks named teams' commands unread: it reads them in larger,
rarer batches, and an unknown team's refusal may wait that long."""


def team_submit_durable(team: str) -> str:
    """The durable of `team`'s submit commands (a team's name is a valid durable name)."""
    return f"submission-team-{team}"


def build(service: RotaService | None = None, config: RotaConfig | None = None) -> RotaService:
    service = service or RotaService("submission", migrations=Path(__file__).parent / "migrations")
    config = config or load_config(service.settings.config)
    commands = Commands(service, config)
    retention.install(service)
    max_bytes = service.settings.max_message_bytes

    def raw_origin(msg: Msg) -> Origin:
        meta = msg.metadata
        return Origin(msg.subject, f"{meta.stream}:{meta.sequence.stream}", meta.timestamp,
                      dict(msg.headers or {}))

    async def submit_jobs(batch: list[Msg]) -> None:
        """SubmitJob: validate, authorise, record the jobs and their `JobSubmitted` atomically."""
        await commands.submit_batch([(msg.data, raw_origin(msg)) for msg in batch])

    # A durable per team (docs/configuration.md, "Intake"): each team's commands are read in its own order,
    # side by side with every other team's, so no team's backlog holds another's up. The
    # shared durable takes the subjects of teams that `rota.yaml` does not name (to be
    # refused with UNKNOWN_TEAM) and acks the others' unread; a team's durable, when new,
    # starts where the shared one had got to, so a command is handled once across the change.
    for team in config.teams:
        service.js_batch_subscriber(s.submit(team), stream=s.STREAM_CMD,
                                    durable=team_submit_durable(team), batch_size=64,
                                    starts_after=SUBMIT_DURABLE)(submit_jobs)
    service.js_batch_subscriber(
        s.SUBMIT_ALL, stream=s.STREAM_CMD, durable=SUBMIT_DURABLE, batch_size=256,
        keep=lambda msg: s.subject_team(msg.subject, s.SUBMIT_PREFIX) not in config.teams,
        gather_s=UNNAMED_TEAMS_GATHER_S)(submit_jobs)

    # Replicas (README, Scale-out): submissions are shared out by JetStream (each is keyed
    # by its submission id and order-free); a job's cancels and its events go to one replica
    # by the job's hash, in order.
    @service.js_subscriber(s.CANCEL_ALL, stream=s.STREAM_CMD, durable="submission-cancel",
                           partition_key=by_job)
    async def cancel_job(msg: Msg) -> None:
        """CancelJob: cancel a job of the subject's team."""
        await commands.cancel(msg.data, raw_origin(msg))

    @service.js_batch_subscriber("rota.evt.>", stream=s.STREAM_EVT,
                                 durable="submission-projection", partitioned=True,
                                 gather_s=PROJECTION_GATHER_S)
    async def project_events(batch: list[Msg]) -> None:
        """Fold every job event into the read model, a pull batch per transaction."""
        await project_batch(service.engine, [msg.data for msg in batch],
                            max_bytes=max_bytes, owns=service.partition.owns)

    async def teams_of(job_ids: list[str]) -> dict[str, str]:
        async with service.engine.connect() as conn:
            return await store.teams_of(conn, job_ids)

    async def publish_core(subject: str, body: bytes, headers: dict[str, str]) -> None:
        await service.broker.connection.publish(subject, body, headers=headers)

    feeder = Feeder(teams_of, publish_core, max_bytes, owns=service.partition.owns)

    # The feeds do not wait for the read model's gathering (FEED_DURABLE).
    # When new (an upgrade), it starts where the projection, which fed the teams before, got
    # to, rather than sending a team every event ROTA_EVT holds again.
    @service.js_batch_subscriber("rota.evt.>", stream=s.STREAM_EVT, durable=FEED_DURABLE,
                                 partitioned=True, filter_subjects=FEED_SUBJECTS,
                                 starts_after="submission-projection")
    async def feed_events(batch: list[Msg]) -> None:
        """Each job event of a feed type, at once on its team's feed (rota_submission.feed)."""
        await feeder.feed(batch)

    async def ask_scheduler(job_id: str) -> dict[str, Any] | None:
        return await queries.ask_scheduler(service.broker.connection, job_id)

    def query(model: type[BaseModel], run: Callable[..., Awaitable[m.ApiReply]]) -> Query:
        async def handle(raw: bytes, team: str | None) -> m.ApiReply:
            return await run(service.engine, parse(raw, model, max_bytes=max_bytes).data,
                             team=team)

        return handle

    async def submit(raw: bytes, origin: Origin, team: str | None) -> m.ApiReply:
        return await commands.submit(raw, origin)

    async def cancel(raw: bytes, origin: Origin, team: str | None) -> m.ApiReply:
        return await commands.cancel(raw, origin)

    async def ping(raw: bytes, origin: Origin, team: str | None) -> m.ApiReply:
        """A team's liveness check: the body is not read (empty is fine)."""
        return m.ApiReply(ok=True, result={"ok": True, "service": SOURCE, "team": team,
                                           "protocol_version": PROTOCOL_VERSION})

    routes: dict[str, Query] = {
        s.API_JOB_GET: query(m.GetJob, queries.get_job),
        s.API_JOB_WHY: query(m.GetJob, functools.partial(
            queries.why_job, config=config, clock=service.clock, ask=ask_scheduler)),
        s.API_JOB_TRACE: query(m.GetJob, queries.trace_job),
        s.API_JOBS_LIST: query(m.ListJobs, queries.list_jobs),
        s.API_QUEUES_SUMMARY: query(m.SummarizeQueues, functools.partial(
            queries.summarize_queues, config=config)),
    }
    nodes = NodeCommands(service, config)
    admin: dict[str, Callable[[bytes], Awaitable[m.ApiReply]]] = {
        s.API_NODE_DRAIN: nodes.drain, s.API_NODE_UNDRAIN: nodes.undrain}
    scoped: list[tuple[str, Scoped]] = [(s.API_SUBMIT, submit), (s.API_CANCEL, cancel),
                                        (s.API_PING, ping)]
    scoped.extend((prefix, _ignoring_origin(route)) for prefix, route in routes.items())

    async def dispatch(subject: str, raw: bytes, headers: dict[str, str]) -> m.ApiReply:
        origin = Origin(subject, new_id(), service.clock.now(), headers)
        if subject in admin:  # exact subjects: a `.<team>` suffix is no admin command
            return await admin[subject](raw)
        # `rota.api.job.get.<team>`: the team's own view, scoped by the subject, which NATS
        # lets only that team (and trusted identities) publish on. The team is everything
        # after the API's own tokens and must be one token: read as the last token alone,
        # `rota.api.cancel.ml.nlp` would have let team `ml.nlp` act as `nlp`.
        for prefix, handle in scoped:
            team = s.subject_team(subject, prefix)
            if team == "":
                continue
            if team is None and prefix == s.API_CANCEL:
                break  # a cancel always names its team
            if team is not None and not is_team_name(team):
                return api_error("UNKNOWN_SUBJECT", f"{subject!r}: the team after {prefix!r}"
                                 f" is {team!r}; {TEAM_NAME_RULE}", "subject")
            return await handle(raw, origin, team)
        return api_error("UNKNOWN_SUBJECT", f"no API at {subject!r}", "subject")

    # One subscription for all of `rota.api.>`: NATS hands a message to every matching
    # subscription, so separate ones would race to answer with "unknown subject".
    @service.broker.subscriber(s.API_ALL, queue="submission-api")
    async def api(msg: NatsMessage) -> bytes:
        """Request/reply: submit, cancel, job get, job list, queue summary, node drain."""
        subject = msg.raw_message.subject
        headers = dict(msg.raw_message.headers or {})
        try:
            reply = await dispatch(subject, msg.body, headers)
        except ContractError as exc:
            reply = api_error(exc.code, exc.message, exc.field)
        except ValidationError as exc:
            err = first_error(exc)
            reply = api_error(err.code, err.message, err.field)
        except Exception as exc:  # the API must answer, and the service must keep running
            reply = internal_error(SOURCE, exc)
        if reply.command_id is None:  # the queries' replies: name the request they answer
            reply = reply.model_copy(update={"command_id": command_ids(
                msg.body, headers, max_bytes=max_bytes)[0]})
        return envelope(reply, source=SOURCE, job_id=reply_job_id(reply)).to_bytes()

    return service


def reply_job_id(reply: m.ApiReply) -> str | None:
    """The job an answer is about, for its envelope's `job_id`: a submit's, cancel's, get's
    or why's `result.job_id`, a trace's `result.job.job_id`; None for lists and errors."""
    result = reply.result if isinstance(reply.result, dict) else {}
    job = result.get("job") if isinstance(result.get("job"), dict) else result
    job_id = str(job.get("job_id") or "") if isinstance(job, dict) else ""
    return job_id if len(job_id) == 36 else None
