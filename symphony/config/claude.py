"""The `claude:` section of WORKFLOW.md: how Claude Code is started, what it may do, and what
it needs of the daemon's environment. The session that drives it is `symphony.agents.claude`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symphony.config.agents import SessionSettings
from symphony.config.fields import INVALID_CONFIG, ConfigError, integer
from symphony.config.telemetry import otlp_env

APPROVALS = ("allow", "deny")
KEYS = (
    "command",
    "model",
    "permission_mode",
    "approve",
    "allowed_tools",
    "disallowed_tools",
    "extra_args",
    "turn_timeout_ms",
    "read_timeout_ms",
    "stall_timeout_ms",
)
ENV_NAMES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
)
"""What Claude Code needs of the daemon's environment to reach its model: a key or token (a
subscription's from `claude setup-token`), an endpoint, where its login and sessions live."""


@dataclass(frozen=True, slots=True)
class ClaudeSettings:
    """The `claude:` section."""

    command: str = "claude"
    model: str | None = None
    permission_mode: str = "default"
    approve: str = "allow"
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    turn_timeout_ms: int = 3_600_000
    read_timeout_ms: int = 10_000
    stall_timeout_ms: int = 300_000


def parse_settings(raw: Mapping[str, Any]) -> ClaudeSettings:
    defaults = ClaudeSettings()

    def text(key: str, default: str | None) -> Any:
        value = raw.get(key, default)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(INVALID_CONFIG, f"claude.{key} must be a non-empty string")
        return value.strip() if isinstance(value, str) else None

    def names(key: str) -> tuple[str, ...]:
        value = raw.get(key, [])
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            raise ConfigError(INVALID_CONFIG, f"claude.{key} must be a list of strings")
        return tuple(items)

    approve = text("approve", defaults.approve)
    if approve not in APPROVALS:
        raise ConfigError(INVALID_CONFIG, f"claude.approve must be one of {', '.join(APPROVALS)}")
    return ClaudeSettings(
        command=text("command", defaults.command),
        model=text("model", None),
        permission_mode=text("permission_mode", defaults.permission_mode),
        approve=approve,
        allowed_tools=names("allowed_tools"),
        disallowed_tools=names("disallowed_tools"),
        extra_args=names("extra_args"),
        turn_timeout_ms=integer(raw, "claude.turn_timeout_ms", defaults.turn_timeout_ms, 1),
        read_timeout_ms=integer(raw, "claude.read_timeout_ms", defaults.read_timeout_ms, 1),
        stall_timeout_ms=integer(raw, "claude.stall_timeout_ms", defaults.stall_timeout_ms, None),
    )


TRACING_ENV = {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1"}
"""What makes Claude Code export spans at all: its telemetry, and its traces, a beta that
exports nothing without the second switch (measured with 2.1.332)."""


def traces_to(settings: SessionSettings, endpoint: str) -> tuple[SessionSettings, dict[str, str]]:
    """Claude Code (or an ACP adapter that runs it) exports its spans to the OTLP/HTTP traces
    URL `endpoint` (`Backend.traces_to`), continuing the trace its `TRACEPARENT` names; its
    metrics and logs stay off."""
    return settings, {**otlp_env(endpoint), **TRACING_ENV}
