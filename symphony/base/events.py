"""What an agent session reports, in the same words for every agent protocol.

The agent layer turns each protocol's messages into `AgentEvent`s; the scheduling core reads
them (token totals, rate limits, the session's model) without knowing which agent spoke.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

RESUMED = "resumed"
"""The message of `session_started` when the session continued an interrupted thread."""


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Absolute totals for a thread (never per-call deltas). `input_tokens` includes the
    `cached_input_tokens` read from the provider's prompt cache (priced lower) and the
    `cache_write_tokens` written to it (Anthropic prices those higher)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0


class EventKind(StrEnum):
    """What an `AgentEvent` reports; the same words for every agent protocol."""

    SESSION_STARTED = "session_started"
    STARTUP_FAILED = "startup_failed"
    TURN_STARTED = "turn_started"
    TURN_COMPLETED = "turn_completed"
    TURN_FAILED = "turn_failed"
    TURN_CANCELLED = "turn_cancelled"
    TURN_ENDED_WITH_ERROR = "turn_ended_with_error"
    TURN_INPUT_REQUIRED = "turn_input_required"
    NOTIFICATION = "notification"
    TOKEN_USAGE = "token_usage"
    RATE_LIMITS = "rate_limits"
    TOOL_CALL = "tool_call"
    UNSUPPORTED_TOOL_CALL = "unsupported_tool_call"
    APPROVAL_AUTO_APPROVED = "approval_auto_approved"
    PERMISSION_DENIED = "permission_denied"
    MALFORMED = "malformed"
    OTHER_MESSAGE = "other_message"


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One normalized update from a session.

    `kind` is e.g. `session_started`, `turn_started`, `turn_completed`, `turn_failed`,
    `notification`, `approval_auto_approved`, `tool_call`, `unsupported_tool_call`,
    `turn_input_required`, `malformed`. `usage` is present only when the protocol reported
    absolute thread totals; `rate_limits` only when it reported them; `model` on
    `session_started`, when the agent named the model its thread runs.
    """

    kind: EventKind
    pid: int | None = None
    remote_pgid: int | None = None
    """The agent's process group on its SSH host, once the host reported it."""
    session_id: str | None = None
    thread_id: str | None = None
    turn_id: str | None = None
    message: str | None = None
    usage: TokenUsage | None = None
    rate_limits: Mapping[str, Any] | None = None
    model: str | None = None
    reported_cost_usd: float | None = None
    """What the agent itself says its process has cost so far (Claude Code's list-price
    estimate), kept beside symphony's own pricing, which is what is shown."""

    def __post_init__(self) -> None:
        # A plain string of a known kind is accepted; an unknown one is an error here, not
        # a silently ignored event later.
        # (Emitters pass members already: the check keeps the event hot path free of a lookup.)
        if not isinstance(self.kind, EventKind):
            object.__setattr__(self, "kind", EventKind(self.kind))
