"""Traces of runs: a small interface the daemon's shell opens and ends spans through.

The default tracer does nothing; `symphony.telemetry.otlp` exports OTLP/HTTP and is imported
only when telemetry is configured, so a daemon without it never loads the OpenTelemetry SDK.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping
from typing import Protocol

Attribute = str | int | float | bool

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class Span(Protocol):
    def set(self, key: str, value: Attribute) -> None: ...

    def end(self, error: str | None = None) -> None:
        """Ends the span (once; later calls do nothing), as an error when `error` is set."""

    def traceparent(self) -> str | None:
        """The W3C `traceparent` of this span; None where nothing is exported."""


class Tracer(Protocol):
    def start(
        self, name: str, parent: Span | None = None, attributes: Mapping[str, Attribute] = {}
    ) -> Span: ...

    def shutdown(self) -> None:
        """Flushes what was recorded, within a bounded time, and stops exporting."""


class _NoSpan:
    def set(self, key: str, value: Attribute) -> None:
        return None

    def end(self, error: str | None = None) -> None:
        return None

    def traceparent(self) -> str | None:
        return None


class NoTracer:
    """Telemetry off: spans cost nothing and go nowhere."""

    def start(
        self, name: str, parent: Span | None = None, attributes: Mapping[str, Attribute] = {}
    ) -> Span:
        return _NoSpan()

    def shutdown(self) -> None:
        return None


NO_TRACER: Tracer = NoTracer()
NO_SPAN: Span = _NoSpan()


@contextlib.contextmanager
def span(
    tracer: Tracer,
    name: str,
    parent: Span | None = None,
    attributes: Mapping[str, Attribute] = {},
) -> Iterator[Span]:
    """A span for the block: ended when it leaves, as an error when it raised or was
    cancelled (a stopped run ends its spans too)."""
    opened = tracer.start(name, parent, attributes)
    try:
        yield opened
    except BaseException as exc:
        opened.end(error=type(exc).__name__)
        raise
    opened.end()


def tracer_from_env(
    env: Mapping[str, str] | None = None, endpoint: str | None = None, capture_text: bool = False
) -> Tracer:
    """The OTLP tracer when an endpoint is configured (the `telemetry:` setting or the standard
    `OTEL_EXPORTER_OTLP_*` variables), else the no-op one."""
    env = os.environ if env is None else env
    if endpoint is None and not any(env.get(name) for name in ENDPOINT_VARS):
        return NO_TRACER
    # Loaded by name, here only: a daemon without telemetry never imports the SDK.
    otlp = importlib.import_module("symphony.telemetry.otlp")
    tracer: Tracer = otlp.OtlpTracer(env, endpoint=endpoint, capture_text=capture_text)
    return tracer
