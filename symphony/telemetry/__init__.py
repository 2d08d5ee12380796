"""Traces of runs: a small interface the daemon's shell opens and ends spans through.

The default tracer does nothing; `symphony.telemetry.otlp` exports OTLP/HTTP and is imported
only when telemetry is configured, so a daemon without it never loads the OpenTelemetry SDK.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

Attribute = str | int | float | bool


class Span(Protocol):
    def set(self, key: str, value: Attribute) -> None: ...

    def end(self, error: str | None = None) -> None:
        """Ends the span (once; later calls do nothing), as an error when `error` is set."""

    def traceparent(self) -> str | None:
        """The W3C `traceparent` of this span; None where nothing is exported."""


class Tracer(Protocol):
    @property
    def endpoint(self) -> str | None:
        """The OTLP/HTTP traces URL spans go to; None where nothing is exported."""

    def start(
        self,
        name: str,
        parent: Span | None = None,
        attributes: Mapping[str, Attribute] = {},
        links: Sequence[Span] = (),
    ) -> Span:
        """A span under `parent` (a new trace without one), linked to the spans of `links`
        (a later step's trace pointing at the one that led to it)."""

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

    @property
    def endpoint(self) -> str | None:
        return None

    def start(
        self,
        name: str,
        parent: Span | None = None,
        attributes: Mapping[str, Attribute] = {},
        links: Sequence[Span] = (),
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
    links: Sequence[Span] = (),
) -> Iterator[Span]:
    """A span for the block: ended when it leaves, as an error when it raised or was
    cancelled (a stopped run ends its spans too). The block may end it first, as an error
    of its own words (`Span.end` counts once)."""
    opened = tracer.start(name, parent, attributes, links)
    try:
        yield opened
    except BaseException as exc:
        opened.end(error=type(exc).__name__)
        raise
    opened.end()


def traces_endpoint(env: Mapping[str, str], endpoint: str | None = None) -> str | None:
    """Where traces go: `endpoint` (the `telemetry:` setting) as is, else
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with
    `/v1/traces` appended; None: nowhere."""
    if endpoint:
        return endpoint
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    return None


HEADER_VARS = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")


def export_headers(env: Mapping[str, str]) -> str | None:
    """The headers sent with every export of traces (`name=value,...`), as the daemon's
    environment gives them: the traces' own variable first."""
    return next((env[name] for name in HEADER_VARS if env.get(name)), None)


def header_secrets(env: Mapping[str, str]) -> list[str]:
    """What of the export headers is masked wherever text leaves the daemon: each header's
    value (a collector's key, as often as not), and the whole of each variable."""
    found: list[str] = []
    for name in HEADER_VARS:
        value = env.get(name, "")
        pairs = [pair.partition("=")[2].strip() for pair in value.split(",")]
        found += [value, *(v for v in pairs if v)] if value else []
    return found


def tracer_from_env(
    env: Mapping[str, str] | None = None, endpoint: str | None = None, capture_text: bool = False
) -> Tracer:
    """The OTLP tracer when an endpoint is configured (the `telemetry:` setting or the standard
    `OTEL_EXPORTER_OTLP_*` variables), else the no-op one."""
    env = os.environ if env is None else env
    url = traces_endpoint(env, endpoint)
    if url is None:
        return NO_TRACER
    # Loaded by name, here only: a daemon without telemetry never imports the SDK.
    otlp = importlib.import_module("symphony.telemetry.otlp")
    tracer: Tracer = otlp.OtlpTracer(env, url, capture_text=capture_text)
    return tracer


def _told(opened: Span) -> None:
    return None


@dataclass(frozen=True, slots=True)
class StepTrace:
    """Where the span of a step after a run goes (publishing, reading or merging a pull
    request): the tracer, the span of the step that led to it (`after`: a publication hangs
    from its run's root, a reading or a merge links to the publication), and who is told of
    the step's span when it leads the steps after it (a publication that published)."""

    tracer: Tracer = NO_TRACER
    after: Span | None = None
    opened: Callable[[Span], None] = _told


UNTRACED = StepTrace()
