"""WORKFLOW.md to settings: the one place that knows every agent kind and tracker kind.

`load_settings` is the one way in: it reads the workflow, applies defaults, resolves `$VAR` and
`~` in paths, validates values, has each agent kind parse its own section
(`symphony.agents.registry`) and asks the selected tracker adapter to accept its `provider`
block. It returns complete settings or raises; there is never a half-applied mix. Only the
daemon and the command line import this module: everything else takes the settings it built.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import ipaddress
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from symphony.agents.registry import BACKENDS
from symphony.base.hosts import is_loopback
from symphony.base.issue import normalize_state
from symphony.base.secrets import CREDENTIAL_NAME
from symphony.codehost.contract import CodeHostError, code_host_adapter
from symphony.config.fields import (
    INVALID_CONFIG,
    ConfigError,
    duration_s,
    env_reference,
    integer,
    resolve_path,
    resolve_secret,
)
from symphony.config.notify import parse_notify
from symphony.config.pricing import parse_pricing
from symphony.config.repository import (
    CodeHost,
    RepositorySettings,
    check_delivery,
    parse_follow,
    parse_merge,
    parse_repository,
)
from symphony.config.sandbox import Network, SandboxSettings, parse_sandbox
from symphony.config.sections import (
    DEFAULT_BRANCH,
    DEFAULT_MEMORY_BUDGET_CHARS,
    DEFAULT_PROMPT,
    KNOWN_KEYS,
    OVERLAP_MODES,
    AgentSettings,
    BudgetSettings,
    EditorSettings,
    HooksSettings,
    HostSpec,
    LogSettings,
    MemorySettings,
    OverlapMode,
    PollingSettings,
    ServerSettings,
    Settings,
    SshSettings,
    StateSettings,
    TrackerSettings,
    WorkerSettings,
    WorkspaceSettings,
    WorktreeSettings,
)
from symphony.config.stages import StageMachine, parse_stages
from symphony.config.workflow import Workflow, read_workflow
from symphony.tracker.contract import tracker_adapter


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
_POLLING, _HOOKS, _AGENT = PollingSettings(), HooksSettings(), AgentSettings()


def load_settings(path: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate WORKFLOW.md; raises WorkflowError, ConfigError or TrackerError."""
    return build_settings(read_workflow(path), os.environ if environ is None else environ)


def build_settings(workflow: Workflow, environ: Mapping[str, str]) -> Settings:
    raw = workflow.config
    tracker_raw = _section(raw, "tracker")
    kind = tracker_raw.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise ConfigError(INVALID_CONFIG, "tracker.kind is required (for example: local)")
    kind = kind.strip()
    adapter = tracker_adapter(kind)
    # Some trackers define their states themselves (Kaiten column types): omitted states are
    # then asked of the tracker before polling (`symphony.tracker.contract.resolve_states`).
    from_tracker = adapter.states_from_tracker
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
            adapter.default_active_states,
            kind,
            from_tracker,
        ),
        terminal_states=_states(
            tracker_raw,
            "terminal_states",
            adapter.default_terminal_states,
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
        overlap=OverlapMode(_choice(agent_raw, "agent.overlap", OVERLAP_MODES, _AGENT.overlap)),
        max_continuations=integer(
            agent_raw, "agent.max_continuations", _AGENT.max_continuations, 0
        ),
        max_retries=integer(agent_raw, "agent.max_retries", _AGENT.max_retries, 0),
        max_stall_restarts=integer(
            agent_raw, "agent.max_stall_restarts", _AGENT.max_stall_restarts, 0
        ),
        max_runs_per_ticket=integer(
            agent_raw, "agent.max_runs_per_ticket", _AGENT.max_runs_per_ticket, 1
        ),
        runaway_window_s=duration_s(
            agent_raw, "agent.runaway_window", _AGENT.runaway_window_s, minimum_s=1
        ),
    )

    sessions = _sessions(raw, agent.kind)
    warnings = unknown_keys(raw, adapter.provider_keys)
    machine = None
    if "stages" in raw:
        machine = parse_stages(
            raw,
            workflow_dir=workflow.path.parent,
            body_template=workflow.prompt_template or DEFAULT_PROMPT,
            body_line=workflow.prompt_line,
            max_turns=agent.max_turns,
            terminal_states=tracker.terminal_states,
            warnings=warnings,
            agents=BACKENDS,
        )
        tracker = _with_checkpoints(_stage_states(tracker, tracker_raw, machine.states), machine)
    else:
        for key, used in (
            ("escalation_state", "escalation_state" in raw),
            ("agent.max_in_review", agent.max_in_review is not None),
        ):
            if used:
                warnings.append(f"{key} is used only with stages, so it is ignored")

    repository = parse_repository(raw.get("repository"), environ, workflow.path.parent)
    repository = _closing(repository, tracker)
    if repository is not None:
        _check_code_host(repository.kind.value)
    follow, merge = parse_follow(raw.get("follow")), parse_merge(raw.get("merge"))
    publishing = [s.name for s in machine.stages if s.publish] if machine is not None else []
    check_delivery(repository, publishing, raw, warnings)
    if publishing:
        tracker = _with_follow_states(tracker, follow.states())

    worker = _worker(_section(raw, "worker"), workflow.path.parent, environ)
    worktrees = _worktrees(workspace_raw, workflow.path.parent, environ)
    sandbox = parse_sandbox(
        raw.get("sandbox"), None, where="sandbox", base_dir=workflow.path.parent, environ=environ
    )
    if machine is not None:
        machine = _with_sandboxes(machine, raw, workflow.path.parent, environ)
    if worker.hosts:
        _check_hosts_can_sandbox(sandbox, machine, agent)
    settings = Settings(
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
        agents=sessions,
        prompt_template=workflow.prompt_template or DEFAULT_PROMPT,
        fingerprint=workflow_fingerprint(workflow),
        server=_server(_section(raw, "server"), environ),
        warnings=tuple(warnings),
        prompt_line=workflow.prompt_line,
        machine=machine,
        state=_state(_section(raw, "state"), workflow.path, environ),
        logs=_logs(_section(raw, "logs")),
        editor=_editor(_section(raw, "editor")),
        memory=_memory(_section(raw, "memory"), workflow.path.parent, environ),
        sandbox=sandbox,
        worker=worker,
        repository=repository,
        follow=follow,
        merge=merge,
        pricing=parse_pricing(raw.get("pricing")),
        notify=parse_notify(raw.get("notify"), environ, workflow.path.parent),
        budget=_budget(
            _section(raw, "budget"),
            machine.escalation_state if machine is not None else None,
            tracker,
        ),
    )
    _refuse_credentials_in_agent_env(settings, environ)
    return dataclasses.replace(settings, credentials=_credentials(raw, environ, agent))


def _credentials(
    raw: Mapping[str, Any], environ: Mapping[str, str], agent: AgentSettings
) -> tuple[str, ...]:
    """The secret values the workflow names (`Settings.credentials`)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if isinstance(key, str) and _CREDENTIAL_KEY.search(key) and isinstance(value, str):
                    resolved = resolve_secret(value, environ)
                    if resolved:
                        found.append(resolved)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(raw)
    found += [value for name, value in agent.env.items() if CREDENTIAL_NAME.search(name)]
    return tuple(dict.fromkeys(found))


_CREDENTIAL_KEY = re.compile(r"(token|secret|password|api_?key|key)$", re.IGNORECASE)


def _refuse_credentials_in_agent_env(settings: Settings, environ: Mapping[str, str]) -> None:
    """The tracker's credential never reaches an agent, under any name: an `agent.env` value
    that is a provider key named like a token, a secret, a password or a key is refused (§15).
    (The repository's and the server's tokens are dropped from every child by value.)"""
    owned: dict[str, str] = {}
    for key, value in settings.tracker.provider.items():
        if isinstance(key, str) and _CREDENTIAL_KEY.search(key):
            resolved = resolve_secret(value, environ) if isinstance(value, str) else None
            if resolved:
                owned.setdefault(resolved, f"tracker.provider.{key}")
    for name, value in settings.agent.env.items():
        if value in owned:
            raise ConfigError(
                INVALID_CONFIG,
                f"agent.env.{name} is {owned[value]}, the daemon's own credential: agents never "
                "get it (their tools act on the tracker for them); remove it",
            )


def _with_sandboxes(
    machine: StageMachine, raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]
) -> StageMachine:
    """Each stage with a `sandbox:` block of its own gets the workflow's with it over it."""
    stages_raw = raw["stages"]
    changed = []
    for stage in machine.stages:
        body = stages_raw.get(stage.name)
        block = body.get("sandbox") if isinstance(body, Mapping) else None
        if block is None:
            changed.append(stage)
            continue
        sandbox = parse_sandbox(
            raw.get("sandbox"), block, where=f"stages.{stage.name}.sandbox",
            base_dir=base_dir, environ=environ,
        )  # fmt: skip
        changed.append(dataclasses.replace(stage, sandbox=sandbox))
    return dataclasses.replace(machine, stages=tuple(changed))


def _check_hosts_can_sandbox(
    sandbox: SandboxSettings, machine: StageMachine | None, agent: AgentSettings
) -> None:
    """On SSH hosts the sandbox is built there, without the daemon's proxy, on the host's own
    system folders; an agent that takes its tools over MCP reaches them at a port on the
    host's loopback, which `network: none` shuts it out of."""
    stages = machine.stages if machine is not None else ()
    used = [("sandbox", sandbox)]
    used += [(f"stages.{s.name}.sandbox", s.sandbox) for s in stages if s.sandbox is not None]
    runs = [(s.sandbox or sandbox, s.agent or agent.kind) for s in stages] or [
        (sandbox, agent.kind)
    ]
    for settings, kind in runs:
        if (
            settings.enabled
            and settings.network is Network.NONE
            and (BACKENDS[kind].tools_over_mcp)
        ):
            raise ConfigError(
                INVALID_CONFIG,
                f"a sandbox with network: none on worker.ssh_hosts shuts agent kind {kind} out "
                "of symphony's tools, which it reaches at a forwarded port of the host's "
                "loopback; use network: full for it there",
            )
    for where, settings in used:
        if not settings.enabled:
            continue
        if settings.image is not None:
            raise ConfigError(
                INVALID_CONFIG,
                f"{where}.image: on worker.ssh_hosts a podman sandbox runs on each host's own "
                "system folders; remove the image",
            )
        if settings.network is Network.MODEL:
            raise ConfigError(
                INVALID_CONFIG,
                f"{where}.network is model, which needs the daemon's proxy on this machine; on "
                "worker.ssh_hosts use network: none or full",
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


def _sessions(raw: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """Every agent kind's block, parsed from its section (defaults when absent)."""
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


_SAME_PLACE_KEYS = {CodeHost.GITHUB: "repository", CodeHost.GITLAB: "project"}
"""The `tracker.provider` key naming the repository or project a code host's tracker reads."""


def _check_code_host(kind: str) -> None:
    """A kind the settings know but no adapter here implements is refused when loaded, not at
    the first hand-off."""
    try:
        code_host_adapter(kind)
    except CodeHostError as exc:
        raise ConfigError(INVALID_CONFIG, exc.message) from None


def _closing(
    repository: RepositorySettings | None, tracker: TrackerSettings
) -> RepositorySettings | None:
    """Whether the repository is the tracker's own (a GitHub repository's issues, a GitLab
    project's), so that a pull request can close its ticket."""
    if repository is None or tracker.kind != repository.kind.value:
        return repository
    key = _SAME_PLACE_KEYS.get(repository.kind)
    if key is None:
        return repository
    place = tracker.provider.get(key)
    same = isinstance(place, str) and place.strip().lower() == repository.slug.lower()
    return dataclasses.replace(repository, closes_tickets=same)


def _with_follow_states(tracker: TrackerSettings, states: Sequence[str]) -> TrackerSettings:
    """The states following a pull request moves tickets to are mapped by the adapter like
    the checkpoints (a state that is active or terminal already is)."""
    extra = [s for s in states if not tracker.is_active(s) and not tracker.is_terminal(s)]
    known = {normalize_state(s) for s in tracker.other_states}
    added = tuple(s for s in extra if normalize_state(s) not in known)
    return dataclasses.replace(tracker, other_states=(*tracker.other_states, *added))


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


def _section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(INVALID_CONFIG, f"{name} must be a map of settings")
    return value


def _worktrees(
    raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str]
) -> WorktreeSettings | None:
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
    checking = raw.get("strict_host_key_checking")
    if checking is True:
        checking = "yes"
    elif checking is False:
        checking = "no"
    if checking is not None and checking not in ("yes", "accept-new", "no"):
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
        strict_host_key_checking=str(checking) if checking is not None else None,
        pass_env=names,
        max_failures=integer(raw, "worker.ssh.max_failures", 3, 1),
        cooloff_s=integer(raw, "worker.ssh.cooloff_s", 60, 1),
    )


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


MIN_TOKEN_CHARS = 16
"""A shorter `server.auth_token` is refused: it would fall to guessing within the login rate."""


def _server(raw: Mapping[str, Any], environ: Mapping[str, str]) -> ServerSettings:
    port: int | None = None
    if raw.get("port") is not None:
        port = integer(raw, "server.port", 0, 0)
        if port > 65535:
            raise ConfigError(INVALID_CONFIG, f"server.port must be at most 65535, got {port}")
    host = raw.get("host", ServerSettings().host)
    if not isinstance(host, str) or not host.strip():
        raise ConfigError(INVALID_CONFIG, "server.host must be a non-empty host name or address")
    token = raw.get("auth_token")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ConfigError(INVALID_CONFIG, "server.auth_token must be a token or $VARIABLE")
    auth_token = resolve_secret(token, environ)
    if auth_token is not None and len(auth_token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            INVALID_CONFIG, f"server.auth_token must be at least {MIN_TOKEN_CHARS} characters"
        )
    if not is_loopback(host.strip()) and auth_token is None:
        raise ConfigError(
            INVALID_CONFIG,
            f"server.host {host.strip()} is reachable from other machines, so a person's "
            "actions there need a token: set server.auth_token (for example $SYMPHONY_TOKEN), "
            "or bind 127.0.0.1",
        )
    allowed = tuple(h.strip().lower() for h in _str_list(raw, "server", "allowed_hosts", ()))
    if any(not h or "/" in h or (h.startswith("*") and not h.startswith("*.")) for h in allowed):
        raise ConfigError(
            INVALID_CONFIG,
            "server.allowed_hosts takes host names (dash.example.com, *.example.com), "
            "without a scheme or a path",
        )
    proxies = _str_list(raw, "server", "trusted_proxies", ())
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ConfigError(
                INVALID_CONFIG,
                f"server.trusted_proxies takes addresses or networks (10.0.0.1, 10.0.0.0/8), "
                f"got {proxy!r}",
            ) from None
    return ServerSettings(
        port=port, host=host.strip(), auth_token=auth_token, allowed_hosts=allowed,
        trusted_proxies=tuple(p.strip() for p in proxies),
    )  # fmt: skip


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
