"""`tracker:`: which tracker the daemon polls, which of its states are active and terminal, and
the adapter's own `provider` block, kept verbatim for the adapter to read.

What a kind of tracker brings (its default states, whether it names its states itself) is the
adapter's (`symphony.tracker.contract`): the loader looks the adapter up by `tracker_kind` and
hands it to `parse_tracker` as `TrackerDefaults`, so this module knows no adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from symphony.base.issue import normalize_state
from symphony.config.fields import INVALID_CONFIG, ConfigError, str_list

TRACKER_KEYS = ("kind", "provider", "active_states", "terminal_states", "required_labels")


@dataclass(frozen=True, slots=True)
class TrackerSettings:
    """`tracker:`: which tracker the daemon polls, which of its states are active and terminal, the
    labels a ticket needs to run, and the adapter's own `provider` block."""

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


class TrackerDefaults(Protocol):
    """What parsing needs of a tracker kind (`symphony.tracker.contract.TrackerAdapter` is
    one): its default states (None: it has none), and whether the tracker itself names the
    states the workflow leaves out."""

    @property
    def default_active_states(self) -> tuple[str, ...] | None: ...

    @property
    def default_terminal_states(self) -> tuple[str, ...] | None: ...

    @property
    def states_from_tracker(self) -> bool: ...


def tracker_kind(raw: Mapping[str, Any]) -> str:
    """`tracker.kind`, which the loader needs before the rest: it selects the adapter."""
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise ConfigError(INVALID_CONFIG, "tracker.kind is required (for example: local)")
    return kind.strip()


def parse_tracker(raw: Mapping[str, Any], kind: str, adapter: TrackerDefaults) -> TrackerSettings:
    """The `tracker:` section of a tracker of `kind`; raises ConfigError."""
    provider = raw.get("provider", {})
    if provider is None:
        provider = {}
    if not isinstance(provider, dict):
        raise ConfigError(INVALID_CONFIG, "tracker.provider must be a map")
    # Some trackers define their states themselves (Kaiten column types): omitted states are
    # then asked of the tracker before polling (`symphony.tracker.contract.resolve_states`).
    from_tracker = adapter.states_from_tracker
    return TrackerSettings(
        kind=kind,
        provider=MappingProxyType(dict(provider)),
        active_states=_states(
            raw, "active_states", adapter.default_active_states, kind, from_tracker
        ),
        terminal_states=_states(
            raw, "terminal_states", adapter.default_terminal_states, kind, from_tracker
        ),
        # Blank labels are kept: a blank required label matches no issue (spec §5.3.1).
        required_labels=tuple(
            label.strip().lower()
            for label in str_list(raw, "tracker", "required_labels", (), keep_blank=True)
        ),
    )


def _states(
    raw: Mapping[str, Any],
    key: str,
    default: tuple[str, ...] | None,
    kind: str,
    from_tracker: bool = False,
) -> tuple[str, ...]:
    states = str_list(raw, "tracker", key, default or ())
    if key == "active_states" and key in raw and not states:
        raise ConfigError(INVALID_CONFIG, "tracker.active_states must name at least one state")
    if not states and default is None and not from_tracker:
        raise ConfigError(
            INVALID_CONFIG, f"tracker.{key} is required: the {kind} tracker has no default"
        )
    return states
