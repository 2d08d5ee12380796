"""The workflow's stage machine: which stage a ticket's state runs, and where each outcome of a
stage takes the ticket.

A workflow with a `stages:` section runs in stage mode. Each stage owns some states (tickets in
them run that stage's prompt) and names where the daemon moves a ticket when the stage
succeeds (`on_success`), when the agent reports it is blocked (`on_blocked`) and when it keeps
working without reporting (`on_stuck`, after `max_total_turns` turns). The agent chooses its
path inside a stage; the contour is the daemon's: agents report, the daemon moves tickets.

This module declares the machine and parses it once from WORKFLOW.md into frozen values. What a
reported outcome means (the target state and the comments on the way) is decided in
`symphony.core.transitions`; performing the move is the daemon's job.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from symphony.base.issue import normalize_state
from symphony.base.suggest import did_you_mean
from symphony.config.agents import AgentBlock
from symphony.config.fields import INVALID_CONFIG, ConfigError, optional_text
from symphony.config.repository import PUBLISH_KEYS, PublishSettings, parse_publish
from symphony.config.sandbox import SandboxSettings

DEFAULT_ESCALATION_STATE = "Needs Attention"
TOTAL_TURNS_PER_MAX_TURNS = 2
"""Without `max_total_turns`, a stage may use two attempts' worth of turns before it is stuck."""

STAGE_KEYS = (
    "states",
    "prompt",
    "prompt_file",
    "on_success",
    "on_blocked",
    "on_stuck",
    "max_total_turns",
    "max_turns",
    "approval_policy",
    "thread_sandbox",
    "verify",
    "max_fix_turns",
    "on_verify_failed",
    "verify_output_chars",
    "evidence",
    "agent",
    "fallback_agent",
    "publish",
    "sandbox",
    "on_approved",
    "on_changes_requested",
)
GATE_KEYS = ("name", "run", "timeout_ms")
DEFAULT_MAX_FIX_TURNS = 2
DEFAULT_VERIFY_OUTPUT_CHARS = 4_000

_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class Gate:
    """A verification command the daemon runs in the workspace when the agent reports done."""

    name: str
    run: str
    timeout_ms: int | None = None
    """None: `hooks.timeout_ms`."""


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of the machine (`stages.<name>`): the states whose tickets run its prompt, where
    each outcome moves them, and how its runs are bounded, verified and published."""

    name: str
    states: tuple[str, ...]
    prompt_template: str
    prompt_source: str
    """Where the template came from, for messages: `WORKFLOW.md` or the prompt file's path."""
    prompt_line: int
    on_success: str
    on_blocked: str
    on_stuck: str
    max_total_turns: int
    max_turns: int | None = None
    approval_policy: Any = None
    has_approval_policy: bool = False
    thread_sandbox: str | None = None
    verify: tuple[Gate, ...] = ()
    max_fix_turns: int = DEFAULT_MAX_FIX_TURNS
    """Turns the agent gets to fix what a failed round of gates found, before escalation."""
    on_verify_failed: str = DEFAULT_ESCALATION_STATE
    verify_output_chars: int = DEFAULT_VERIFY_OUTPUT_CHARS
    """How much of a failed gate's output (its end) the fix prompt and the comment carry."""
    evidence: bool = False
    """Post the evidence comment on success (default: when the stage has gates)."""
    agent: str | None = None
    """The agent kind that runs this stage; None: `agent.kind`."""
    fallback_agent: str | None = None
    """The agent kind that runs this stage only while its own is limited by its provider
    (`core.limits`); None: the stage waits for the reset."""
    publish: PublishSettings | None = None
    """Push the branch and open or update its pull request when the stage succeeds
    (`symphony.config.repository`); None: the stage publishes nothing."""
    sandbox: SandboxSettings | None = None
    """The workflow's `sandbox:` with this stage's block over it; None: no block here."""
    on_approved: str = ""
    """Where a person's Approve at this stage's `on_success` checkpoint moves the ticket
    (default: the next stage's first state; after the last stage, the first terminal one)."""
    on_changes_requested: str = ""
    """Where Request changes moves it (default: this stage's last state, its rework state)."""
    sessions: Mapping[str, Any] = field(default_factory=dict)
    """An agent kind's block as this stage changes it (`stages.plan.claude: {model: …}`), by
    kind; kinds it does not change use the workflow's block."""

    @property
    def outcome_targets(self) -> tuple[tuple[str, str], ...]:
        """(setting, state) for every outcome that moves a ticket out of this stage."""
        targets = [
            ("on_success", self.on_success),
            ("on_blocked", self.on_blocked),
            ("on_stuck", self.on_stuck),
        ]
        if self.verify:
            targets.append(("on_verify_failed", self.on_verify_failed))
        return tuple(targets)


@dataclass(frozen=True, slots=True)
class StageMachine:
    """The stages a workflow declares (`stages:`), in order, and `escalation_state`, where a ticket
    goes by default when a person must take over; it tells which stage a state runs."""

    stages: tuple[Stage, ...]
    escalation_state: str
    _by_state: Mapping[str, Stage] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_by_state",
            {normalize_state(state): stage for stage in self.stages for state in stage.states},
        )

    def stage_for(self, state: str) -> Stage | None:
        """The stage tickets in `state` run, or None (a checkpoint, terminal or unknown state)."""
        return self._by_state.get(normalize_state(state))

    def stage_named(self, name: str | None) -> Stage | None:
        """The stage called `name`, or None (no such stage since a reload, or no name)."""
        return next((stage for stage in self.stages if stage.name == name), None)

    @property
    def states(self) -> tuple[str, ...]:
        """Every stage's states, in declaration order: the workflow's active states."""
        return tuple(state for stage in self.stages for state in stage.states)

    def checkpoint_states(self, terminal: Iterable[str]) -> tuple[str, ...]:
        """Targets where no stage runs and that are not terminal: where a person takes over."""
        skip = {normalize_state(s) for s in (*self.states, *terminal)}
        seen: dict[str, str] = {}
        for stage in self.stages:
            for _, target in stage.outcome_targets:
                key = normalize_state(target)
                if key not in skip:
                    seen.setdefault(key, target)
        return tuple(seen.values())

    def targets(self) -> tuple[str, ...]:
        """Every state the daemon may move a ticket to."""
        seen: dict[str, str] = {}
        for stage in self.stages:
            for _, target in stage.outcome_targets:
                seen.setdefault(normalize_state(target), target)
        return tuple(seen.values())

    def review_states(self, terminal: Iterable[str]) -> tuple[str, ...]:
        """Where a stage hands its tickets to a person for review: `on_success` targets that no
        stage runs and that are not terminal (Plan Review, Human Review)."""
        skip = {normalize_state(s) for s in (*self.states, *terminal)}
        seen: dict[str, str] = {}
        for stage in self.stages:
            key = normalize_state(stage.on_success)
            if key not in skip:
                seen.setdefault(key, stage.on_success)
        return tuple(seen.values())


# Outcomes and the transitions they cause


class StageOutcome(enum.Enum):
    """How a ticket's stay in a stage ended, and so which transition follows: what the agent
    reported (`done`, `blocked`), or what a guard, the gates, the pull request or a person
    decided. Not a run's end (`core.state.WorkerExit`) nor an outcome metric
    (`core.outcomes.OutcomeRecord`)."""

    DONE = "done"
    BLOCKED = "blocked"
    STUCK = "stuck"
    VERIFY_FAILED = "verify_failed"
    """The agent reported done, but the daemon's gates kept failing through every fix turn."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """The ticket spent its budget window; the daemon stopped the agent (any mode)."""
    PUBLISH_FAILED = "publish_failed"
    """The remote refused the push of a stage that publishes."""
    CHECKS_FAILED = "checks_failed"
    """The pull request's checks failed (the fixes are used up, or a state handles it)."""
    CHANGES_REQUESTED = "changes_requested"
    CONFLICT = "conflict"
    MERGED = "merged"
    CLOSED = "closed"
    """The pull request was closed without being merged."""
    APPROVED = "approved"
    """A person approved the ticket at a checkpoint (the review surface)."""
    REPLAN = "replan"
    """A person sent the ticket back to be planned again."""
    CANCELLED = "cancelled"
    """A person cancelled the ticket."""
    CAPPED = "capped"
    """An automatic re-run (a fix, a retry, a continuation) reached its cap (`core.reruns`)."""
    RUNAWAY = "runaway"
    """The runaway guard stopped the ticket: too many runs within its window."""
    SUSPECTED_INJECTION = "suspected_injection"
    """A write of the agent's carried its run's canary (`core.injection`)."""


@dataclass(frozen=True, slots=True)
class Report:
    """What the agent said through `report_outcome` (validated)."""

    outcome: StageOutcome
    summary: str
    plan: str | None = None
    open_questions: tuple[str, ...] = ()
    pull_request: str | None = None
    """The pull/merge request the agent says it opened (a URL)."""


# Declaration: parsing the `stages:` section


def parse_stages(
    raw: Mapping[str, Any],
    *,
    workflow_dir: Path,
    body_template: str,
    body_line: int,
    max_turns: int,
    terminal_states: Sequence[str],
    warnings: list[str],
    agents: Mapping[str, AgentBlock],
) -> StageMachine:
    """The machine `stages:` and `escalation_state` declare; raises ConfigError."""
    stages_raw = raw.get("stages")
    if not isinstance(stages_raw, Mapping) or not stages_raw:
        raise ConfigError(INVALID_CONFIG, "stages must be a map of stage name -> stage settings")
    escalation = _state_name(
        raw.get("escalation_state", DEFAULT_ESCALATION_STATE), "escalation_state"
    )
    defaults = _StageDefaults(
        raw, workflow_dir, body_template, body_line, max_turns, escalation, agents
    )
    stages: list[Stage] = []
    owner: dict[str, str] = {}
    for name, body in stages_raw.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(INVALID_CONFIG, "every stage needs a name (a non-empty key)")
        name = name.strip()
        where = f"stages.{name}"
        if not isinstance(body, Mapping):
            raise ConfigError(INVALID_CONFIG, f"{where} must be a map of settings")
        _warn_unknown(body, (*STAGE_KEYS, *agents), where, warnings)
        states = _states(body.get("states"), f"{where}.states")
        for state in states:
            key = normalize_state(state)
            if key in owner:
                raise ConfigError(
                    INVALID_CONFIG,
                    f"state {state!r} belongs to both stages.{owner[key]} and {where}; a state "
                    "runs one stage",
                )
            owner[key] = name
        stages.append(_stage(name, body, states, defaults, warnings))
    bodies = {str(name).strip(): body for name, body in stages_raw.items()}
    stages = _with_review_targets(stages, bodies, terminal_states)
    _check_targets(stages, owner, terminal_states)
    return StageMachine(tuple(stages), escalation)


@dataclass(frozen=True, slots=True)
class _StageDefaults:
    """What a stage falls back on where its own block is silent: the workflow's."""

    raw: Mapping[str, Any]
    """The whole front matter: a stage's agent block goes over the workflow's."""
    workflow_dir: Path
    body_template: str
    body_line: int
    max_turns: int
    escalation: str
    agents: Mapping[str, AgentBlock]


def _stage(
    name: str,
    body: Mapping[str, Any],
    states: tuple[str, ...],
    defaults: _StageDefaults,
    warnings: list[str],
) -> Stage:
    where, escalation = f"stages.{name}", defaults.escalation
    template, source, line = _prompt(
        body, where, defaults.workflow_dir, defaults.body_template, defaults.body_line
    )
    stage_max_turns = _positive(body, "max_turns", where, None)
    gates = _gates(body.get("verify"), f"{where}.verify", warnings)
    evidence = body.get("evidence", bool(gates))
    if not isinstance(evidence, bool):
        raise ConfigError(INVALID_CONFIG, f"{where}.evidence must be true or false")
    stage = Stage(
        name=name,
        states=states,
        prompt_template=template,
        prompt_source=source,
        prompt_line=line,
        on_success=_state_name(body.get("on_success", _UNSET), f"{where}.on_success"),
        on_blocked=_state_name(body.get("on_blocked", escalation), f"{where}.on_blocked"),
        on_stuck=_state_name(body.get("on_stuck", escalation), f"{where}.on_stuck"),
        max_total_turns=_positive(body, "max_total_turns", where, None)
        or (stage_max_turns or defaults.max_turns) * TOTAL_TURNS_PER_MAX_TURNS,
        max_turns=stage_max_turns,
        approval_policy=body.get("approval_policy"),
        has_approval_policy="approval_policy" in body,
        thread_sandbox=optional_text(body, f"{where}.thread_sandbox"),
        verify=gates,
        max_fix_turns=_count(body, "max_fix_turns", where, DEFAULT_MAX_FIX_TURNS),
        on_verify_failed=_state_name(
            body.get("on_verify_failed", escalation), f"{where}.on_verify_failed"
        ),
        verify_output_chars=_positive(
            body, "verify_output_chars", where, DEFAULT_VERIFY_OUTPUT_CHARS
        )
        or DEFAULT_VERIFY_OUTPUT_CHARS,
        evidence=evidence,
        agent=_agent_kind(body, where, defaults.agents),
        fallback_agent=_agent_kind(body, where, defaults.agents, key="fallback_agent"),
        publish=_publish(body, where, warnings),
        sessions=_stage_sessions(defaults.raw, body, where, defaults.agents),
    )
    if not gates:
        for key in ("max_fix_turns", "on_verify_failed", "verify_output_chars"):
            if key in body:
                warnings.append(f"{where}.{key} is used only with {where}.verify")
    return stage


def _check_targets(
    stages: Sequence[Stage], owner: Mapping[str, str], terminal_states: Sequence[str]
) -> None:
    """No stage runs in a terminal state, none hands a ticket back to itself, and only
    `on_success` may hand it to another stage: an escalation goes to a person."""
    terminal = {normalize_state(s) for s in terminal_states}
    for stage in stages:
        for state in stage.states:
            if normalize_state(state) in terminal:
                raise ConfigError(
                    INVALID_CONFIG,
                    f"state {state!r} of stages.{stage.name} is also a terminal state",
                )
        own = {normalize_state(s) for s in stage.states}
        for outcome, target in stage.outcome_targets:
            if normalize_state(target) in own:
                raise ConfigError(
                    INVALID_CONFIG,
                    f"stages.{stage.name}.{outcome} is {target!r}, one of the stage's own states: "
                    "the ticket would never leave the stage",
                )
            if outcome != "on_success" and normalize_state(target) in owner:
                raise ConfigError(
                    INVALID_CONFIG,
                    f"stages.{stage.name}.{outcome} is {target!r}, where stages."
                    f"{owner[normalize_state(target)]} runs: an escalation must go to a state "
                    "where a person takes over, or the agent would start again at once",
                )


def _with_review_targets(
    stages: list[Stage], raw: Mapping[str, Any], terminal_states: Sequence[str]
) -> list[Stage]:
    """Each stage's `on_approved` and `on_changes_requested`, given or by default."""
    done = terminal_states[0] if terminal_states else "Done"
    changed = []
    for index, stage in enumerate(stages):
        body = raw[stage.name]
        where = f"stages.{stage.name}"
        following = stages[index + 1].states[0] if index + 1 < len(stages) else done
        approved = body.get("on_approved", following)
        requested = body.get("on_changes_requested", stage.states[-1])
        changed.append(dataclasses.replace(
            stage,
            on_approved=_state_name(approved, f"{where}.on_approved"),
            on_changes_requested=_state_name(requested, f"{where}.on_changes_requested"),
        ))  # fmt: skip
    return changed


def _publish(body: Mapping[str, Any], where: str, warnings: list[str]) -> PublishSettings | None:
    raw = body.get("publish")
    if isinstance(raw, Mapping):
        _warn_unknown(raw, PUBLISH_KEYS, f"{where}.publish", warnings)
    return parse_publish(raw, f"{where}.publish")


def _prompt(
    body: Mapping[str, Any], where: str, workflow_dir: Path, body_template: str, body_line: int
) -> tuple[str, str, int]:
    inline, file = body.get("prompt"), body.get("prompt_file")
    if inline is not None and file is not None:
        raise ConfigError(INVALID_CONFIG, f"{where} has both prompt and prompt_file; keep one")
    if inline is not None:
        if not isinstance(inline, str) or not inline.strip():
            raise ConfigError(INVALID_CONFIG, f"{where}.prompt must be a non-empty template")
        return inline.strip(), "WORKFLOW.md", body_line
    if file is None:
        return body_template, "WORKFLOW.md", body_line
    if not isinstance(file, str) or not file.strip():
        raise ConfigError(INVALID_CONFIG, f"{where}.prompt_file must be a path")
    path = Path(file.strip()).expanduser()
    full = path if path.is_absolute() else workflow_dir / path
    try:
        text = full.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            INVALID_CONFIG,
            f"{where}.prompt_file {full} does not exist (it is relative to WORKFLOW.md)",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            INVALID_CONFIG, f"{where}.prompt_file {full} cannot be read: {exc}"
        ) from None
    stripped = text.lstrip()
    line = 1 + text[: len(text) - len(stripped)].count("\n")
    if not stripped.strip():
        raise ConfigError(INVALID_CONFIG, f"{where}.prompt_file {full} is empty")
    return text.strip(), str(path), line


def _states(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(INVALID_CONFIG, f"{where} must list the states this stage runs in")
    return tuple(_state_name(item, where) for item in value)


def _state_name(value: Any, where: str) -> str:
    if value is _UNSET:
        raise ConfigError(INVALID_CONFIG, f"{where} is required: the state the daemon moves to")
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise ConfigError(INVALID_CONFIG, f"{where} must be a state name (one line of text)")
    return value.strip()


def _positive(body: Mapping[str, Any], key: str, where: str, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(INVALID_CONFIG, f"{where}.{key} must be an integer of at least 1")
    return value


def _warn_unknown(
    body: Mapping[str, Any], known: Sequence[str], where: str, warnings: list[str]
) -> None:
    for key in body:
        if key not in known:
            hint = did_you_mean(str(key), known)
            warnings.append(
                f"{where}.{key} is not a setting symphony knows, so it is ignored{hint}"
            )


def _gates(value: Any, where: str, warnings: list[str]) -> tuple[Gate, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(INVALID_CONFIG, f"{where} must be a list of gates, each {{name, run}}")
    gates: list[Gate] = []
    for n, item in enumerate(value):
        at = f"{where}[{n}]"
        if not isinstance(item, Mapping):
            raise ConfigError(INVALID_CONFIG, f"{at} must be a map with name and run")
        _warn_unknown(item, GATE_KEYS, at, warnings)
        name, run = item.get("name"), item.get("run")
        if not isinstance(name, str) or not name.strip() or "\n" in name:
            raise ConfigError(INVALID_CONFIG, f"{at}.name must be a short name (one line)")
        if not isinstance(run, str) or not run.strip():
            raise ConfigError(INVALID_CONFIG, f"{at}.run must be a shell command")
        if any(g.name == name.strip() for g in gates):
            raise ConfigError(INVALID_CONFIG, f"{where} has two gates named {name.strip()!r}")
        gates.append(Gate(name.strip(), run.strip(), _positive(item, "timeout_ms", at, None)))
    return tuple(gates)


def _count(body: Mapping[str, Any], key: str, where: str, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(INVALID_CONFIG, f"{where}.{key} must be an integer of at least 0")
    return value


def _stage_sessions(
    raw: Mapping[str, Any], body: Mapping[str, Any], where: str, agents: Mapping[str, AgentBlock]
) -> Mapping[str, Any]:
    """The agent blocks this stage overrides, each its keys over the workflow's section."""
    blocks: dict[str, Any] = {}
    for kind, backend in agents.items():
        if kind not in body:
            continue
        override = body[kind]
        if not isinstance(override, Mapping):
            raise ConfigError(INVALID_CONFIG, f"{where}.{kind} must be a map of {kind} settings")
        base = raw.get(kind)
        merged = {**(base if isinstance(base, Mapping) else {}), **override}
        try:
            blocks[kind] = backend.parse(merged)
        except ConfigError as exc:
            raise ConfigError(exc.category, f"{where}: {exc.message}") from None
    return MappingProxyType(blocks)


def _agent_kind(
    body: Mapping[str, Any], where: str, agents: Mapping[str, AgentBlock], key: str = "agent"
) -> str | None:
    kind = optional_text(body, f"{where}.{key}")
    if kind is not None and kind not in agents:
        raise ConfigError(
            INVALID_CONFIG,
            f"{where}.{key} is {kind!r}, which symphony does not drive; known: {', '.join(agents)}",
        )
    return kind
