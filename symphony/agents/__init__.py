"""Agent sessions behind one small interface; one module per agent protocol.

A session is started in a workspace with the tracker's tools advertised, runs turns while
streaming normalized `AgentEvent`s to a callback, and is stopped when its worker ends. Agent
modules know nothing of trackers: tool calls go through the `ToolHandler` they are given
(codex takes them on its own protocol; the others over the daemon's MCP server, `Grant`).

The layout: `app_server` (codex), `claude` (Claude Code), `acp` (any ACP agent), each on
`stdio` (the agent's process) and, where the protocol is JSON-RPC, `jsonrpc`; `session` holds
what they share; `backends` says which kinds exist; `tool_server` serves tools over MCP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from symphony.base.errors import SymphonyError
from symphony.base.tools import ToolResult, ToolSpec
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST

RESUMED = "resumed"
"""The message of `session_started` when the session continued an interrupted thread."""

# Failure categories (spec §10.6).
CODEX_NOT_FOUND = "codex_not_found"
INVALID_WORKSPACE_CWD = "invalid_workspace_cwd"
RESPONSE_TIMEOUT = "response_timeout"
TURN_TIMEOUT = "turn_timeout"
PORT_EXIT = "port_exit"
RESPONSE_ERROR = "response_error"
TURN_FAILED = "turn_failed"
TURN_CANCELLED = "turn_cancelled"
TURN_INPUT_REQUIRED = "turn_input_required"
STARTUP_FAILED = "startup_failed"


def truncate(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters, with an ellipsis when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def client_version() -> str:
    """Symphony's version, as it introduces itself to an agent."""
    from importlib import metadata

    try:
        return metadata.version("symphony")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def plain(value: Any) -> Any:
    """Settings and tool schemas hold read-only mappings; JSON needs plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


class AgentError(SymphonyError):
    """A session or turn ended without success; `category` is one of the constants above."""


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


class SessionSettings(Protocol):
    """What every agent kind's settings block has, and all the core reads of one: how to
    start the agent and its timeouts. The rest of a block belongs to its backend."""

    @property
    def command(self) -> str: ...

    @property
    def turn_timeout_ms(self) -> int:
        """Longest silence during a turn."""
        ...

    @property
    def read_timeout_ms(self) -> int:
        """Longest wait for the answer to a request."""
        ...

    @property
    def stall_timeout_ms(self) -> int:
        """Longest time without any event before the orchestrator stops the run (<= 0: off)."""
        ...


ToolHandler = Callable[[str, Any], Awaitable[ToolResult]]


TOOL_SERVER_NAME = "symphony"
"""What agents call the daemon's MCP tool server: Claude Code names its tools
`mcp__symphony__<tool>`."""


@dataclass(frozen=True, slots=True)
class Grant:
    """Where one session reaches its tools over MCP (`symphony.agents.tool_server`), and the
    bearer token that opens them to it alone."""

    url: str
    token: str

    @property
    def authorization(self) -> str:
        return f"Bearer {self.token}"


EventSink = Callable[[AgentEvent], None]


@dataclass(frozen=True, slots=True)
class AgentLaunch:
    """Everything a session needs, captured at dispatch so a reload never changes it midway."""

    workspace: Path
    settings: SessionSettings
    """The block of the agent's kind (`CodexSettings` for codex), as the run captured it."""
    env: Mapping[str, str]
    tools: Sequence[ToolSpec] = ()
    handle_tool: ToolHandler | None = None
    on_event: EventSink = field(default=lambda event: None)
    resume_thread_id: str | None = None
    """Continue this thread (interrupted by a restart) when the agent can; else start one."""
    kind: str = "codex"
    """Which agent (`agent.kind`, a stage's `agent`): picks the backend."""
    tool_grant: Grant | None = None
    """For agents that take tools over MCP: the daemon's tool server and this session's
    token (codex takes `tools` on its own protocol instead)."""
    host: Host = LOCAL_HOST
    """Where the agent runs (`symphony.hosts`); its workspace path is a path there."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    turn_id: str
    session_id: str
    message: str | None = None


class AgentSession(Protocol):
    @property
    def pid(self) -> int | None: ...

    resumed: bool
    """After `start`: whether it continues `AgentLaunch.resume_thread_id`'s thread."""

    async def start(self) -> None:
        """Launch the agent and open a thread; raises AgentError."""
        ...

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        """Run one turn to its end; raises AgentError unless it completed."""
        ...

    async def stop(self) -> None:
        """Interrupt any turn, end the process; safe to call twice and after a failure."""
        ...


def open_session(launch: AgentLaunch) -> AgentSession:
    """The session of the launch's agent kind (see `symphony.agents.registry`)."""
    from symphony.agents.registry import backend

    return backend(launch.kind).session(launch)
