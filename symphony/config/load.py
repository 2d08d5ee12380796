"""WORKFLOW.md to settings: the composition root, the one place that knows every agent kind and
tracker kind.

`load_settings` reads the workflow and composes `Settings` from each section's own parser (one
module per larger section: `tracker`, `workspace`, `agents`, `server`, `worker`, `sandbox`,
`repository`, `notify`, `pricing`, `stages`; the small ones in `sections`), lets each agent kind
parse its block (`symphony.agents.registry`) and takes the tracker adapter's defaults and
`provider` keys. Only what spans sections is checked here (the stages' states against the
tracker's, the code host against the tracker, sandboxes against worker hosts, the tracker's
credential against the agents' environment), in a fixed order, so that of several mistakes the
same one is reported first. It returns complete settings or raises; there is never a
half-applied mix. Only the daemon and the command line import this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from symphony.agents.registry import BACKENDS
from symphony.base.issue import normalize_state
from symphony.base.secrets import CREDENTIAL_NAME
from symphony.base.suggest import did_you_mean
from symphony.codehost.contract import CodeHostError, code_host_adapter
from symphony.config.agents import AgentSettings, parse_agent
from symphony.config.fields import INVALID_CONFIG, ConfigError, resolve_secret, section
from symphony.config.notify import parse_notify
from symphony.config.pricing import parse_pricing
from symphony.config.repository import (
    CodeHostKind,
    FollowSettings,
    RepositorySettings,
    check_delivery,
    parse_follow,
    parse_merge,
    parse_repository,
)
from symphony.config.sandbox import Network, SandboxKind, SandboxSettings, parse_sandbox
from symphony.config.sections import (
    DEFAULT_PROMPT,
    KNOWN_KEYS,
    Settings,
    parse_budget,
    parse_editor,
    parse_hooks,
    parse_logs,
    parse_memory,
    parse_polling,
    parse_state,
)
from symphony.config.server import parse_server
from symphony.config.stages import StageMachine, parse_stages
from symphony.config.telemetry import parse_telemetry
from symphony.config.tracker import TrackerSettings, parse_tracker, tracker_kind
from symphony.config.trust import parse_trust
from symphony.config.worker import WorkerSettings, parse_worker
from symphony.config.workflow import Workflow, read_workflow
from symphony.config.workspace import parse_workspace, parse_worktrees
from symphony.tracker.contract import tracker_adapter


def load_settings(path: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate WORKFLOW.md; raises WorkflowError, ConfigError or TrackerError."""
    return build_settings(read_workflow(path), os.environ if environ is None else environ)


def build_settings(workflow: Workflow, environ: Mapping[str, str]) -> Settings:
    """Every section by its own parser, then what spans sections; raises on the first mistake."""
    raw, here = workflow.config, workflow.path.parent
    tracker_raw = section(raw, "tracker")
    kind = tracker_kind(tracker_raw)
    adapter = tracker_adapter(kind)
    tracker = parse_tracker(tracker_raw, kind, adapter)
    polling = parse_polling(section(raw, "polling"))
    workspace = parse_workspace(section(raw, "workspace"), here, environ)
    hooks = parse_hooks(section(raw, "hooks"))
    agent = parse_agent(section(raw, "agent"), environ)
    sessions = _sessions(raw, agent.kind)
    warnings = unknown_keys(raw, adapter.provider_keys)
    machine, tracker = _stage_machine(workflow, agent, tracker, tracker_raw, warnings)
    repository = _repository(raw, here, environ, tracker)
    follow, merge = parse_follow(raw.get("follow")), parse_merge(raw.get("merge"))
    tracker = _publishing(raw, repository, follow, machine, tracker, warnings)
    worker = parse_worker(section(raw, "worker"), here, environ)
    worktrees = parse_worktrees(section(raw, "workspace"), here, environ)
    sandbox, machine = _sandboxes(raw, here, environ, machine, worker, agent)
    settings = Settings(
        workflow_path=workflow.path,
        tracker=tracker,
        polling=polling,
        workspace=dataclasses.replace(workspace, worktrees=worktrees),
        hooks=hooks,
        agent=agent,
        agents=sessions,
        prompt_template=workflow.prompt_template or DEFAULT_PROMPT,
        fingerprint=workflow_fingerprint(workflow),
        server=parse_server(section(raw, "server"), environ),
        telemetry=parse_telemetry(section(raw, "telemetry")),
        warnings=tuple(warnings),
        prompt_line=workflow.prompt_line,
        machine=machine,
        state=parse_state(section(raw, "state"), workflow.path, environ),
        logs=parse_logs(section(raw, "logs")),
        editor=parse_editor(section(raw, "editor")),
        memory=parse_memory(section(raw, "memory"), here, environ),
        sandbox=sandbox,
        worker=worker,
        repository=repository,
        follow=follow,
        merge=merge,
        pricing=parse_pricing(raw.get("pricing")),
        notify=parse_notify(raw.get("notify"), environ, here),
        trust=parse_trust(section(raw, "trust")),
        budget=parse_budget(
            section(raw, "budget"),
            machine.escalation_state if machine is not None else None,
            tracker,
        ),
    )
    _refuse_credentials_in_agent_env(settings, environ)
    return dataclasses.replace(settings, credentials=_credentials(raw, environ, agent))


def _stage_machine(
    workflow: Workflow,
    agent: AgentSettings,
    tracker: TrackerSettings,
    tracker_raw: Mapping[str, Any],
    warnings: list[str],
) -> tuple[StageMachine | None, TrackerSettings]:
    """Stage mode's machine, with the tracker whose active states are the stages' and whose
    other states are their checkpoints; without `stages:`, a warning for each stage-only key."""
    raw = workflow.config
    if "stages" not in raw:
        for key, used in (
            ("escalation_state", "escalation_state" in raw),
            ("agent.max_in_review", agent.max_in_review is not None),
        ):
            if used:
                warnings.append(f"{key} is used only with stages, so it is ignored")
        return None, tracker
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
    return machine, _with_checkpoints(_stage_states(tracker, tracker_raw, machine.states), machine)


def _repository(
    raw: Mapping[str, Any], base_dir: Path, environ: Mapping[str, str], tracker: TrackerSettings
) -> RepositorySettings | None:
    """The code host the daemon publishes to, known to close the tracker's tickets or not."""
    repository = _closing(parse_repository(raw.get("repository"), environ, base_dir), tracker)
    if repository is not None:
        _check_code_host(repository.kind.value)
    return repository


def _publishing(
    raw: Mapping[str, Any],
    repository: RepositorySettings | None,
    follow: FollowSettings,
    machine: StageMachine | None,
    tracker: TrackerSettings,
    warnings: list[str],
) -> TrackerSettings:
    """Stages that publish need somewhere to publish to (`check_delivery`); when some do, the
    tracker also maps the states following their pull requests moves tickets to."""
    publishing = [s.name for s in machine.stages if s.publish] if machine is not None else []
    check_delivery(repository, publishing, raw, warnings)
    return _with_follow_states(tracker, follow.states()) if publishing else tracker


def _sandboxes(
    raw: Mapping[str, Any],
    base_dir: Path,
    environ: Mapping[str, str],
    machine: StageMachine | None,
    worker: WorkerSettings,
    agent: AgentSettings,
) -> tuple[SandboxSettings, StageMachine | None]:
    """The workflow's sandbox, and the machine whose stages carry their own over it; refused
    where the worker hosts cannot build it."""
    sandbox = parse_sandbox(
        raw.get("sandbox"), None, where="sandbox", base_dir=base_dir, environ=environ
    )
    if machine is not None:
        machine = _with_sandboxes(machine, raw, base_dir, environ)
        _check_fallbacks(sandbox, machine)
    if worker.hosts:
        _check_hosts_can_sandbox(sandbox, machine, agent)
    if worker.kubernetes is not None:
        _check_pods_can_run(sandbox, machine, agent, worker.kubernetes.daemon is not None)
    return sandbox, machine


def _check_fallbacks(sandbox: SandboxSettings, machine: StageMachine) -> None:
    """A fallback agent runs only where nothing was set up for the stage's own: a sandbox is
    built around one agent's command, API hosts and tool forward, which another may not fit."""
    for stage in machine.stages:
        boxed = stage.sandbox if stage.sandbox is not None else sandbox
        if stage.fallback_agent is not None and boxed.kind is not SandboxKind.NONE:
            raise ConfigError(
                INVALID_CONFIG,
                f"stages.{stage.name}.fallback_agent: the stage runs in a {boxed.kind} sandbox "
                "built for its own agent, which the fallback may not fit; use a fallback only "
                "in a stage without a sandbox",
            )


def _sessions(raw: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """Every agent kind's block, parsed from its section (defaults when absent)."""
    if kind not in BACKENDS:
        raise ConfigError(
            INVALID_CONFIG,
            f"agent.kind is {kind!r}, which symphony does not drive; known: {', '.join(BACKENDS)}",
        )
    return MappingProxyType({name: b.parse(section(raw, name)) for name, b in BACKENDS.items()})


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
            hint = did_you_mean(key, known)
            warnings.append(f"{where} is not a setting symphony knows, so it is ignored{hint}")

    sections = {**KNOWN_KEYS, **{kind: b.keys for kind, b in BACKENDS.items()}}
    check("", raw, (*KNOWN_KEYS[""], *BACKENDS))
    for name, known in sections.items():
        if name:
            check(name, raw.get(name), known)
    tracker = raw.get("tracker")
    if provider_keys is not None and isinstance(tracker, Mapping):
        check("tracker.provider", tracker.get("provider"), provider_keys)
    return warnings


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


def _check_pods_can_run(
    sandbox: SandboxSettings, machine: StageMachine | None, agent: AgentSettings, reached: bool
) -> None:
    """A pod reaches nothing on the daemon's loopback, where the tool server of claude and ACP
    agents listens unless `reached` (`worker.kubernetes.daemon_address`: it listens where pods
    reach it); the pod itself, from `worker.kubernetes.image` behind its NetworkPolicy, is the
    run's sandbox, and that policy carries `network: model` as the addresses of named hosts
    (a `*.suffix` pattern has none)."""
    stages = machine.stages if machine is not None else ()
    for kind in dict.fromkeys([agent.kind, *(s.agent for s in stages if s.agent)]):
        if BACKENDS[kind].tools_over_mcp and not reached:
            raise ConfigError(
                INVALID_CONFIG,
                f"agent kind {kind} takes symphony's tools over MCP from the daemon's loopback, "
                "which no pod of worker.kubernetes reaches; set worker.kubernetes.daemon_address "
                "to where pods reach the daemon, or run codex there (its tools come over its "
                "own stdio)",
            )
    used = [("sandbox", sandbox)]
    used += [(f"stages.{s.name}.sandbox", s.sandbox) for s in stages if s.sandbox is not None]
    for where, settings in used:
        patterns = [str(h) for h in settings.allow_hosts or () if h.host.startswith("*.")]
        if settings.enabled and settings.network is Network.MODEL and patterns:
            raise ConfigError(
                INVALID_CONFIG,
                f"{where}.allow_hosts {', '.join(patterns)}: with worker.kubernetes network: "
                "model is the pod's NetworkPolicy, which lets out addresses, and a pattern has "
                "none; name each host",
            )
        if settings.enabled and settings.image is not None:
            raise ConfigError(
                INVALID_CONFIG,
                f"{where}.image: with worker.kubernetes runs use worker.kubernetes.image; "
                "remove the sandbox's image",
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


_SAME_PLACE_KEYS = {CodeHostKind.GITHUB: "repository", CodeHostKind.GITLAB: "project"}
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
