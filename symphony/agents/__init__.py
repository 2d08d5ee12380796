"""Agent sessions behind one small interface; one module per agent protocol.

A session is started in a workspace with the tracker's tools advertised, runs turns while
streaming normalized `AgentEvent`s to a callback, and is stopped when its worker ends. Agent
modules know nothing of trackers: tool calls go through the `ToolHandler` they are given
(codex takes them on its own protocol; the others over the daemon's MCP server, `Grant`).

The layout: `codex` (codex app-server), `claude` (Claude Code), `acp` (any ACP agent), each on
`stdio` (the agent's process) and, where the protocol is JSON-RPC, `jsonrpc`; `session` holds
what they share; `registry` says which kinds exist; `tool_server` serves tools over MCP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from symphony import __version__
from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.base.events import AgentEvent
from symphony.base.limits import ProviderLimit
from symphony.base.tools import ToolResult, ToolSpec
from symphony.config.agents import SessionSettings
from symphony.hosts import Host
from symphony.hosts.local import LOCAL_HOST

# Failure categories (spec §10.6).
CODEX_NOT_FOUND = ErrorCategory.CODEX_NOT_FOUND
INVALID_WORKSPACE_CWD = ErrorCategory.INVALID_WORKSPACE_CWD
RESPONSE_TIMEOUT = ErrorCategory.RESPONSE_TIMEOUT
TURN_TIMEOUT = ErrorCategory.TURN_TIMEOUT
PORT_EXIT = ErrorCategory.PORT_EXIT
RESPONSE_ERROR = ErrorCategory.RESPONSE_ERROR
TURN_FAILED = ErrorCategory.TURN_FAILED
TURN_CANCELLED = ErrorCategory.TURN_CANCELLED
TURN_INPUT_REQUIRED = ErrorCategory.TURN_INPUT_REQUIRED
STARTUP_FAILED = ErrorCategory.STARTUP_FAILED


def truncate(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters, with an ellipsis when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def client_version() -> str:
    """Symphony's version, as it introduces itself to an agent."""
    return __version__


def plain(value: Any) -> Any:
    """Settings and tool schemas hold read-only mappings; JSON needs plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


class AgentError(SymphonyError):
    """A session or turn ended without success; `category` is one of the constants above.
    `limit` says the provider refused the turn (a usage or rate limit, an overload, an outage)
    rather than the work failing: the daemon then pauses the agent kind, not the ticket."""

    def __init__(self, category: str, message: str, *, limit: ProviderLimit | None = None) -> None:
        super().__init__(category, message)
        self.limit = limit


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
    """How a completed turn ended: its ids, and the agent's final message when it said one."""

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
