"""An OTLP/HTTP trace receiver on 127.0.0.1 that decodes every request with the official
protobuf definitions."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.fakes.quiet_http import QuietHTTPServer


@dataclass
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    error: bool
    service: str
    links: list[tuple[str, str]] = field(default_factory=list)
    """The (trace id, span id) of each span it links to."""
    message: str = ""
    """Its status's description (why it failed)."""


@dataclass
class Receiver:
    url: str
    spans: list[Received] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """Each export request's headers, names in lower case."""

    def named(self, name: str) -> list[Received]:
        return [s for s in self.spans if s.name == name]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _decode(body: bytes) -> Iterator[Received]:
    request = ExportTraceServiceRequest.FromString(body)
    for resource in request.resource_spans:
        service = {a.key: _value(a.value) for a in resource.resource.attributes}
        for scope in resource.scope_spans:
            for s in scope.spans:
                yield Received(
                    name=s.name,
                    trace_id=s.trace_id.hex(),
                    span_id=s.span_id.hex(),
                    parent_id=s.parent_span_id.hex(),
                    attributes={a.key: _value(a.value) for a in s.attributes},
                    error=s.status.code == 2,
                    service=str(service.get("service.name")),
                    links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                    message=s.status.message,
                )


def start_receiver() -> tuple[Receiver, QuietHTTPServer]:
    spans: list[Received] = []
    paths: list[str] = []
    headers: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self._body()
            paths.append(self.path)
            headers.append({name.lower(): value for name, value in self.headers.items()})
            spans.extend(_decode(body))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def _body(self) -> bytes:
            if self.headers["Content-Length"] is not None:
                return self.rfile.read(int(self.headers["Content-Length"]))
            # Some exporters (Node's fetch) send their body in chunks.
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return Receiver(url, spans, paths, headers), server
