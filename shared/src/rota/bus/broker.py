"""The NATS side: a broker built from settings, the three streams, and publishing with dedup ids."""

from __future__ import annotations

from typing import Any

from faststream.message import StreamMessage
from faststream.nats import NatsBroker
from faststream.nats.opentelemetry import NatsTelemetryMiddleware
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from rota.auth.senders import signature_headers
from rota.bus.options import connect_options
from rota.bus.trace_fill import JobTraceFill
from rota.contracts import Envelope
from rota.contracts.subjects import STREAM_CMD, STREAM_CTL, STREAM_EVT, STREAM_SUBJECTS
from rota.settings import Settings

DUPLICATE_WINDOW_S = 2 * 60 * 60
"""JetStream drops a repeated `Nats-Msg-Id` inside this window; outbox relays retry well within it."""

# Retention per stream: events are the replayable source of truth; commands and control
# notices only need to outlive a restart of their consumers.
_RETENTION: dict[str, tuple[RetentionPolicy, float | None]] = {
    STREAM_CMD: (RetentionPolicy.LIMITS, 7 * 86_400.0),
    STREAM_EVT: (RetentionPolicy.LIMITS, None),
    STREAM_CTL: (RetentionPolicy.LIMITS, 7 * 86_400.0),
}


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


def stream_config(name: str, replicas: int = 1) -> StreamConfig:
    retention, max_age = _RETENTION[name]
    return StreamConfig(
        name=name,
        subjects=STREAM_SUBJECTS[name],
        retention=retention,
        storage=StorageType.FILE,
        max_age=max_age,
        duplicate_window=DUPLICATE_WINDOW_S,
        num_replicas=replicas,
        # A run reads the last notice on its own subject by a direct get, the one stream read
        # its credentials allow (rota.auth.permissions.run_template).
        allow_direct=name == STREAM_CTL,
    )


_MANAGED = ("subjects", "retention", "storage", "max_age", "duplicate_window", "num_replicas",
            "allow_direct")
"""The fields of a stream's config that `stream_config` decides."""


def _normal(name: str, value: Any) -> Any:
    if name == "subjects":
        return sorted(value or ())
    if name in ("max_age", "duplicate_window"):
        return round(float(value or 0.0), 3)
    if name == "allow_direct":
        return bool(value)
    return getattr(value, "value", value)


def out_of_date(current: StreamConfig, wanted: StreamConfig) -> list[str]:
    """The fields `stream_config` decides on which `current` differs from `wanted`."""
    return [name for name in _MANAGED
            if _normal(name, getattr(current, name)) != _normal(name, getattr(wanted, name))]


async def ensure_streams(js: JetStreamContext, replicas: int = 1) -> list[str]:
    """Create ROTA_CMD, ROTA_EVT and ROTA_CTL, or update one whose config is out of date;
    the names of those it created or updated. Managing streams is the admin's (the services'
    identities may not: `rota.auth.permissions.jetstream_subjects`), so `rota up` and
    `rota migrate` call this as the admin, and a service's start writes nothing when the
    streams are already as wanted."""
    changed = []
    for name in STREAM_SUBJECTS:
        config = stream_config(name, replicas)
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


async def require_streams(js: JetStreamContext, replicas: int = 1) -> None:
    """A service's start: the streams as `stream_config` makes them, made or updated here
    only where this identity may (a NATS without auth); otherwise an error that names the
    admin's step, rather than a service running against streams that are not there."""
    try:
        await ensure_streams(js, replicas)
    except Exception as exc:
        raise StreamsNotReady(
            "the streams are missing or out of date, and this identity may not create or "
            "update them: run `rota migrate` with the admin's credentials (ROTA_NATS_CREDS), "
            f"or `rota up` ({type(exc).__name__}: {exc})") from exc


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
