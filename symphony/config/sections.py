"""The settings WORKFLOW.md declares, as typed frozen values with every documented default,
and the parsers of the small sections beside the values they build.

`Settings` is the whole; `symphony.config.load` composes it from every section's parser, and
every other part only reads it. A larger section has a module of its own, with its values and
its parser (`tracker`, `workspace`, `agents`, `server`, `worker`, `sandbox`, `repository`,
`notify`, `pricing`, `stages`); its values are re-exported here, where the rest of symphony
imports every section from. Agent kinds keep their own blocks (`Settings.agents`, parsed by
each backend).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from symphony.config.agents import AGENT_KEYS, SessionSettings
from symphony.config.agents import OVERLAP_MODES as OVERLAP_MODES
from symphony.config.agents import AgentSettings as AgentSettings
from symphony.config.agents import OverlapMode as OverlapMode
from symphony.config.fields import INVALID_CONFIG, ConfigError, integer, resolve_path
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
from symphony.config.server import SERVER_KEYS
from symphony.config.server import ServerSettings as ServerSettings
from symphony.config.telemetry import TELEMETRY_KEYS, TelemetrySettings
from symphony.config.tracker import TRACKER_KEYS
from symphony.config.tracker import TrackerSettings as TrackerSettings
from symphony.config.trust import TRUST_KEYS, TrustSettings
from symphony.config.worker import WORKER_KEYS
from symphony.config.worker import HostSpec as HostSpec
from symphony.config.worker import SshSettings as SshSettings
from symphony.config.worker import WorkerSettings as WorkerSettings
from symphony.config.workspace import DEFAULT_BRANCH as DEFAULT_BRANCH
from symphony.config.workspace import WORKSPACE_KEYS
from symphony.config.workspace import WorkspaceSettings as WorkspaceSettings
from symphony.config.workspace import WorktreeSettings as WorktreeSettings

if TYPE_CHECKING:
    from symphony.config.pricing import Pricing
    from symphony.config.stages import Stage, StageMachine


DEFAULT_PROMPT = "You are working on an issue from the configured tracker."


@dataclass(frozen=True, slots=True)
class PollingSettings:
    """`polling:`: how often the daemon reads the tracker for its tickets."""

    interval_ms: int = 30_000


def parse_polling(raw: Mapping[str, Any]) -> PollingSettings:
    return PollingSettings(
        interval_ms=integer(raw, "polling.interval_ms", PollingSettings().interval_ms, 1)
    )


@dataclass(frozen=True, slots=True)
class HooksSettings:
    """`hooks:`: shell scripts run in a ticket's workspace when it is made, before and after each
    run, and before it is removed; each may take up to `timeout_ms`."""

    after_create: str | None = None
    before_run: str | None = None
    after_run: str | None = None
    before_remove: str | None = None
    timeout_ms: int = 60_000


def parse_hooks(raw: Mapping[str, Any]) -> HooksSettings:
    return HooksSettings(
        after_create=_script(raw, "after_create"),
        before_run=_script(raw, "before_run"),
        after_run=_script(raw, "after_run"),
        before_remove=_script(raw, "before_remove"),
        timeout_ms=integer(raw, "hooks.timeout_ms", HooksSettings().timeout_ms, 1),
    )


def _script(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(INVALID_CONFIG, f"hooks.{key} must be a shell script string")
    return value if value.strip() else None


@dataclass(frozen=True, slots=True)
class StateSettings:
    """The durable store (symphony.store): where it is, and how long a ticket's totals stay."""

    path: Path
    keep_days: int = 90


def default_state_path(workflow_path: Path) -> Path:
    """`.symphony/state.db` beside WORKFLOW.md; another workflow file gets its own name."""
    name = "state.db" if workflow_path.name == "WORKFLOW.md" else f"{workflow_path.stem}.state.db"
    return workflow_path.parent / ".symphony" / name


def parse_state(
    raw: Mapping[str, Any], workflow_path: Path, environ: Mapping[str, str]
) -> StateSettings:
    value = raw.get("path")
    if value is None:
        path = default_state_path(workflow_path)
    elif isinstance(value, str) and value.strip():
        path = resolve_path(value.strip(), workflow_path.parent, environ, "state.path")
    else:
        raise ConfigError(INVALID_CONFIG, "state.path must be a path string")
    return StateSettings(path=path, keep_days=integer(raw, "state.keep_days", 90, 1))


@dataclass(frozen=True, slots=True)
class BudgetSettings:
    """Spend limits: per ticket (a window a person renews by moving it back) and per day."""

    per_ticket_usd: float | None = None
    warn_at: float = 0.8
    """The share of `per_ticket_usd` at which the ticket gets one warning comment."""
    per_day_usd: float | None = None
    on_exceeded: str = "Needs Attention"


def parse_budget(
    raw: Mapping[str, Any], escalation: str | None, tracker: TrackerSettings
) -> BudgetSettings:
    """The `budget:` section; a spent ticket goes to `escalation` (stage mode's) unless
    `budget.on_exceeded` says otherwise, and never to an active state of `tracker`."""
    defaults = BudgetSettings()

    def usd(key: str) -> float | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(INVALID_CONFIG, f"budget.{key} must be a positive amount of USD")
        return float(value)

    warn_at = raw.get("warn_at", defaults.warn_at)
    if isinstance(warn_at, bool) or not isinstance(warn_at, int | float) or not 0 < warn_at <= 1:
        raise ConfigError(INVALID_CONFIG, "budget.warn_at must be a share above 0 and at most 1")
    target = raw.get("on_exceeded", escalation or defaults.on_exceeded)
    if not isinstance(target, str) or not target.strip() or "\n" in target:
        raise ConfigError(INVALID_CONFIG, "budget.on_exceeded must be a state name")
    if tracker.is_active(target.strip()):
        raise ConfigError(
            INVALID_CONFIG,
            f"budget.on_exceeded is {target.strip()!r}, an active state: the ticket would run "
            "again at once; use a state where a person takes over",
        )
    return BudgetSettings(usd("per_ticket_usd"), float(warn_at), usd("per_day_usd"), target.strip())


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Retention of the per-ticket log files (`--logs-root`)."""

    max_file_mb: int = 10
    keep_days: int = 30


def parse_logs(raw: Mapping[str, Any]) -> LogSettings:
    return LogSettings(
        max_file_mb=integer(raw, "logs.max_file_mb", 10, 1),
        keep_days=integer(raw, "logs.keep_days", 30, 1),
    )


@dataclass(frozen=True, slots=True)
class EditorSettings:
    """How `symphony open` and the dashboard open a workspace (`symphony.workspace.editor`)."""

    command: str | None = None


def parse_editor(raw: Mapping[str, Any]) -> EditorSettings:
    command = raw.get("command")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ConfigError(INVALID_CONFIG, "editor.command must be a command, like `code`")
    return EditorSettings(command.strip() if isinstance(command, str) else None)


DEFAULT_MEMORY_BUDGET_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """Notes carried between tickets (`symphony.memory`): where they live and how much of
    them a prompt gets."""

    folder: Path
    budget_chars: int = DEFAULT_MEMORY_BUDGET_CHARS
    enabled: bool = True


def parse_memory(
    raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]
) -> MemorySettings:
    """The `memory:` section; the folder is `.symphony/memory` beside WORKFLOW.md unless set."""
    folder = raw.get("folder")
    if folder is not None and (not isinstance(folder, str) or not folder.strip()):
        raise ConfigError(INVALID_CONFIG, "memory.folder must be a path, like .symphony/memory")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(INVALID_CONFIG, f"memory.enabled must be true or false, got {enabled!r}")
    return MemorySettings(
        folder=resolve_path(folder, base_dir, environ, "memory.folder")
        if isinstance(folder, str)
        else base_dir / ".symphony" / "memory",
        budget_chars=integer(raw, "memory.budget_chars", DEFAULT_MEMORY_BUDGET_CHARS, 0),
        enabled=enabled,
    )


@dataclass(frozen=True, slots=True)
class Settings:
    """The whole workflow as WORKFLOW.md declares it, every section parsed and checked: what every
    other part of the daemon reads."""

    workflow_path: Path
    tracker: TrackerSettings
    polling: PollingSettings
    workspace: WorkspaceSettings
    hooks: HooksSettings
    agent: AgentSettings
    prompt_template: str
    fingerprint: str
    server: ServerSettings = field(default_factory=ServerSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    """Where traces go (`telemetry:`); nothing is exported without an endpoint."""
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
    trust: TrustSettings = field(default_factory=TrustSettings)
    """Whose comments and reviews an agent reads as trusted (`symphony.config.trust`)."""
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
            "trust",
            "telemetry",
        ),
        "sandbox": SANDBOX_KEYS,
        "trust": TRUST_KEYS,
        "notify": NOTIFY_KEYS,
        "tracker": TRACKER_KEYS,
        "polling": ("interval_ms",),
        "workspace": WORKSPACE_KEYS,
        "hooks": ("after_create", "before_run", "after_run", "before_remove", "timeout_ms"),
        "agent": AGENT_KEYS,
        "server": SERVER_KEYS,
        "telemetry": TELEMETRY_KEYS,
        "state": ("path", "keep_days"),
        "logs": ("max_file_mb", "keep_days"),
        "editor": ("command",),
        "memory": ("folder", "budget_chars", "enabled"),
        "worker": WORKER_KEYS,
        "budget": ("per_ticket_usd", "warn_at", "per_day_usd", "on_exceeded"),
        "repository": REPOSITORY_KEYS,
        "follow": FOLLOW_KEYS,
        "merge": MERGE_KEYS,
    }
)
