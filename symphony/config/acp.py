"""The `acp:` section of WORKFLOW.md: the command of an agent that speaks the Agent Client
Protocol, its bounds, and what it needs of the daemon's environment. The session that speaks
the protocol is `symphony.agents.acp`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symphony.config.fields import INVALID_CONFIG, ConfigError, integer

APPROVALS = ("allow", "deny")
KEYS = ("command", "approve", "turn_timeout_ms", "read_timeout_ms", "stall_timeout_ms", "model")
ENV_NAMES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_EXECUTABLE",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
)
"""The model credentials and endpoints of the agents that speak ACP today."""


@dataclass(frozen=True, slots=True)
class AcpSettings:
    """The `acp:` section."""

    command: str = ""
    approve: str = "allow"
    turn_timeout_ms: int = 3_600_000
    read_timeout_ms: int = 30_000
    stall_timeout_ms: int = 300_000
    model: str | None = None
    """The model to ask the agent for (`session/set_model`) and to price its tokens by; None:
    the agent's own choice, resolved from what it advertises (`concrete_model`)."""


def parse_settings(raw: Mapping[str, Any]) -> AcpSettings:
    defaults = AcpSettings()
    command = raw.get("command", defaults.command)
    if not isinstance(command, str):
        raise ConfigError(INVALID_CONFIG, "acp.command must be a shell command")
    approve = raw.get("approve", defaults.approve)
    if approve not in APPROVALS:
        raise ConfigError(INVALID_CONFIG, f"acp.approve must be one of {', '.join(APPROVALS)}")
    model = raw.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ConfigError(INVALID_CONFIG, "acp.model must name a model, like claude-sonnet-4-5")

    return AcpSettings(
        command=command.strip(),
        approve=approve,
        turn_timeout_ms=integer(raw, "acp.turn_timeout_ms", defaults.turn_timeout_ms, 1),
        read_timeout_ms=integer(raw, "acp.read_timeout_ms", defaults.read_timeout_ms, 1),
        stall_timeout_ms=integer(raw, "acp.stall_timeout_ms", defaults.stall_timeout_ms, None),
        model=model.strip() if isinstance(model, str) else None,
    )
