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


async def ensure_streams(js: JetStreamContext, replicas: int = 1) -> None:
    """Create or update ROTA_CMD, ROTA_EVT and ROTA_CTL; safe to call from every service."""
    for name in STREAM_SUBJECTS:
        config = stream_config(name, replicas)
        try:
            await js.stream_info(name)
        except NotFoundError:
            try:
                await js.add_stream(config)
                continue
            except Exception:  # another service won the race; fall through to update
                pass
        await js.update_stream(config)


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
