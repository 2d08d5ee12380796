"""Workflow states carried by labels (GitHub and GitLab issues): the two-way map between state
names and label names, built once from `tracker.provider.state_labels` and the workflow's states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from symphony.base.issue import normalize_state
from symphony.tracker.contract import INVALID_TRACKER_CONFIG, TrackerError

from .normalize import as_int


def default_label(state: str, prefix: str, separator: str) -> str:
    """`In Progress` -> `<prefix>in<separator>progress`: lower-cased, blank runs joined."""
    return prefix + separator.join(state.strip().lower().split())


@dataclass(frozen=True, slots=True)
class StateLabels:
    by_state: Mapping[str, str]
    """normalized state name -> label (as configured, or derived)."""
    spelling: Mapping[str, str]
    """normalized state name -> the state's configured spelling."""
    precedence: tuple[str, ...]
    """normalized state names in the order an issue carrying several state labels resolves."""
    prefix: str
    separator: str

    def label_for(self, state: str) -> str:
        return self.by_state.get(normalize_state(state)) or default_label(
            state, self.prefix, self.separator
        )

    def state_of(self, labels: Sequence[str]) -> str | None:
        """The state an open issue's labels give it, or None when it carries no state label.

        Configured states win in precedence order (terminal first, so an issue labelled both
        done and todo is not worked on). A label with the prefix that no configured state uses
        is itself the state (e.g. `status:human-review`), so an issue an agent handed off to an
        unconfigured state still has one.
        """
        lowered = {label.strip().lower(): label.strip() for label in labels}
        for state in self.precedence:
            if self.by_state[state].lower() in lowered:
                return self.spelling[state]
        for key, label in lowered.items():
            if self.prefix and key.startswith(self.prefix.lower()):
                return label
        return None

    def is_state_label(self, label: str) -> bool:
        key = label.strip().lower()
        known = {value.lower() for value in self.by_state.values()}
        return key in known or bool(self.prefix and key.startswith(self.prefix.lower()))


def build_state_labels(
    value: Any,
    *,
    prefix: str,
    separator: str,
    active: Sequence[str],
    terminal: Sequence[str],
    closed_state: str,
    max_chars: int,
) -> StateLabels:
    """Validate `tracker.provider.state_labels` and derive a label for every other state.

    The closed state is read from the issue's open/closed flag, not a label, unless a label was
    configured for it explicitly.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        example = default_label("Todo", prefix, separator)
        raise _invalid(f'tracker.provider.state_labels must be a map like {{"Todo": "{example}"}}')
    by_state: dict[str, str] = {}
    spelling: dict[str, str] = {}
    for state, label in value.items():
        if not isinstance(state, str) or not state.strip():
            raise _invalid("tracker.provider.state_labels keys must be state names")
        # Label lists travel comma-separated in both APIs, so a comma cannot be sent.
        if not isinstance(label, str) or not label.strip() or "," in label:
            raise _invalid(
                f"tracker.provider.state_labels.{state} must be a label name without commas"
            )
        if len(label.strip()) > max_chars:
            raise _invalid(
                f"tracker.provider.state_labels.{state} is longer than {max_chars} characters"
            )
        by_state[normalize_state(state)] = label.strip()
        spelling[normalize_state(state)] = state.strip()
    closed = normalize_state(closed_state)
    order: list[str] = []
    for state in [*terminal, *value, *active]:
        key = normalize_state(state)
        if key in order or (key == closed and key not in by_state):
            continue
        by_state.setdefault(key, default_label(state, prefix, separator))
        spelling.setdefault(key, state.strip())
        order.append(key)
    labels = [label.lower() for label in by_state.values()]
    if len(set(labels)) != len(labels):
        raise _invalid("tracker.provider.state_labels maps two states to the same label")
    return StateLabels(by_state, spelling, tuple(order), prefix, separator)


def priority_labels(value: Any, example: str) -> Mapping[str, int]:
    """`tracker.provider.priority_labels`: lower-cased label name -> priority (none when unset).

    `example` is a label of the provider's usual spelling, quoted in the error message.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid(f'tracker.provider.priority_labels must be a map like {{"{example}": 1}}')
    result: dict[str, int] = {}
    for label, priority in value.items():
        number = as_int(priority)
        if not isinstance(label, str) or not label.strip() or number is None:
            raise _invalid("tracker.provider.priority_labels maps label names to integers")
        result[label.strip().lower()] = number
    return result


def _invalid(message: str) -> TrackerError:
    return TrackerError(INVALID_TRACKER_CONFIG, message)
