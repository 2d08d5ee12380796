"""The agent kinds symphony can drive, each with its settings block, its environment and its
session.

A backend is what `agent.kind` (or a stage's `agent`) names: the WORKFLOW.md section that
configures it (`codex:`), the keys that section may hold, the variables of the daemon's
environment the agent needs to reach its model (`symphony.workspace.environment`), how its block is
parsed, and the `AgentSession` that speaks its protocol. The core sees only the neutral
`SessionSettings` of a block. A backend's settings come from `symphony.config`; its session
module is imported when its first session opens, so a daemon loads only the agents it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from symphony.agents import AgentLaunch, AgentSession
from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.config import acp, claude, codex
from symphony.config.agents import SessionSettings
from symphony.config.sandbox import HostPattern, parse_host_pattern
from symphony.config.telemetry import otlp_env
from symphony.hosts.sandbox.home import NO_CREDENTIALS, HomeCredentials

UNKNOWN_AGENT = ErrorCategory.UNKNOWN_AGENT_KIND


@dataclass(frozen=True, slots=True)
class Backend:
    """An agent kind symphony can drive: its WORKFLOW.md section, environment and session."""

    kind: str
    keys: tuple[str, ...]
    """The keys its WORKFLOW.md section (named like the kind) may hold."""
    env_names: tuple[str, ...]
    """What it needs of the daemon's environment besides the allowlist every child gets."""
    parse: Callable[[Mapping[str, Any]], SessionSettings]
    session: Callable[[AgentLaunch], AgentSession]
    tools_over_mcp: bool = False
    """It takes the tracker's tools from the daemon's MCP server, not on its own protocol."""
    sandbox_home: HomeCredentials = NO_CREDENTIALS
    """What its private home in a sandbox gets: the files it authenticates to its model with."""
    model_hosts: tuple[str, ...] = ()
    """What `sandbox.network: model` reaches by default: its provider's API hosts."""
    inside_sandbox: Callable[[SessionSettings], SessionSettings] = lambda settings: settings
    """Its settings inside a symphony sandbox (codex turns its own sandbox off there)."""
    through_gateway: Callable[[SessionSettings, Mapping[str, str]], SessionSettings] = (
        lambda settings, env: settings
    )
    """Its settings when its model calls go through the daemon's model gateway, given the
    environment that points it there (codex names the gateway as its model provider; the
    others read their `*_BASE_URL`)."""
    traces_to: Callable[[SessionSettings, str], tuple[SessionSettings, Mapping[str, str]]] = (
        lambda settings, endpoint: (settings, otlp_env(endpoint))
    )
    """Its settings and the variables to add to its environment so that it exports its own
    spans to an OTLP/HTTP traces URL (codex from its command; the others from the standard
    `OTEL_*` variables, Claude Code with its own switches too)."""
    login_files: tuple[str, ...] = ()
    """Of `sandbox_home`'s files, those that hold a login or a key: a sandbox's home goes
    without them when the gateway carries the agent's calls."""

    def home_through_gateway(self) -> HomeCredentials:
        """What its private home gets when the gateway carries its calls: no login, no key."""
        home = self.sandbox_home
        files = tuple(f for f in home.files if f not in self.login_files)
        return HomeCredentials(home.variable, home.folder, files, home.top_files)


def _codex_session(launch: AgentLaunch) -> AgentSession:
    from symphony.agents.codex import AppServerSession

    return AppServerSession(launch)


def _claude_session(launch: AgentLaunch) -> AgentSession:
    from symphony.agents.claude import ClaudeSession

    return ClaudeSession(launch)


def _acp_session(launch: AgentLaunch) -> AgentSession:
    from symphony.agents.acp import AcpSession

    return AcpSession(launch)


CODEX = Backend(
    kind="codex",
    keys=codex.KEYS,  # the spec's own section
    # Its home (where a login keeps its credentials), an API key, an endpoint, its log filter.
    env_names=("CODEX_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY", "RUST_LOG"),
    parse=codex.parse_settings,
    session=_codex_session,
    # A ChatGPT login or an API key (auth.json) and the model provider's settings.
    sandbox_home=HomeCredentials("CODEX_HOME", ".codex", ("auth.json", "config.toml")),
    model_hosts=("api.openai.com", "chatgpt.com", "auth.openai.com"),
    inside_sandbox=codex.inside_sandbox,
    through_gateway=codex.through_gateway,
    traces_to=codex.traces_to,
    login_files=("auth.json",),
)


CLAUDE = Backend(
    kind="claude",
    keys=claude.KEYS,
    env_names=claude.ENV_NAMES,
    parse=claude.parse_settings,
    session=_claude_session,
    tools_over_mcp=True,
    # A subscription login (.credentials.json) and the user's settings; an API key comes in
    # the environment instead.
    sandbox_home=HomeCredentials(
        "CLAUDE_CONFIG_DIR", ".claude", (".credentials.json", "settings.json")
    ),
    model_hosts=("api.anthropic.com",),
    traces_to=claude.traces_to,
    login_files=(".credentials.json",),
)


ACP = Backend(
    kind="acp",
    keys=acp.KEYS,
    env_names=acp.ENV_NAMES,
    parse=acp.parse_settings,
    session=_acp_session,
    tools_over_mcp=True,
    # An ACP agent is any program: it gets an empty home, and reaches what `allow_hosts` names
    # (by default Anthropic's API, for the Claude Code adapter).
    model_hosts=("api.anthropic.com",),
    # The standard variables, and the switches the Claude Code it usually runs needs.
    traces_to=claude.traces_to,
)

BACKENDS: Mapping[str, Backend] = {b.kind: b for b in (CODEX, CLAUDE, ACP)}


def backend(kind: str) -> Backend:
    found = BACKENDS.get(kind)
    if found is None:
        raise SymphonyError(
            UNKNOWN_AGENT,
            f"agent kind {kind!r} is not one symphony drives; known: {', '.join(BACKENDS)}",
        )
    return found


def open_session(launch: AgentLaunch) -> AgentSession:
    """The session of the launch's agent kind."""
    return backend(launch.kind).session(launch)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def model_hosts(
    kind: str, env: Mapping[str, str], *, gateway: bool = False
) -> tuple[HostPattern, ...]:
    """What `network: model` reaches without `allow_hosts`: the agent kind's API hosts, and
    the host of every `*_BASE_URL` its environment points it at (a proxy or a local model).
    With `gateway` (the daemon's model gateway carries its calls, and its `*_BASE_URL` names
    the gateway), not its provider's hosts: the gateway only."""
    own = () if gateway else backend(kind).model_hosts
    patterns = [parse_host_pattern(h, f"{kind} model hosts") for h in own]
    for name, value in sorted(env.items()):
        if not name.endswith("_BASE_URL"):
            continue
        try:
            parts = urlsplit(value)
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            continue
        if parts.hostname:
            patterns.append(HostPattern(parts.hostname.lower(), port))
    return tuple(dict.fromkeys(patterns))
