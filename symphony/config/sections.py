"""The settings WORKFLOW.md declares, as typed frozen values with every documented default.

Plain dataclasses: `symphony.config.load` builds them, every other part only reads them. Agent
kinds keep their own blocks (`Settings.agents`, parsed by each backend); the worker hosts'
block is here because the daemon, the workspace and the agent launcher all read it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from symphony.base.issue import normalize_state
from symphony.config.agents import SessionSettings
from symphony.config.notify import NOTIFY_KEYS, NotifySettings
from symphony.config.repository import (
    FOLLOW_KEYS,
    MERGE_KEYS,
    REPOSITORY_KEYS,
    FollowSettings,
    MergeSettings,
    RepositorySettings,
)
from symphony.config.sandbox import SANDBOX_KEYS, SandboxSettings

if TYPE_CHECKING:
    from symphony.config.pricing import Pricing
    from symphony.config.stages import Stage, StageMachine


DEFAULT_PROMPT = "You are working on an issue from the configured tracker."


@dataclass(frozen=True, slots=True)
class TrackerSettings:
    kind: str
    provider: Mapping[str, Any]
    """Adapter-owned, preserved verbatim (unknown keys included); `$VAR` left for the adapter."""
    active_states: tuple[str, ...]
    terminal_states: tuple[str, ...]
    required_labels: tuple[str, ...] = ()
    other_states: tuple[str, ...] = ()
    """States the daemon itself moves tickets to that are neither active nor terminal (stage
    mode's checkpoints, such as Plan Review): adapters map them like the others."""
    _active: frozenset[str] = field(init=False, repr=False, compare=False)
    _terminal: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Normalized once: these checks run for every candidate on every tick.
        object.__setattr__(self, "_active", frozenset(map(normalize_state, self.active_states)))
        object.__setattr__(self, "_terminal", frozenset(map(normalize_state, self.terminal_states)))

    def is_active(self, state: str) -> bool:
        """Active and not terminal (a state listed in both is treated as terminal)."""
        key = normalize_state(state)
        return key in self._active and key not in self._terminal

    def is_terminal(self, state: str) -> bool:
        return normalize_state(state) in self._terminal


@dataclass(frozen=True, slots=True)
class PollingSettings:
    interval_ms: int = 30_000


DEFAULT_BRANCH = "symphony/{{ issue.identifier | slugify }}"


@dataclass(frozen=True, slots=True)
class WorktreeSettings:
    repository: str
    """A local path (already resolved) or a URL."""
    base: str | None = None
    """What new branches start from: a branch of the repository (`main`, `origin/main`) or a
    commit; None: the repository's default branch."""
    branch: str = DEFAULT_BRANCH


@dataclass(frozen=True, slots=True)
class WorkspaceSettings:
    root: Path
    base_ref: str | None = None
    """What a ticket's changes are compared against in its evidence (`git diff <base>...HEAD`);
    None: the commit the workspace was at when it was created."""
    worktrees: WorktreeSettings | None = None
    """`strategy: worktree`: where the shared mirror comes from; None: `empty`."""


@dataclass(frozen=True, slots=True)
class HooksSettings:
    after_create: str | None = None
    before_run: str | None = None
    after_run: str | None = None
    before_remove: str | None = None
    timeout_ms: int = 60_000


class OverlapMode(enum.StrEnum):
    """`agent.overlap`: what a new ticket whose files overlap another open ticket's gets."""

    SERIALIZE = "serialize"
    """Held until the other ticket is done."""
    WARN = "warn"
    """Started, with a comment naming the other ticket."""
    OFF = "off"
    """Nothing is looked at."""


@dataclass(frozen=True, slots=True)
class AgentSettings:
    kind: str = "codex"
    """Which agent runs a ticket unless its stage names another (`symphony.agents.registry`)."""
    label_override: bool = False
    """A ticket labelled `agent:<kind>` runs on that agent, whatever its stage says."""
    max_concurrent_agents: int = 10
    max_turns: int = 20
    max_retry_backoff_ms: int = 300_000
    max_concurrent_agents_by_state: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    max_in_review: int | None = None
    """Stage mode: hold new tickets while this many wait for a person's review."""
    env_passthrough: tuple[str, ...] = ()
    """Names (or `PREFIX*`) of the daemon's variables that children get besides the
    allowlist."""
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Variables set in every child, values resolved at load (`$VAR` from the daemon's)."""
    overlap: OverlapMode = OverlapMode.WARN
    """A new ticket whose files overlap another open ticket's: `serialize` holds it, `warn`
    starts it with a comment naming the other, `off` looks at nothing."""
    max_continuations: int = 10
    """Runs that continue a ticket whose run ended without handing it on, per stage entry."""
    max_retries: int = 5
    """Runs after an error in a row (a run that ends well starts the count again)."""
    max_stall_restarts: int = 3
    """Runs after a stall in a row."""
    max_runs_per_ticket: int = 20
    """The runaway guard: more runs of one ticket than this within `runaway_window_s` stop
    its dispatch and send it to a person, whatever loop made them."""
    runaway_window_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The HTTP server extension (spec §13.7): off while `port` is None; 0 = any free port."""

    port: int | None = None
    host: str = "127.0.0.1"
    auth_token: str | None = field(default=None, repr=False)
    """What a person's actions need (`server.auth_token`); None: actions are refused."""
    allowed_hosts: tuple[str, ...] = ()
    """The names a request's `Host` may carry (`server.allowed_hosts`; `*.domain` for its
    subdomains). Empty: the loopback names when bound to loopback, any name otherwise."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses of reverse proxies whose `X-Forwarded-For` names the client
    (`server.trusted_proxies`); empty: the connection's own address, always."""


@dataclass(frozen=True, slots=True)
class StateSettings:
    """The durable store (symphony.store): where it is, and how long a ticket's totals stay."""

    path: Path
    keep_days: int = 90


@dataclass(frozen=True, slots=True)
class BudgetSettings:
    """Spend limits: per ticket (a window a person renews by moving it back) and per day."""

    per_ticket_usd: float | None = None
    warn_at: float = 0.8
    """The share of `per_ticket_usd` at which the ticket gets one warning comment."""
    per_day_usd: float | None = None
    on_exceeded: str = "Needs Attention"


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Retention of the per-ticket log files (`--logs-root`)."""

    max_file_mb: int = 10
    keep_days: int = 30


@dataclass(frozen=True, slots=True)
class EditorSettings:
    """How `symphony open` and the dashboard open a workspace (`symphony.workspace.editor`)."""

    command: str | None = None


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One SSH worker host (`worker.ssh_hosts`): a name ssh understands (an alias of the ssh
    config file, `user@host` or `host`), how many agents it takes, and where its workspaces
    are (None: `workspace.root`, the same path there)."""

    name: str
    max_agents: int | None = None
    workspace_root: str | None = None


@dataclass(frozen=True, slots=True)
class SshSettings:
    config_file: Path | None = None
    connect_timeout_s: int = 10
    strict_host_key_checking: str | None = None
    """`yes`, `accept-new` or `no`, passed to ssh as StrictHostKeyChecking; None: ssh's own
    configuration decides (the user's `~/.ssh/config` or `config_file`; under BatchMode an
    unknown host is refused)."""
    pass_env: tuple[str, ...] = ()
    """The daemon's variables (names, or prefixes ending in `*`) a remote agent gets; nothing
    else of the daemon's environment crosses."""
    max_failures: int = 3
    """Connection failures in a row after which a host is marked down."""
    cooloff_s: int = 60
    """How long a host marked down gets no new work before it is tried again."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Where agents run (spec Appendix A): locally when `hosts` is empty, else on SSH hosts."""

    hosts: tuple[HostSpec, ...] = ()
    max_concurrent_agents_per_host: int | None = None
    ssh: SshSettings = field(default_factory=SshSettings)
    retry_on_same_host: bool = True
    """A retry waits for the host that has the ticket's workspace, rather than starting anew
    on another."""

    def capacity(self, host: HostSpec) -> int | None:
        return host.max_agents or self.max_concurrent_agents_per_host


DEFAULT_MEMORY_BUDGET_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """Notes carried between tickets (`symphony.memory`): where they live and how much of
    them a prompt gets."""

    folder: Path
    budget_chars: int = DEFAULT_MEMORY_BUDGET_CHARS
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class Settings:
    workflow_path: Path
    tracker: TrackerSettings
    polling: PollingSettings
    workspace: WorkspaceSettings
    hooks: HooksSettings
    agent: AgentSettings
    prompt_template: str
    fingerprint: str
    server: ServerSettings = field(default_factory=ServerSettings)
    warnings: tuple[str, ...] = ()
    """Problems that do not stop the workflow (unknown keys); shown by `check`, logged at start."""
    prompt_line: int = 1
    """The line of WORKFLOW.md where the prompt template starts, for error messages."""
    machine: StageMachine | None = None
    """The stage machine (stage mode), or None: spec mode, exactly as the spec describes."""
    state: StateSettings | None = None
    """Where the durable store is; None only in settings built by hand (tests)."""
    logs: LogSettings = field(default_factory=LogSettings)
    pricing: Pricing | None = None
    """What tokens cost (`symphony.config.pricing`); None only in settings built by hand (tests)."""
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    agents: Mapping[str, SessionSettings] = field(default_factory=lambda: MappingProxyType({}))
    """The settings block of every agent kind, by kind (`codex`, `claude`, `acp`)."""
    editor: EditorSettings = field(default_factory=EditorSettings)
    memory: MemorySettings | None = None
    """None only in settings built by hand (tests): no notes, no `record_learning`."""
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """The boundary around every run (`symphony.config.sandbox`); a stage may change it."""
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    repository: RepositorySettings | None = None
    """The code host the daemon publishes to (`symphony.config.repository`); None: it does not."""
    follow: FollowSettings = field(default_factory=FollowSettings)
    merge: MergeSettings = field(default_factory=MergeSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    """Who is told when a person is needed (`symphony.config.notify`)."""
    credentials: tuple[str, ...] = field(default=(), repr=False)
    """Every secret value the workflow names: each value (or `$VAR`) of a key named like a
    token, secret, password or key anywhere in the front matter, and the agent's variables
    named so (set in `agent.env` or passed through). The daemon masks them everywhere."""

    @property
    def workflow_dir(self) -> Path:
        return self.workflow_path.parent

    def session_settings(self, kind: str) -> SessionSettings:
        """The workflow's block of agent kind `kind`."""
        return self.agents[kind]

    def sandbox_for(self, stage: Stage | None) -> SandboxSettings:
        """The sandbox a stage's agent and gates run in (the workflow's outside stage mode)."""
        if stage is not None and stage.sandbox is not None:
            return stage.sandbox
        return self.sandbox

    def agent_block(self, stage: Stage | None, kind: str) -> SessionSettings:
        """The block a run of `kind` in `stage` starts with: the stage's own block of that kind
        when it has one, else the workflow's; a stage's `approval_policy` and `thread_sandbox`
        narrow a block that has them (codex's). The worker launches the agent with it and the
        scheduling core times the run by it."""
        block: Any = self.session_settings(kind)
        if stage is None:
            return cast(SessionSettings, block)
        block = stage.sessions.get(kind, block)
        narrowed: dict[str, Any] = {}
        if stage.has_approval_policy:
            narrowed["approval_policy"] = stage.approval_policy
        if stage.thread_sandbox is not None:
            narrowed["thread_sandbox"] = stage.thread_sandbox
        if narrowed and dataclasses.is_dataclass(block) and not isinstance(block, type):
            names = {f.name for f in dataclasses.fields(block)}
            changes = {key: value for key, value in narrowed.items() if key in names}
            block = dataclasses.replace(block, **changes) if changes else block
        return cast(SessionSettings, block)


# Every key symphony reads, by section. Unknown keys stay allowed (spec §5.3: other tools may
# share the file), but each one is reported with the nearest known key, so a typo is not lost.
KNOWN_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "": (
            "tracker",
            "polling",
            "workspace",
            "hooks",
            "agent",
            "server",
            "stages",
            "escalation_state",
            "state",
            "logs",
            "pricing",
            "budget",
            "editor",
            "memory",
            "worker",
            "repository",
            "follow",
            "merge",
            "sandbox",
            "notify",
        ),
        "sandbox": SANDBOX_KEYS,
        "notify": NOTIFY_KEYS,
        "tracker": ("kind", "provider", "active_states", "terminal_states", "required_labels"),
        "polling": ("interval_ms",),
        "workspace": ("root", "base_ref", "strategy", "repository", "base", "branch"),
        "hooks": ("after_create", "before_run", "after_run", "before_remove", "timeout_ms"),
        "agent": (
            "kind",
            "label_override",
            "max_concurrent_agents",
            "max_turns",
            "max_retry_backoff_ms",
            "max_concurrent_agents_by_state",
            "max_in_review",
            "env_passthrough",
            "env",
            "overlap",
            "max_continuations",
            "max_retries",
            "max_stall_restarts",
            "max_runs_per_ticket",
            "runaway_window",
        ),
        "server": ("port", "host", "auth_token", "allowed_hosts", "trusted_proxies"),
        "state": ("path", "keep_days"),
        "logs": ("max_file_mb", "keep_days"),
        "editor": ("command",),
        "memory": ("folder", "budget_chars", "enabled"),
        "worker": ("ssh_hosts", "max_concurrent_agents_per_host", "ssh", "retry_on_same_host"),
        "budget": ("per_ticket_usd", "warn_at", "per_day_usd", "on_exceeded"),
        "repository": REPOSITORY_KEYS,
        "follow": FOLLOW_KEYS,
        "merge": MERGE_KEYS,
    }
)


OVERLAP_MODES = tuple(mode.value for mode in OverlapMode)
