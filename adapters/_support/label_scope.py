"""Workflow states carried by labels (GitHub and GitLab issues), shared by both adapters.

The closed state is the issue's closed flag; every other state is a label: the two-way map
between state names and label names (`StateLabels`) is built once from `tracker.provider`
(`closed_state`, `state_label_prefix`, `state_labels`) and the workflow's states
(`parse_label_states`). Reading the issues in some states (`issues_in_states`) lists the closed
issues and the open issues carrying each state's label, and keeps those whose state, read back
from their flag and labels (`LabelStates.state_of`), is one of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from symphony.base.issue import Issue, normalize_state
from symphony.config.sections import TrackerSettings
from symphony.tracker.contract import INVALID_TRACKER_CONFIG, TrackerError

from .errors import Malformed
from .normalize import as_int
from .provider import provider_str

CLOSED_FLAG = "closed"
"""An issue record's `state` when it is closed, on GitHub and GitLab alike."""


def labelled_states(settings: TrackerSettings) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The workflow's states that get labels, and its terminal states. Checkpoint states
    (stage mode) get labels like the active ones; the core decides which are worked on."""
    return (*settings.active_states, *settings.other_states), settings.terminal_states


def label_names(raw: Any) -> list[str]:
    """Label names from REST (`[{name}]` or `["name"]`) or GraphQL (`{nodes: [{name}]}`)."""
    if isinstance(raw, Mapping):
        raw = raw.get("nodes")
    if not isinstance(raw, list):
        return []
    names = (entry.get("name") if isinstance(entry, Mapping) else entry for entry in raw)
    return [name for name in names if isinstance(name, str)]


def default_label(state: str, prefix: str, separator: str) -> str:
    """`In Progress` -> `<prefix>in<separator>progress`: lower-cased, blank runs joined."""
    return prefix + separator.join(state.strip().lower().split())


@dataclass(frozen=True, slots=True)
class StateLabels:
    """The two-way map between the workflow's states and the labels that carry them."""

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


@dataclass(frozen=True, slots=True)
class LabelStates:
    """How an issue's closed flag and labels give its workflow state: a closed issue is in
    `closed_state`, an open one in the state its label names."""

    closed_state: str
    labels: StateLabels

    def state_of(self, closed: bool, names: Sequence[str]) -> str | None:
        """A closed issue is in `closed_state`; an open one in the state of its labels, or in
        none (outside the workflow) without a state label."""
        return self.closed_state if closed else self.labels.state_of(names)

    def state_of_record(self, item: Mapping[str, Any]) -> str | None:
        """The state of an issue record, from its closed flag and its labels."""
        return self.state_of(item.get("state") == CLOSED_FLAG, label_names(item.get("labels")))

    def outside_scope(self, closed: bool, open_name: str) -> str:
        """The state of an issue outside the label scheme (a blocker in another repository or
        project): only the provider's flag is known, kept so an open blocker still blocks."""
        return self.closed_state if closed else open_name


@dataclass(frozen=True, slots=True)
class LabelRules:
    """How a provider spells state labels by default, and how long a label may be."""

    default_prefix: str
    separator: str
    """What joins the words of a state in a derived label (`In Progress` -> `in-progress`)."""
    max_chars: int
    default_closed_state: str

    def default_label(self, state: str, prefix: str | None = None) -> str:
        return default_label(
            state, self.default_prefix if prefix is None else prefix, self.separator
        )


def parse_label_states(
    provider: Mapping[str, Any],
    rules: LabelRules,
    *,
    active: Sequence[str],
    terminal: Sequence[str],
) -> LabelStates:
    """`closed_state`, `state_label_prefix` and `state_labels` of `tracker.provider`."""
    closed_state = provider_str(provider, "closed_state", default=rules.default_closed_state)
    assert closed_state is not None
    prefix = provider.get("state_label_prefix", rules.default_prefix)
    # Label lists travel comma-separated in both APIs, so a comma cannot be sent.
    if not isinstance(prefix, str) or "," in prefix:
        raise _invalid(
            "tracker.provider.state_label_prefix must be a string without commas (may be empty)"
        )
    labels = build_state_labels(
        provider.get("state_labels"),
        prefix=prefix,
        separator=rules.separator,
        active=active,
        terminal=terminal,
        closed_state=closed_state,
        max_chars=rules.max_chars,
    )
    return LabelStates(closed_state, labels)


class LabelledIssues(Protocol):
    """What an adapter gives `issues_in_states`: its two listings and how a record reads."""

    async def closed_issues(self) -> list[Any]:
        """Closed issues: many, and they matter only for startup cleanup, so newest first and
        only as many pages as `closed_page_limit` allows."""
        ...

    async def labelled_issues(self, label: str) -> list[Any]:
        """The open issues carrying `label`."""
        ...

    def record_state(self, item: Any) -> tuple[str, str | None]:
        """A record's id and workflow state; raises `Malformed`."""
        ...

    def record_key(self, item: Any) -> str:
        """How a malformed record is named in the log."""
        ...

    async def issue_in(self, item: Any, state: str) -> Issue: ...


async def issues_in_states(
    states: Sequence[str], scope: LabelStates, source: LabelledIssues, skipped: dict[str, str]
) -> list[Issue]:
    """The issues in `states`, each once; a malformed record is noted in `skipped`. An issue
    that also carries the label of a state that takes precedence is left out: it is in that
    state, not the one it was listed for."""
    wanted = {normalize_state(s): s for s in states}
    closed = normalize_state(scope.closed_state)
    found: dict[str, Issue] = {}
    for key, state in wanted.items():
        items: list[Any] = []
        if key == closed:
            items += await source.closed_issues()
        if key != closed or key in scope.labels.by_state:
            items += await source.labelled_issues(scope.labels.label_for(state))
        for item in items:
            try:
                record_id, actual = source.record_state(item)
            except Malformed as exc:
                skipped[source.record_key(item)] = str(exc)
                continue
            if actual is None or normalize_state(actual) not in wanted:
                continue
            if record_id not in found:
                found[record_id] = await source.issue_in(item, actual)
    return list(found.values())


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
