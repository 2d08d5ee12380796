"""The OTLP/HTTP (protobuf) tracer over the OpenTelemetry SDK. Imported only when telemetry is
configured."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from symphony.telemetry import Attribute, Span

EXPORT_TIMEOUT_S = 5.0
SHUTDOWN_TIMEOUT_MS = 5000

log = logging.getLogger(__name__)


class _Quiet(SpanExporter):
    """The exporter that never raises into the daemon: an unreachable collector is logged once
    and its spans dropped."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:
            result = SpanExportResult.FAILURE
            reason = type(exc).__name__
        else:
            reason = "refused"
        if result is SpanExportResult.FAILURE and not self.warned:
            self.warned = True
            log.warning("trace export failed (%s): spans are dropped", reason)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _OtelSpan:
    def __init__(self, inner: trace.Span) -> None:
        self.inner = inner
        self.ended = False

    def set(self, key: str, value: Attribute) -> None:
        self.inner.set_attribute(key, value)

    def end(self, error: str | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        if error is not None:
            self.inner.set_status(Status(StatusCode.ERROR, error))
        self.inner.end()

    def traceparent(self) -> str | None:
        c = self.inner.get_span_context()
        # Only the sampled flag: every reader of a version-00 traceparent knows it.
        return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags) & 1:02x}"


class OtlpTracer:
    def __init__(self, env: Mapping[str, str], endpoint: str, capture_text: bool = False) -> None:
        self.capture_text = capture_text
        self._endpoint = endpoint
        name = env.get("OTEL_SERVICE_NAME") or "symphony"
        self.provider = TracerProvider(resource=Resource.create({"service.name": name}))
        # The headers come from the OTEL_EXPORTER_OTLP_*HEADERS variables, read by the exporter.
        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S)
        self.provider.add_span_processor(
            BatchSpanProcessor(_Quiet(exporter), export_timeout_millis=SHUTDOWN_TIMEOUT_MS)
        )
        self.tracer = self.provider.get_tracer("symphony")

    @property
    def endpoint(self) -> str | None:
        return self._endpoint

    def start(
        self,
        name: str,
        parent: Span | None = None,
        attributes: Mapping[str, Attribute] = {},
        links: Sequence[Span] = (),
    ) -> Span:
        # Without a parent the span starts a trace of its own, whatever the caller's context.
        context = trace.set_span_in_context(
            parent.inner if isinstance(parent, _OtelSpan) else trace.INVALID_SPAN
        )
        linked = [trace.Link(s.inner.get_span_context()) for s in links if isinstance(s, _OtelSpan)]
        return _OtelSpan(
            self.tracer.start_span(name, context=context, attributes=attributes, links=linked)
        )

    def shutdown(self) -> None:
        self.provider.force_flush(SHUTDOWN_TIMEOUT_MS)
        self.provider.shutdown()
