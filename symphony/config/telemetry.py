"""`telemetry:`: where the daemon exports its traces (OTLP/HTTP), beside the standard
`OTEL_EXPORTER_OTLP_*` variables, which it reads too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from symphony.config.fields import INVALID_CONFIG, ConfigError

TELEMETRY_KEYS = ("endpoint", "capture_text", "agents", "agent_headers")


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """`telemetry:`: where the daemon exports its traces, and what they and the agents' own spans
    carry."""

    endpoint: str | None = None
    """The OTLP/HTTP traces URL (`telemetry.endpoint`, e.g. `http://collector:4318/v1/traces`);
    None: the `OTEL_EXPORTER_OTLP_*` variables decide, and without them nothing is exported."""
    capture_text: bool = False
    """Whether turn spans carry the prompt and the agent's last message (off by default)."""
    agents: bool = True
    """Whether each run's agent is told to export its own spans to the same collector, in the
    run's trace (codex and Claude Code are; spec §28)."""
    agent_headers: bool = False
    """Whether the agent is given the daemon's export headers (`OTEL_EXPORTER_OTLP_*HEADERS`,
    which may hold a collector's key): off unless the user says so."""


def parse_telemetry(raw: Mapping[str, Any]) -> TelemetrySettings:
    endpoint = raw.get("endpoint")
    if endpoint is not None:
        parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                INVALID_CONFIG,
                f"telemetry.endpoint must be an http(s) URL of an OTLP collector, got {endpoint!r}",
            )
    switches = {}
    for key, default in (("capture_text", False), ("agents", True), ("agent_headers", False)):
        value = raw.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(INVALID_CONFIG, f"telemetry.{key} must be true or false")
        switches[key] = value
    return TelemetrySettings(endpoint=endpoint, **switches)


def otlp_env(endpoint: str) -> dict[str, str]:
    """The standard OpenTelemetry variables that send a program's spans, and only its spans,
    to the OTLP/HTTP (protobuf) traces URL `endpoint`."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }
