"""The `agent:` section, and what the rest of symphony needs of an agent kind's settings block.

`agent:` says which agent runs a ticket, how many run at once, how often a ticket may run
again, and what environment every child gets (`AgentSettings`, `parse_agent`). Each kind's
own block (`codex:`, `claude:`, ...) belongs to its backend (`symphony.agents`); here are only
the neutral `SessionSettings` every block meets (how to start the agent, its timeouts) and the
`AgentBlock` loading needs of a kind (its keys, its parser).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from symphony.base.issue import normalize_state
from symphony.config.fields import (
    INVALID_CONFIG,
    ConfigError,
    duration_s,
    env_patterns,
    env_reference,
    integer,
)

AGENT_KEYS = (
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
    "rate_limit_headroom",
)


class OverlapMode(enum.StrEnum):
    """`agent.overlap`: what a new ticket whose files overlap another open ticket's gets."""

    SERIALIZE = "serialize"
    """Held until the other ticket is done."""
    WARN = "warn"
    """Started, with a comment naming the other ticket."""
    OFF = "off"
    """Nothing is looked at."""


OVERLAP_MODES = tuple(mode.value for mode in OverlapMode)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """`agent:`: which agent runs a ticket, how many run at once, how often a ticket may run again,
    and what environment every child gets."""

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
    rate_limit_headroom: int | None = None
    """Stop starting runs on an agent once its provider reports a rate-limit window at least
    this many percent used, until that window resets (`core.limits`); None: only at the wall."""
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


# Defaults read from an instance: slotted dataclasses do not expose them on the class.
_AGENT = AgentSettings()


def parse_agent(raw: Mapping[str, Any], environ: Mapping[str, str]) -> AgentSettings:
    """The `agent:` section; `$VAR` values of `agent.env` are resolved from `environ`."""
    kind = raw.get("kind", _AGENT.kind)
    if not isinstance(kind, str) or not kind.strip():
        raise ConfigError(INVALID_CONFIG, "agent.kind must name an agent, like codex")
    label_override = raw.get("label_override", False)
    if not isinstance(label_override, bool):
        raise ConfigError(INVALID_CONFIG, "agent.label_override must be true or false")
    return AgentSettings(
        kind=kind.strip(),
        label_override=label_override,
        max_concurrent_agents=integer(
            raw, "agent.max_concurrent_agents", _AGENT.max_concurrent_agents, 1
        ),
        max_turns=integer(raw, "agent.max_turns", _AGENT.max_turns, 1),
        max_retry_backoff_ms=integer(
            raw, "agent.max_retry_backoff_ms", _AGENT.max_retry_backoff_ms, 0
        ),
        max_concurrent_agents_by_state=_per_state_limits(raw),
        max_in_review=(
            integer(raw, "agent.max_in_review", 0, 1)
            if raw.get("max_in_review") is not None
            else None
        ),
        rate_limit_headroom=_headroom(raw),
        env_passthrough=env_patterns(
            raw.get("env_passthrough"),
            "agent.env_passthrough must be a list of variable names (GOPATH) or prefixes "
            "ending in * (NPM_CONFIG_*)",
        ),
        env=_env_values(raw.get("env"), environ),
        overlap=OverlapMode(_choice(raw, "agent.overlap", OVERLAP_MODES, _AGENT.overlap)),
        max_continuations=integer(raw, "agent.max_continuations", _AGENT.max_continuations, 0),
        max_retries=integer(raw, "agent.max_retries", _AGENT.max_retries, 0),
        max_stall_restarts=integer(raw, "agent.max_stall_restarts", _AGENT.max_stall_restarts, 0),
        max_runs_per_ticket=integer(
            raw, "agent.max_runs_per_ticket", _AGENT.max_runs_per_ticket, 1
        ),
        runaway_window_s=duration_s(
            raw, "agent.runaway_window", _AGENT.runaway_window_s, minimum_s=1
        ),
    )


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


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def _choice(raw: Mapping[str, Any], dotted: str, choices: Sequence[str], default: str) -> str:
    value = raw.get(dotted.rsplit(".", 1)[1], default)
    if value not in choices:
        raise ConfigError(
            INVALID_CONFIG, f"{dotted} must be one of {', '.join(choices)}, got {value!r}"
        )
    return str(value)


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


class AgentBlock(Protocol):
    """What loading needs of an agent kind (`symphony.agents.registry.Backend` is one): the
    keys of its WORKFLOW.md section, how that section is parsed, and how it takes its tools."""

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def parse(self) -> Callable[[Mapping[str, Any]], Any]: ...

    @property
    def tools_over_mcp(self) -> bool: ...


def _headroom(raw: Mapping[str, Any]) -> int | None:
    if raw.get("rate_limit_headroom") is None:
        return None
    percent = integer(raw, "agent.rate_limit_headroom", 0, 1)
    if percent > 100:
        raise ConfigError(
            INVALID_CONFIG, f"agent.rate_limit_headroom is a percentage (1-100), got {percent}"
        )
    return percent
