"""What the answers to a producer's command carry back to it: the command's id and
submission id (`contracts/README.md`, "Correlation"), and its trace context.

A command that arrives with a W3C `traceparent` is handled inside a span of the producer's
trace, so a `JobRejected` (which has no job, and so no trace of its own) continues that
trace in its headers. An accepted job still gets its own trace, whose id is the job id
(`rota.tracing`); its root span links to this one, so each trace leads to the other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind
from rota.contracts.envelope import correlation, valid_submission_id
from rota.tracing import context_from_headers, tracer


def command_ids(raw: bytes, headers: Mapping[str, str], *, max_bytes: int,
                submit: bool = False) -> tuple[str | None, str | None]:
    """The command id and submission id to answer with. A body too broken (too large,
    not JSON) to name its own id still came with a `Nats-Msg-Id`, which the contract says is
    that id when it is a UUID; a submit's `Nats-Msg-Id` that is no UUID but a valid
    submission id (a producer deduplicating by its key) is taken as its submission id."""
    command_id, submission_id = correlation(raw, max_bytes=max_bytes)
    msg_id = headers.get("Nats-Msg-Id", "")[:128]
    msg_uuid, _ = correlation(json.dumps({"id": msg_id}).encode(), max_bytes=max_bytes)
    command_id = command_id or msg_uuid
    if submit and submission_id is None and msg_uuid is None:
        submission_id = valid_submission_id(msg_id)
    return command_id, submission_id


@contextmanager
def producer_span(headers: Mapping[str, str], subject: str) -> Iterator[None]:
    """Inside the block, the current span is in the producer's trace, when the command
    brought one (and without one, nothing changes: no orphan trace is started)."""
    producer = context_from_headers(headers)
    if producer is None:
        yield
        return
    wanted = trace.get_current_span(producer).get_span_context().trace_id
    if trace.get_current_span().get_span_context().trace_id == wanted:
        yield  # already inside it (a batch item inside its command's span)
        return
    with tracer().start_as_current_span(
            "rota.submission.command", context=producer, kind=SpanKind.SERVER,
            attributes={"messaging.system": "nats", "messaging.destination.name": subject}):
        yield


def current_trace_headers() -> dict[str, str]:
    """The current span's W3C headers, when there is one."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
