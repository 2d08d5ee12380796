"""The `codex:` section of WORKFLOW.md (spec §5.3.6): how the codex app-server is started and
bounded, and what its settings become inside a sandbox or through the model gateway. The
session that speaks its protocol is `symphony.agents.codex`."""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from symphony.config.agents import SessionSettings
from symphony.config.fields import INVALID_CONFIG, ConfigError, integer

KEYS = (
    "command",
    "approval_policy",
    "thread_sandbox",
    "turn_sandbox_policy",
    "turn_timeout_ms",
    "read_timeout_ms",
    "stall_timeout_ms",
)
"""The keys of the `codex:` section (spec §5.3.6)."""


@dataclass(frozen=True, slots=True)
class CodexSettings:
    """The `codex:` section: the command that starts the codex app-server, the approval and sandbox
    policies it is given, and its timeouts."""

    command: str = "codex app-server"
    approval_policy: Any = "never"
    thread_sandbox: str = "workspace-write"
    turn_sandbox_policy: Mapping[str, Any] | None = None
    turn_timeout_ms: int = 3_600_000
    read_timeout_ms: int = 5_000
    stall_timeout_ms: int = 300_000


_CODEX = CodexSettings()

OUTER_BOUNDARY = "danger-full-access"
"""Codex's own sandbox inside symphony's: off, since the outer one is the boundary (codex's
bubblewrap cannot make its namespaces inside another sandbox and refuses every write)."""


def inside_sandbox(settings: SessionSettings) -> SessionSettings:
    """The settings of a codex run inside a symphony sandbox (`Backend.inside_sandbox`)."""
    assert isinstance(settings, CodexSettings)
    policy = settings.turn_sandbox_policy
    return dataclasses.replace(
        settings,
        thread_sandbox=OUTER_BOUNDARY,
        turn_sandbox_policy=None
        if policy is None
        else MappingProxyType({"type": "dangerFullAccess"}),
    )


GATEWAY_PROVIDER = "symphony"
"""The model provider codex is given when its calls go through the daemon's model gateway."""


def through_gateway(settings: SessionSettings, env: Mapping[str, str]) -> SessionSettings:
    """The settings of a codex run whose model calls go through the daemon's model gateway
    (`Backend.through_gateway`): codex 0.171 reads no base URL from its environment, so its
    command names a model provider of its own, at the gateway `OPENAI_BASE_URL` now names,
    with the run's token in `OPENAI_API_KEY` as its key."""
    assert isinstance(settings, CodexSettings)
    key = "OPENAI_API_KEY" if "OPENAI_API_KEY" in env else "CODEX_API_KEY"
    provider = f"model_providers.{GATEWAY_PROVIDER}"
    overrides = {
        "model_provider": GATEWAY_PROVIDER,
        f"{provider}.name": "symphony model gateway",
        f"{provider}.base_url": env.get("OPENAI_BASE_URL", ""),
        f"{provider}.env_key": key,
        f"{provider}.wire_api": "responses",
    }
    words = [f"{name}={json.dumps(value)}" for name, value in overrides.items()]
    extra = " ".join(f"-c {shlex.quote(word)}" for word in words)
    return dataclasses.replace(settings, command=f"{settings.command} {extra}")


def traces_to(settings: SessionSettings, endpoint: str) -> tuple[SessionSettings, dict[str, str]]:
    """The settings of a codex run that exports its own spans to the OTLP/HTTP traces URL
    `endpoint` (`Backend.traces_to`): codex 0.171 reads its exporter from its config only
    (`[otel] trace_exporter`), so its command sets it, key by key, leaving whatever else the
    user's config.toml says of it (headers, TLS) in place; it continues the trace its
    `TRACEPARENT` names."""
    assert isinstance(settings, CodexSettings)
    exporter = "otel.trace_exporter.otlp-http"
    words = [f"{exporter}.endpoint={json.dumps(endpoint)}", f'{exporter}.protocol="binary"']
    extra = " ".join(f"-c {shlex.quote(word)}" for word in words)
    return dataclasses.replace(settings, command=f"{settings.command} {extra}"), {}


def parse_settings(raw: Mapping[str, Any]) -> CodexSettings:
    """The `codex:` section (spec §6.1)."""
    command = raw.get("command", _CODEX.command)
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(INVALID_CONFIG, "codex.command must be a non-empty shell command")
    sandbox = raw.get("thread_sandbox", _CODEX.thread_sandbox)
    if not isinstance(sandbox, str):
        raise ConfigError(INVALID_CONFIG, "codex.thread_sandbox must be a string")
    turn_policy = raw.get("turn_sandbox_policy")
    if turn_policy is not None and not isinstance(turn_policy, dict):
        raise ConfigError(INVALID_CONFIG, "codex.turn_sandbox_policy must be a map")
    return CodexSettings(
        command=command,
        approval_policy=raw.get("approval_policy", _CODEX.approval_policy),
        thread_sandbox=sandbox,
        turn_sandbox_policy=MappingProxyType(turn_policy) if turn_policy is not None else None,
        turn_timeout_ms=integer(raw, "codex.turn_timeout_ms", _CODEX.turn_timeout_ms, 1),
        read_timeout_ms=integer(raw, "codex.read_timeout_ms", _CODEX.read_timeout_ms, 1),
        stall_timeout_ms=integer(raw, "codex.stall_timeout_ms", _CODEX.stall_timeout_ms, None),
    )
