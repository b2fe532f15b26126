"""An OTLP/HTTP receiver for tests: services export to it, tests read the spans back.

It speaks what `OTEL_EXPORTER_OTLP_ENDPOINT` points the SDK's HTTP exporter at: protobuf
`ExportTraceServiceRequest`s POSTed to `/v1/traces` (gzip or not).
"""

from __future__ import annotations

import gzip
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    links: tuple[Link, ...] = field(default=())


class Receiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._collect(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _collect(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(attrs.get("service.name", "?"))
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    spans.append(Span(
                        service, s.name, s.trace_id.hex(), s.span_id.hex(),
                        s.parent_span_id.hex() or None,
                        {a.key: _value(a.value) for a in s.attributes},
                        tuple(Link(link.trace_id.hex(), link.span_id.hex(),
                                   {a.key: _value(a.value) for a in link.attributes})
                              for link in s.links)))
        with self._lock:
            self.spans.extend(spans)

    def snapshot(self) -> list[Span]:
        with self._lock:
            return list(self.spans)
