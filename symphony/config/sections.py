"""Typed, frozen settings built from WORKFLOW.md front matter, with every documented default.

`load_settings` is the one way in: it reads the workflow, applies defaults, resolves `$VAR` and
`~` in paths, validates values, and asks the selected tracker adapter to accept its `provider`
block. It returns complete settings or raises; there is never a half-applied mix.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from symphony.base.errors import SymphonyError
from symphony.base.issue import normalize_state
from symphony.config.workflow import Workflow, read_workflow

if TYPE_CHECKING:
    from symphony.config.pricing import Pricing
    from symphony.config.stages import StageMachine

INVALID_CONFIG = "invalid_workflow_config"

DEFAULT_PROMPT = "You are working on an issue from the configured tracker."


class ConfigError(SymphonyError):
    """The front matter parsed but a value is missing, of the wrong type, or out of range."""


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


@dataclass(frozen=True, slots=True)
class WorkspaceSettings:
    root: Path
    base_ref: str | None = None
    """What a ticket's changes are compared against in its evidence (`git diff <base>...HEAD`);
    None: the commit the workspace was at when it was created."""
    worktrees: Any = None
    """`strategy: worktree`: the `symphony.workspace.worktrees.WorktreeSettings`; None: `empty`."""


@dataclass(frozen=True, slots=True)
class HooksSettings:
    after_create: str | None = None
    before_run: str | None = None
    after_run: str | None = None
    before_remove: str | None = None
    timeout_ms: int = 60_000


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
    overlap: str = "warn"
    """A new ticket whose files overlap another open ticket's: `serialize` holds it, `warn`
    starts it with a comment naming the other, `off` looks at nothing."""


@dataclass(frozen=True, slots=True)
class CodexSettings:
    command: str = "codex app-server"
    approval_policy: Any = "never"
    thread_sandbox: str = "workspace-write"
    turn_sandbox_policy: Mapping[str, Any] | None = None
    turn_timeout_ms: int = 3_600_000
    read_timeout_ms: int = 5_000
    stall_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The HTTP server extension (spec §13.7): off while `port` is None; 0 = any free port."""

    port: int | None = None
    host: str = "127.0.0.1"


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
    strict_host_key_checking: str = "yes"
    """`yes`, `accept-new` or `no`, passed to ssh as StrictHostKeyChecking."""
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
    codex: CodexSettings
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
    sessions: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """The settings block of every agent kind, by kind (codex's is `codex` too)."""
    editor: EditorSettings = field(default_factory=EditorSettings)
    memory: MemorySettings | None = None
    """None only in settings built by hand (tests): no notes, no `record_learning`."""
    worker: WorkerSettings = field(default_factory=WorkerSettings)

    @property
    def workflow_dir(self) -> Path:
        return self.workflow_path.parent

    def session_settings(self, kind: str) -> Any:
        """The block of agent kind `kind`: what the orchestrator times its runs by."""
        return self.codex if kind == "codex" else self.sessions[kind]


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
            "codex",
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
        ),
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
        ),
        "codex": (
            "command",
            "approval_policy",
            "thread_sandbox",
            "turn_sandbox_policy",
            "turn_timeout_ms",
            "read_timeout_ms",
            "stall_timeout_ms",
        ),
        "server": ("port", "host"),
        "state": ("path", "keep_days"),
        "logs": ("max_file_mb", "keep_days"),
        "editor": ("command",),
        "memory": ("folder", "budget_chars", "enabled"),
        "worker": ("ssh_hosts", "max_concurrent_agents_per_host", "ssh", "retry_on_same_host"),
        "budget": ("per_ticket_usd", "warn_at", "per_day_usd", "on_exceeded"),
    }
)


def unknown_keys(raw: Mapping[str, Any], provider_keys: Sequence[str] | None) -> list[str]:
    """One warning per key of a known section that symphony does not read, with a suggestion.

    `provider_keys` are the adapter's own keys (None when the adapter does not declare them).
    """
    warnings: list[str] = []

    def check(section: str, values: Any, known: Sequence[str]) -> None:
        if not isinstance(values, Mapping):
            return
        for key in values:
            if not isinstance(key, str) or key in known:
                continue
            where = f"{section}.{key}" if section else key
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            warnings.append(f"{where} is not a setting symphony knows, so it is ignored{hint}")

    from symphony.agents.registry import BACKENDS

    sections = {**KNOWN_KEYS, **{kind: b.keys for kind, b in BACKENDS.items()}}
    check("", raw, (*KNOWN_KEYS[""], *BACKENDS))
    for section, known in sections.items():
        if section:
            check(section, raw.get(section), known)
    tracker = raw.get("tracker")
    if provider_keys is not None and isinstance(tracker, Mapping):
        check("tracker.provider", tracker.get("provider"), provider_keys)
    return warnings


# Defaults read from instances: slotted dataclasses do not expose them on the class.
_POLLING, _HOOKS, _AGENT, _CODEX = (
    PollingSettings(),
    HooksSettings(),
    AgentSettings(),
    CodexSettings(),
)


def load_settings(path: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate WORKFLOW.md; raises WorkflowError, ConfigError or TrackerError."""
    return build_settings(read_workflow(path), os.environ if environ is None else environ)


def build_settings(workflow: Workflow, environ: Mapping[str, str]) -> Settings:
    from symphony.tracker.contract import adapter_module  # the adapter supplies state defaults

    raw = workflow.config
    tracker_raw = _section(raw, "tracker")
    kind = tracker_raw.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise ConfigError(INVALID_CONFIG, "tracker.kind is required (for example: local)")
    kind = kind.strip()
    module = adapter_module(kind)
    # Some trackers define their states themselves (Kaiten column types): omitted states are
    # then asked of the tracker before polling (`symphony.tracker.contract.resolve_states`).
    from_tracker = bool(getattr(module, "STATES_FROM_TRACKER", False))
    provider = tracker_raw.get("provider", {})
    if provider is None:
        provider = {}
    if not isinstance(provider, dict):
        raise ConfigError(INVALID_CONFIG, "tracker.provider must be a map")
    tracker = TrackerSettings(
        kind=kind,
        provider=MappingProxyType(dict(provider)),
        active_states=_states(
            tracker_raw,
            "active_states",
            getattr(module, "DEFAULT_ACTIVE_STATES", None),
            kind,
            from_tracker,
        ),
        terminal_states=_states(
            tracker_raw,
            "terminal_states",
            getattr(module, "DEFAULT_TERMINAL_STATES", None),
            kind,
            from_tracker,
        ),
        # Blank labels are kept: a blank required label matches no issue (spec §5.3.1).
        required_labels=tuple(
            label.strip().lower()
            for label in _str_list(tracker_raw, "tracker", "required_labels", (), keep_blank=True)
        ),
    )

    polling_raw = _section(raw, "polling")
    polling = PollingSettings(
        interval_ms=integer(polling_raw, "polling.interval_ms", _POLLING.interval_ms, 1)
    )

    workspace_raw = _section(raw, "workspace")
    root_value = workspace_raw.get("root")
    if root_value is None:
        root = Path(tempfile.gettempdir()) / "symphony_workspaces"
    elif isinstance(root_value, str) and root_value.strip():
        root = resolve_path(root_value.strip(), workflow.path.parent, environ, "workspace.root")
    else:
        raise ConfigError(INVALID_CONFIG, "workspace.root must be a path string")
    check_workspace_root(root, workflow.path.parent, environ)
    base_ref = workspace_raw.get("base_ref")
    if base_ref is not None and (not isinstance(base_ref, str) or not base_ref.strip()):
        raise ConfigError(INVALID_CONFIG, "workspace.base_ref must be a git ref, e.g. main")

    hooks_raw = _section(raw, "hooks")
    hooks = HooksSettings(
        after_create=_script(hooks_raw, "after_create"),
        before_run=_script(hooks_raw, "before_run"),
        after_run=_script(hooks_raw, "after_run"),
        before_remove=_script(hooks_raw, "before_remove"),
        timeout_ms=integer(hooks_raw, "hooks.timeout_ms", _HOOKS.timeout_ms, 1),
    )

    agent_raw = _section(raw, "agent")
    kind = agent_raw.get("kind", _AGENT.kind)
    if not isinstance(kind, str) or not kind.strip():
        raise ConfigError(INVALID_CONFIG, "agent.kind must name an agent, like codex")
    label_override = agent_raw.get("label_override", False)
    if not isinstance(label_override, bool):
        raise ConfigError(INVALID_CONFIG, "agent.label_override must be true or false")
    agent = AgentSettings(
        kind=kind.strip(),
        label_override=label_override,
        max_concurrent_agents=integer(
            agent_raw, "agent.max_concurrent_agents", _AGENT.max_concurrent_agents, 1
        ),
        max_turns=integer(agent_raw, "agent.max_turns", _AGENT.max_turns, 1),
        max_retry_backoff_ms=integer(
            agent_raw, "agent.max_retry_backoff_ms", _AGENT.max_retry_backoff_ms, 0
        ),
        max_concurrent_agents_by_state=_per_state_limits(agent_raw),
        max_in_review=(
            integer(agent_raw, "agent.max_in_review", 0, 1)
            if agent_raw.get("max_in_review") is not None
            else None
        ),
        env_passthrough=_env_names(agent_raw.get("env_passthrough")),
        env=_env_values(agent_raw.get("env"), environ),
        overlap=_choice(agent_raw, "agent.overlap", OVERLAP_MODES, _AGENT.overlap),
    )

    sessions = _sessions(raw, agent.kind)
    codex = sessions["codex"]

    warnings = unknown_keys(raw, getattr(module, "PROVIDER_KEYS", None))
    machine = None
    if "stages" in raw:
        from symphony.config.stages import parse_stages

        machine = parse_stages(
            raw,
            workflow_dir=workflow.path.parent,
            body_template=workflow.prompt_template or DEFAULT_PROMPT,
            body_line=workflow.prompt_line,
            max_turns=agent.max_turns,
            terminal_states=tracker.terminal_states,
            warnings=warnings,
        )
        tracker = _with_checkpoints(_stage_states(tracker, tracker_raw, machine.states), machine)
    else:
        for key, used in (
            ("escalation_state", "escalation_state" in raw),
            ("agent.max_in_review", agent.max_in_review is not None),
        ):
            if used:
                warnings.append(f"{key} is used only with stages, so it is ignored")

    from symphony.config.pricing import parse_pricing

    worker = _worker(_section(raw, "worker"), workflow.path.parent, environ)
    worktrees = _worktrees(workspace_raw, workflow.path.parent, environ)
    if worker.hosts:
        _check_hosts_can_run(agent, machine, worktrees)
    return Settings(
        workflow_path=workflow.path,
        tracker=tracker,
        polling=polling,
        workspace=WorkspaceSettings(
            root=root,
            base_ref=base_ref.strip() if base_ref else None,
            worktrees=worktrees,
        ),
        hooks=hooks,
        agent=agent,
        codex=codex,
        sessions=sessions,
        prompt_template=workflow.prompt_template or DEFAULT_PROMPT,
        fingerprint=workflow_fingerprint(workflow),
        server=_server(_section(raw, "server")),
        warnings=tuple(warnings),
        prompt_line=workflow.prompt_line,
        machine=machine,
        state=_state(_section(raw, "state"), workflow.path, environ),
        logs=_logs(_section(raw, "logs")),
        editor=_editor(_section(raw, "editor")),
        memory=_memory(_section(raw, "memory"), workflow.path.parent, environ),
        worker=worker,
        pricing=parse_pricing(raw.get("pricing")),
        budget=_budget(
            _section(raw, "budget"),
            machine.escalation_state if machine is not None else None,
            tracker,
        ),
    )


def default_state_path(workflow_path: Path) -> Path:
    """`.symphony/state.db` beside WORKFLOW.md; another workflow file gets its own name."""
    name = "state.db" if workflow_path.name == "WORKFLOW.md" else f"{workflow_path.stem}.state.db"
    return workflow_path.parent / ".symphony" / name


def _state(
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


_BUDGET = BudgetSettings()


def parse_codex(raw: Mapping[str, Any]) -> CodexSettings:
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


def _sessions(raw: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """Every agent kind's block, parsed from its section (defaults when absent)."""
    from symphony.agents.registry import BACKENDS

    if kind not in BACKENDS:
        raise ConfigError(
            INVALID_CONFIG,
            f"agent.kind is {kind!r}, which symphony does not drive; known: {', '.join(BACKENDS)}",
        )
    return MappingProxyType({name: b.parse(_section(raw, name)) for name, b in BACKENDS.items()})


def _budget(
    raw: Mapping[str, Any], escalation: str | None, tracker: TrackerSettings
) -> BudgetSettings:
    def usd(key: str) -> float | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(INVALID_CONFIG, f"budget.{key} must be a positive amount of USD")
        return float(value)

    warn_at = raw.get("warn_at", _BUDGET.warn_at)
    if isinstance(warn_at, bool) or not isinstance(warn_at, int | float) or not 0 < warn_at <= 1:
        raise ConfigError(INVALID_CONFIG, "budget.warn_at must be a share above 0 and at most 1")
    default = escalation or _BUDGET.on_exceeded
    target = raw.get("on_exceeded", default)
    if not isinstance(target, str) or not target.strip() or "\n" in target:
        raise ConfigError(INVALID_CONFIG, "budget.on_exceeded must be a state name")
    if tracker.is_active(target.strip()):
        raise ConfigError(
            INVALID_CONFIG,
            f"budget.on_exceeded is {target.strip()!r}, an active state: the ticket would run "
            "again at once; use a state where a person takes over",
        )
    return BudgetSettings(usd("per_ticket_usd"), float(warn_at), usd("per_day_usd"), target.strip())


def _logs(raw: Mapping[str, Any]) -> LogSettings:
    return LogSettings(
        max_file_mb=integer(raw, "logs.max_file_mb", 10, 1),
        keep_days=integer(raw, "logs.keep_days", 30, 1),
    )


def workflow_fingerprint(workflow: Workflow) -> str:
    """WORKFLOW.md's digest, extended by the prompt files its stages name: an edit of any of
    them is a change of the workflow (and a fixed prompt file ends a rejection)."""
    files = _prompt_files(workflow)
    if not files:
        return workflow.fingerprint
    digest = hashlib.sha256(workflow.fingerprint.encode())
    for path in files:
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:
            digest.update(b"unreadable")
    return digest.hexdigest()


def _prompt_files(workflow: Workflow) -> list[Path]:
    """The `prompt_file`s the raw front matter names, read leniently (validation is elsewhere)."""
    stages = workflow.config.get("stages")
    if not isinstance(stages, Mapping):
        return []
    files = []
    for stage in stages.values():
        name = stage.get("prompt_file") if isinstance(stage, Mapping) else None
        if isinstance(name, str) and name.strip():
            path = Path(name.strip()).expanduser()
            files.append(path if path.is_absolute() else workflow.path.parent / path)
    return files


def _stage_states(
    tracker: TrackerSettings, tracker_raw: Mapping[str, Any], stage_states: tuple[str, ...]
) -> TrackerSettings:
    """The active states are the stages' states: derived, or checked when both are given."""
    if "active_states" in tracker_raw:
        given = {normalize_state(s) for s in tracker.active_states}
        if given != {normalize_state(s) for s in stage_states}:
            raise ConfigError(
                INVALID_CONFIG,
                f"tracker.active_states ({', '.join(tracker.active_states)}) disagrees with the "
                f"stages' states ({', '.join(stage_states)}); in stage mode the stages define "
                "the active states, so remove tracker.active_states or make them match",
            )
    return dataclasses.replace(tracker, active_states=stage_states)


def _with_checkpoints(tracker: TrackerSettings, machine: StageMachine) -> TrackerSettings:
    return dataclasses.replace(
        tracker, other_states=machine.checkpoint_states(tracker.terminal_states)
    )


def check_workspace_root(root: Path, workflow_dir: Path, environ: Mapping[str, str]) -> None:
    """Refuse a root whose ticket folders could be a person's own: `/`, the home folder, or the
    WORKFLOW.md folder or any folder above it (symlinks resolved on every side)."""
    real = Path(os.path.realpath(root))
    homes = {Path(os.path.realpath(Path.home()))}
    if environ.get("HOME"):
        homes.add(Path(os.path.realpath(environ["HOME"])))
    if real == Path(real.anchor):
        why = "the file system root"
    elif real in homes:
        why = "your home folder"
    elif real == Path(os.path.realpath(workflow_dir)):
        why = "the folder of WORKFLOW.md"
    elif Path(os.path.realpath(workflow_dir)).is_relative_to(real):
        why = "a folder above WORKFLOW.md"
    else:
        return
    raise ConfigError(
        INVALID_CONFIG,
        f"workspace.root {root} is {why}; workspaces must live in a folder of their own "
        "(for example workspace.root: .symphony/workspaces), since every ticket gets a folder "
        "there that symphony may later delete",
    )


_VAR = r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))"
_ENV_REF = re.compile(rf"^{_VAR}$")
_PATH_VAR = re.compile(_VAR)


def env_reference(value: object) -> str | None:
    """The variable name when `value` is exactly `$NAME` or `${NAME}`, else None."""
    if not isinstance(value, str):
        return None
    match = _ENV_REF.match(value.strip())
    if match is None:
        return None
    return match.group(1) or match.group(2)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def _env_names(raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(
        isinstance(n, str) and _ENV_PATTERN.match(n) for n in items
    ):
        raise ConfigError(
            INVALID_CONFIG,
            "agent.env_passthrough must be a list of variable names (GOPATH) or prefixes "
            "ending in * (NPM_CONFIG_*)",
        )
    return tuple(items)


def _env_values(raw: object, environ: Mapping[str, str]) -> Mapping[str, str]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, Mapping):
        raise ConfigError(INVALID_CONFIG, "agent.env must be a map of variable names to values")
    values: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ConfigError(INVALID_CONFIG, f"agent.env: {name!r} is not a variable name")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(INVALID_CONFIG, f"agent.env.{name} must be a string")
        text = str(value)
        reference = env_reference(text)
        if reference is not None:
            text = environ.get(reference, "")
            if not text:
                raise ConfigError(
                    INVALID_CONFIG, f"agent.env.{name} refers to ${reference}, which is not set"
                )
        values[name] = text
    return MappingProxyType(values)


def resolve_secret(value: object, environ: Mapping[str, str]) -> str | None:
    """A secret given literally or as `$NAME`; an unset or empty variable counts as missing."""
    if value is None:
        return None
    if not isinstance(value, str):
        return None
    name = env_reference(value)
    if name is None:
        return value or None
    return environ.get(name) or None


def resolve_path(value: str, base: Path, environ: Mapping[str, str], what: str) -> Path:
    """Expand `$VAR` and `~`, resolve against `base` when relative, return an absolute path."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        resolved = environ.get(name)
        if not resolved:
            raise ConfigError(INVALID_CONFIG, f"{what} refers to ${name}, which is not set")
        return resolved

    expanded = Path(_PATH_VAR.sub(substitute, value)).expanduser()
    if not expanded.is_absolute():
        expanded = base / expanded
    return Path(os.path.normpath(expanded))


def _section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(INVALID_CONFIG, f"{name} must be a map of settings")
    return value


def integer(raw: Mapping[str, Any], dotted: str, default: int, minimum: int | None) -> int:
    """The integer setting `dotted` (its last part is the key in `raw`); integer strings are
    accepted, booleans are not; raises ConfigError naming the setting."""
    key = dotted.rsplit(".", 1)[1]
    value = raw.get(key, default)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(INVALID_CONFIG, f"{dotted} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(INVALID_CONFIG, f"{dotted} must be at least {minimum}, got {value}")
    return value


def _worktrees(raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]) -> Any:
    from symphony.workspace.worktrees import DEFAULT_BRANCH, WorktreeSettings

    strategy = raw.get("strategy", "empty")
    if strategy == "empty":
        for key in ("repository", "base", "branch"):
            if key in raw:
                raise ConfigError(
                    INVALID_CONFIG, f"workspace.{key} needs workspace.strategy: worktree"
                )
        return None
    if strategy != "worktree":
        raise ConfigError(INVALID_CONFIG, "workspace.strategy must be `empty` or `worktree`")
    repository = raw.get("repository")
    if not isinstance(repository, str) or not repository.strip():
        raise ConfigError(
            INVALID_CONFIG,
            "workspace.strategy: worktree needs workspace.repository (a local clone or a URL)",
        )
    repository = repository.strip()
    if "://" not in repository and not re.match(r"^[\w.-]+@[\w.-]+:", repository):
        repository = str(resolve_path(repository, base_dir, environ, "workspace.repository"))
    texts = {}
    for key in ("base", "branch"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(INVALID_CONFIG, f"workspace.{key} must be a non-empty string")
        texts[key] = value.strip() if isinstance(value, str) else None
    return WorktreeSettings(repository, texts["base"], texts["branch"] or DEFAULT_BRANCH)


def _worker(raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]) -> WorkerSettings:
    hosts_raw = raw.get("ssh_hosts") or []
    if not isinstance(hosts_raw, list):
        raise ConfigError(INVALID_CONFIG, "worker.ssh_hosts must be a list of hosts")
    hosts: list[HostSpec] = []
    for index, item in enumerate(hosts_raw):
        where = f"worker.ssh_hosts[{index}]"
        if isinstance(item, str):
            item = {"host": item}
        if not isinstance(item, dict):
            raise ConfigError(INVALID_CONFIG, f"{where} must be a host name or a map with host")
        unknown = sorted(set(item) - {"host", "max_agents", "workspace_root"})
        if unknown:
            raise ConfigError(INVALID_CONFIG, f"{where} has unknown key(s) {', '.join(unknown)}")
        name = item.get("host")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.@:\[\]-]+", name.strip()):
            raise ConfigError(INVALID_CONFIG, f"{where}.host must be a host name, got {name!r}")
        name = name.strip()
        if name == "local" or name.startswith("-"):
            raise ConfigError(INVALID_CONFIG, f"{where}.host cannot be {name!r}")
        max_agents = (
            integer(item, f"{where}.max_agents", 1, 1)
            if item.get("max_agents") is not None
            else None
        )
        remote_root = item.get("workspace_root")
        if remote_root is not None:
            if not isinstance(remote_root, str) or not remote_root.startswith("/"):
                raise ConfigError(
                    INVALID_CONFIG, f"{where}.workspace_root must be an absolute path on the host"
                )
            remote_root = os.path.normpath(remote_root)
            if remote_root == "/":
                raise ConfigError(INVALID_CONFIG, f"{where}.workspace_root cannot be /")
        hosts.append(HostSpec(name, max_agents, remote_root))
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise ConfigError(INVALID_CONFIG, "worker.ssh_hosts names a host twice")
    per_host = (
        integer(raw, "worker.max_concurrent_agents_per_host", 1, 1)
        if raw.get("max_concurrent_agents_per_host") is not None
        else None
    )
    retry_on_same_host = raw.get("retry_on_same_host", True)
    if not isinstance(retry_on_same_host, bool):
        raise ConfigError(INVALID_CONFIG, "worker.retry_on_same_host must be true or false")
    return WorkerSettings(
        tuple(hosts), per_host, _ssh(_section(raw, "ssh"), base_dir, environ), retry_on_same_host
    )


def _check_hosts_can_run(agent: AgentSettings, machine: Any, worktrees: Any) -> None:
    """What SSH worker hosts cannot do yet is refused at load, not at every dispatch."""
    from symphony.agents.registry import BACKENDS

    if worktrees is not None:
        raise ConfigError(
            INVALID_CONFIG,
            "workspace.strategy: worktree works on this machine only; with worker.ssh_hosts, "
            "populate each workspace with hooks (after_create: git clone ...)",
        )
    kinds = {agent.kind}
    if machine is not None:
        kinds |= {stage.agent for stage in machine.stages if stage.agent is not None}
    if agent.label_override:
        kinds |= set(BACKENDS)
    for kind in sorted(kinds):
        if BACKENDS[kind].tools_over_mcp:
            raise ConfigError(
                INVALID_CONFIG,
                f"agent kind {kind} takes symphony's tools from a server on this machine's "
                "loopback, which an SSH worker host cannot reach; run codex on worker hosts"
                + (" (or turn agent.label_override off)" if agent.label_override else ""),
            )


def _ssh(raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]) -> SshSettings:
    unknown = sorted(
        set(raw)
        - {"config_file", "connect_timeout_s", "strict_host_key_checking", "pass_env",
           "max_failures", "cooloff_s"}
    )  # fmt: skip
    if unknown:
        raise ConfigError(INVALID_CONFIG, f"worker.ssh has unknown key(s) {', '.join(unknown)}")
    config_file = raw.get("config_file")
    if config_file is not None and (not isinstance(config_file, str) or not config_file.strip()):
        raise ConfigError(INVALID_CONFIG, "worker.ssh.config_file must be a path")
    checking = raw.get("strict_host_key_checking", "yes")
    if checking is True:
        checking = "yes"
    elif checking is False:
        checking = "no"
    if checking not in ("yes", "accept-new", "no"):
        raise ConfigError(
            INVALID_CONFIG, "worker.ssh.strict_host_key_checking must be yes, accept-new or no"
        )
    pass_env = raw.get("pass_env")
    try:
        names = _env_names(pass_env)
    except ConfigError:
        raise ConfigError(
            INVALID_CONFIG,
            "worker.ssh.pass_env must be a list of variable names or prefixes ending in *",
        ) from None
    return SshSettings(
        config_file=(
            resolve_path(config_file, base_dir, environ, "worker.ssh.config_file")
            if isinstance(config_file, str)
            else None
        ),
        connect_timeout_s=integer(raw, "worker.ssh.connect_timeout_s", 10, 1),
        strict_host_key_checking=str(checking),
        pass_env=names,
        max_failures=integer(raw, "worker.ssh.max_failures", 3, 1),
        cooloff_s=integer(raw, "worker.ssh.cooloff_s", 60, 1),
    )


OVERLAP_MODES = ("serialize", "warn", "off")


def _choice(raw: Mapping[str, Any], dotted: str, choices: Sequence[str], default: str) -> str:
    value = raw.get(dotted.rsplit(".", 1)[1], default)
    if value not in choices:
        raise ConfigError(
            INVALID_CONFIG, f"{dotted} must be one of {', '.join(choices)}, got {value!r}"
        )
    return str(value)


def _memory(raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]) -> MemorySettings:
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


def _editor(raw: Mapping[str, Any]) -> EditorSettings:
    command = raw.get("command")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ConfigError(INVALID_CONFIG, "editor.command must be a command, like `code`")
    return EditorSettings(command.strip() if isinstance(command, str) else None)


def _server(raw: Mapping[str, Any]) -> ServerSettings:
    port: int | None = None
    if raw.get("port") is not None:
        port = integer(raw, "server.port", 0, 0)
        if port > 65535:
            raise ConfigError(INVALID_CONFIG, f"server.port must be at most 65535, got {port}")
    host = raw.get("host", ServerSettings().host)
    if not isinstance(host, str) or not host.strip():
        raise ConfigError(INVALID_CONFIG, "server.host must be a non-empty host name or address")
    return ServerSettings(port=port, host=host.strip())


def _script(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(INVALID_CONFIG, f"hooks.{key} must be a shell script string")
    return value if value.strip() else None


def _str_list(
    raw: Mapping[str, Any],
    section: str,
    key: str,
    default: tuple[str, ...],
    *,
    keep_blank: bool = False,
) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(INVALID_CONFIG, f"{section}.{key} must be a list of strings")
    return tuple(item for item in value if keep_blank or item.strip())


def _states(
    raw: Mapping[str, Any],
    key: str,
    default: tuple[str, ...] | None,
    kind: str,
    from_tracker: bool = False,
) -> tuple[str, ...]:
    states = _str_list(raw, "tracker", key, default or ())
    if key == "active_states" and key in raw and not states:
        raise ConfigError(INVALID_CONFIG, "tracker.active_states must name at least one state")
    if not states and default is None and not from_tracker:
        raise ConfigError(
            INVALID_CONFIG, f"tracker.{key} is required: the {kind} tracker has no default"
        )
    return states


def _per_state_limits(raw: Mapping[str, Any]) -> Mapping[str, int]:
    value = raw.get("max_concurrent_agents_by_state")
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict):
        raise ConfigError(INVALID_CONFIG, "agent.max_concurrent_agents_by_state must be a map")
    limits: dict[str, int] = {}
    for state, limit in value.items():
        # Invalid entries are ignored (spec §5.3.5), not fatal.
        if isinstance(limit, bool):
            continue
        if isinstance(limit, str) and limit.strip().isdigit():
            limit = int(limit)
        if isinstance(state, str) and isinstance(limit, int) and limit > 0:
            limits[normalize_state(state)] = limit
    return MappingProxyType(limits)
