"""A broker middleware: a message about a job that arrives without a trace context joins the
job's trace.

FastStream's `NatsTelemetryMiddleware` parents its consumer span on the message's
`traceparent`, and starts a new trace when there is none. Jobs acknowledge a notice with
plain NATS (`rota.sdk`, or any language), and the CLI sends commands the same way, so their
messages come bare. This middleware runs first and writes the job's root context
(`rota.tracing.job_root_context`) into such a message's headers, so the telemetry
middleware's spans, and everything the handler then writes, land in the job's trace.
"""

from __future__ import annotations

import json
from typing import Any

from faststream import BaseMiddleware
from nats.aio.msg import Msg
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rota.tracing import job_root_context

_W3C = TraceContextTextMapPropagator()
_MAX_PEEK_BYTES = 256 * 1024


def envelope_field(body: bytes, name: str) -> str | None:
    """The envelope's string field `name` (`job_id`, `run_id`), or its data's; None for
    anything else."""
    if not body.startswith(b"{") or len(body) > _MAX_PEEK_BYTES:
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # poison is the parser's to refuse, not this peek's
        return None
    if not isinstance(doc, dict):
        return None
    data = doc.get("data")
    value = doc.get(name) or (data.get(name) if isinstance(data, dict) else None)
    return value if isinstance(value, str) and value else None


def job_id_of(body: bytes) -> str | None:
    """The envelope's `job_id`, or its data's; None for anything else."""
    return envelope_field(body, "job_id")


class JobTraceFill(BaseMiddleware[Any, Any]):
    async def on_receive(self) -> None:
        msg = self.msg
        if not isinstance(msg, Msg) or (msg.headers and "traceparent" in msg.headers):
            return
        job_id = job_id_of(msg.data)
        if job_id is None:
            return
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=job_root_context(job_id))
        msg.headers = {**(msg.headers or {}), **carrier}
