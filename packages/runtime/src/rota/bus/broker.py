"""The NATS side: a broker built from settings, the three streams, and publishing with dedup ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faststream.message import StreamMessage
from faststream.nats import NatsBroker
from faststream.nats.opentelemetry import NatsTelemetryMiddleware
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from rota.auth.senders import signature_headers
from rota.bus.options import connect_options
from rota.bus.trace_fill import JobTraceFill
from rota.contracts import Envelope
from rota.contracts.subjects import STREAM_CMD, STREAM_CTL, STREAM_EVT, STREAM_SUBJECTS
from rota.settings import Settings

DUPLICATE_WINDOW_S = 2 * 60 * 60
"""JetStream drops a repeated `Nats-Msg-Id` inside this window; outbox relays retry well within it."""

# Retention per stream. Events are the source of truth that a scheduler taking the lease
# replays from the first one (as does any new durable): a job waiting for a month, or a
# budget's year, needs its oldest events, and there is no snapshot to replay from instead, so
# ROTA_EVT is never cut by age or count. It is bounded per message, and by size only where the
# operator says so (`ROTA_EVT_MAX_BYTES`, within the server's store): full, it then refuses
# new events (the outboxes keep them in PostgreSQL until there is room) rather than forget
# old ones. What bounds its growth is the intake (a team's waiting jobs and submit rate).
# Commands only need to outlive a restart of their consumers: kept a day, and at most
# `cmd_max_msgs_per_subject` a subject, the oldest going first, so a team's flood (one
# subject is one team's) evicts only that team's own commands, never another's.
CTL_MAX_AGE_S = 7 * 86_400.0
"""Control notices are kept a week, as long as services keep the ids of what they processed."""

HEADER_ROOM_BYTES = 4096
"""What a stored message may carry besides its body, which is at most `ROTA_MAX_MESSAGE_BYTES`:
the dedup id, type, signature and trace headers. A body over the cap but within this room is
still stored and answered (`PAYLOAD_TOO_LARGE`); one beyond is refused at publish."""


@dataclass(frozen=True)
class StreamLimits:
    """The bounds of the three streams. The admin who makes them and every service that checks
    them must agree (`require_streams`): they come from the same `ROTA_*` settings."""

    max_message_bytes: int = 64 * 1024
    cmd_max_age_s: float = 86_400.0
    cmd_max_msgs_per_subject: int = 100_000
    evt_max_bytes: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> StreamLimits:
        return cls(settings.max_message_bytes, settings.cmd_max_age_s,
                   settings.cmd_max_msgs_per_subject, settings.evt_max_bytes)


def make_broker(settings: Settings, url: str, *, name: str) -> NatsBroker:
    return NatsBroker(
        url,
        name=f"rota-{name}",
        # The fill runs first: it gives bare messages about a job the job's trace context,
        # which the telemetry middleware then parents its consumer span on.
        middlewares=[JobTraceFill, NatsTelemetryMiddleware()],
        decoder=raw_body,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        **connect_options(settings),
    )


async def raw_body(msg: StreamMessage[Any]) -> bytes:
    """Every handler reads `msg.body` through `rota.contracts.parse`. FastStream's own
    decoding (a plain `json.loads` of any body without a content type) would raise on the
    poison that parser refuses cleanly (a 5,000-digit number, deep nesting) before the
    handler ran, and the request would go unanswered."""
    return msg.body


def stream_config(name: str, replicas: int = 1, limits: StreamLimits | None = None
                  ) -> StreamConfig:
    limits = limits or StreamLimits()
    commands, events = name == STREAM_CMD, name == STREAM_EVT
    return StreamConfig(
        name=name,
        subjects=STREAM_SUBJECTS[name],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=(limits.cmd_max_age_s if commands else None if events else CTL_MAX_AGE_S),
        max_msg_size=limits.max_message_bytes + HEADER_ROOM_BYTES,
        max_msgs_per_subject=limits.cmd_max_msgs_per_subject if commands else -1,
        max_bytes=(limits.evt_max_bytes or -1) if events else -1,
        discard=DiscardPolicy.NEW if events else DiscardPolicy.OLD,
        duplicate_window=DUPLICATE_WINDOW_S,
        num_replicas=replicas,
        # A run reads the last notice on its own subject by a direct get, the one stream read
        # its credentials allow (rota.auth.permissions.run_template).
        allow_direct=name == STREAM_CTL,
    )


_MANAGED = ("subjects", "retention", "storage", "max_age", "duplicate_window", "num_replicas",
            "allow_direct", "max_msg_size", "max_msgs_per_subject", "max_bytes", "discard")
"""The fields of a stream's config that `stream_config` decides."""


def _normal(name: str, value: Any) -> Any:
    if name == "subjects":
        return sorted(value or ())
    if name in ("max_age", "duplicate_window"):
        return round(float(value or 0.0), 3)
    if name == "allow_direct":
        return bool(value)
    if name in ("max_msg_size", "max_msgs_per_subject", "max_bytes"):
        return -1 if value is None or value < 0 else value  # unset and -1 both: no limit
    return getattr(value, "value", value)


def out_of_date(current: StreamConfig, wanted: StreamConfig) -> list[str]:
    """The fields `stream_config` decides on which `current` differs from `wanted`."""
    return [name for name in _MANAGED
            if _normal(name, getattr(current, name)) != _normal(name, getattr(wanted, name))]


async def ensure_streams(js: JetStreamContext, replicas: int = 1,
                         limits: StreamLimits | None = None) -> list[str]:
    """Create ROTA_CMD, ROTA_EVT and ROTA_CTL, or update one whose config is out of date;
    the names of those it created or updated. Managing streams is the admin's (the services'
    identities may not: `rota.auth.permissions.jetstream_subjects`), so `rota up` and
    `rota migrate` call this as the admin, and a service's start writes nothing when the
    streams are already as wanted."""
    changed = []
    for name in STREAM_SUBJECTS:
        config = stream_config(name, replicas, limits)
        try:
            current = (await js.stream_info(name)).config
        except NotFoundError:
            try:
                await js.add_stream(config)
                changed.append(name)
                continue
            except Exception:  # another process won the race; fall through to update
                current = None
        if current is None or out_of_date(current, config):
            await js.update_stream(config)
            changed.append(name)
    return changed


class StreamsNotReady(RuntimeError):
    """A service found the streams missing or out of date and may not fix them itself."""


class SingleReplicaOnCluster(StreamsNotReady):
    """Streams of one replica on a NATS cluster: losing their server would lose them."""


async def check_replicas(js: JetStreamContext, *, allow_single: bool = False) -> None:
    """Refuse streams of one replica on a clustered JetStream, unless `allow_single`: the
    chart's bundled NATS runs 3 servers, and ROTA_EVT is the log every service replays."""
    single, cluster = [], None
    for name in STREAM_SUBJECTS:
        info = await js.stream_info(name)
        if info.cluster is not None and info.cluster.name:
            cluster = info.cluster.name
            if info.config.num_replicas in (None, 1):
                single.append(name)
    if single and not allow_single:
        raise SingleReplicaOnCluster(
            f"{', '.join(single)} {'has' if len(single) == 1 else 'have'} 1 replica on NATS "
            f"cluster {cluster!r}: losing the server that holds one loses it. Set "
            "ROTA_STREAM_REPLICAS=3 and run `rota migrate` (streams are updated in place), or "
            "ROTA_ALLOW_SINGLE_REPLICA_ON_CLUSTER=true to run so anyway")


async def require_streams(js: JetStreamContext, replicas: int = 1,
                          limits: StreamLimits | None = None, *,
                          allow_single: bool = False) -> None:
    """A service's start: the streams as `stream_config` makes them, made or updated here
    only where this identity may (a NATS without auth); otherwise an error that names the
    admin's step, rather than a service running against streams that are not there."""
    try:
        await ensure_streams(js, replicas, limits)
    except Exception as exc:
        raise StreamsNotReady(
            "the streams are missing or out of date, and this identity may not create or "
            "update them: run `rota migrate` with the admin's credentials (ROTA_NATS_CREDS), "
            f"or `rota up` ({type(exc).__name__}: {exc})") from exc
    await check_replicas(js, allow_single=allow_single)


def publish_headers(env: Envelope[Any], extra: dict[str, str] | None = None,
                    *, body: bytes | None = None) -> dict[str, str]:
    """The dedup id, the type, `extra`, and this service's signature over `body` (the bytes
    that will be published: `env.to_bytes()` unless given)."""
    headers = {"Nats-Msg-Id": env.id, "Rota-Type": env.type}
    if extra:
        headers.update(extra)
    headers.update(signature_headers(env.to_bytes() if body is None else body))
    return headers


async def publish(
    broker: NatsBroker,
    env: Envelope[Any],
    subject: str,
    *,
    stream: str,
    extra_headers: dict[str, str] | None = None,
) -> None:
    """Publish to JetStream and wait for its ack. The envelope id is the `Nats-Msg-Id`."""
    body = env.to_bytes()
    await broker.publish(
        body,
        subject,
        headers=publish_headers(env, extra_headers, body=body),
        stream=stream,
    )
