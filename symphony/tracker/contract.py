"""The tracker boundary: reads for scheduling, the daemon's own writes, host-side agent tools.

Adapters live in `adapters/<kind>/` and are found by the `tracker.kind` name; installed, that
folder is the `symphony_adapters` package (`base.adapters`), a name no other distribution is
likely to use. Each adapter package declares itself once, as a typed `TrackerAdapter` named
`ADAPTER`: its default states (or None when the workflow must name them, or the tracker
defines them), the `tracker.provider` keys it reads, and `create_tracker(settings, context)`,
which validates `tracker.provider` and raises `TrackerError` (`invalid_tracker_config`,
`missing_tracker_secret`) when it cannot be used. `tracker_adapter(kind)` finds it; only the
adapter the workflow names is ever imported.

The core never looks inside provider payloads: it sees `Issue`, `dispatchable` and `native_ref`.

The writes the daemon performs itself (stage mode moves tickets, posts plans and escalations,
creates follow-up tickets, links the pull requests it opens) are typed operations of the same
contract: `move_issue`, `add_comment`, `edit_comment`, `list_comments`, `create_issue`,
`link_pull_request`, plus `tracker_states` and `ensure_states` for checking a workflow's states
against the tracker. An adapter's agent tools wrap the same operations, and the one that moves
a ticket is marked `ToolSpec.moves_ticket`, so stage mode can withhold it from agents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from symphony.base.adapters import adapter_module, available_kinds, is_kind_name
from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.base.issue import Issue
from symphony.base.tools import ToolResult, ToolSpec

if TYPE_CHECKING:
    from symphony.config.sections import TrackerSettings

# Stable categories (spec §11.4) plus the ones our adapters add.
UNSUPPORTED_TRACKER_KIND = ErrorCategory.UNSUPPORTED_TRACKER_KIND
INVALID_TRACKER_CONFIG = ErrorCategory.INVALID_TRACKER_CONFIG
MISSING_TRACKER_SECRET = ErrorCategory.MISSING_TRACKER_SECRET
TRACKER_REQUEST = ErrorCategory.TRACKER_REQUEST
TRACKER_STATUS = ErrorCategory.TRACKER_STATUS
TRACKER_RESPONSE = ErrorCategory.TRACKER_RESPONSE
TRACKER_PAGINATION = ErrorCategory.TRACKER_PAGINATION
TRACKER_RATE_LIMITED = ErrorCategory.TRACKER_RATE_LIMITED
TRACKER_INTERNAL = ErrorCategory.TRACKER_INTERNAL
"""An adapter raised something other than TrackerError: a bug, reported as a failed read."""
TRACKER_REJECTED = ErrorCategory.TRACKER_REJECTED
"""A write the tracker cannot perform as asked (an unknown state, a blocker that does not exist,
a ticket outside the configured scope): retrying it unchanged will not help."""


class TrackerError(SymphonyError):
    """A tracker failure with a stable category; `retry_after_s` when the provider said so."""

    def __init__(self, category: str, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(category, message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Comment:
    """One comment on a ticket, as the tracker stores it. `id` is the adapter's, opaque."""

    id: str
    body: str
    author: str | None = None
    created_at: datetime | None = None
    author_member: bool | None = None
    """Whether the tracker counts the author as one of its people: a GitHub repository's
    owner, member or collaborator (`author_association`), a GitLab project's member, a Linear
    workspace's member (not a guest), a Kaiten space's user, anyone on the local board; None
    when it cannot say, which `trust:` counts as not (`symphony.core.trust`)."""

    def to_template(self) -> dict[str, Any]:
        return {
            "author": self.author,
            "body": self.body,
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }


@dataclass(frozen=True, slots=True)
class NewTicket:
    """A ticket to create. `blocked_by` names existing tickets by identifier; `parent` is the
    ticket it was split from, whose scope (repository, team, board, lane) the new one shares."""

    title: str
    description: str
    state: str
    blocked_by: tuple[str, ...] = ()
    parent: Issue | None = None


@dataclass(frozen=True, slots=True)
class TrackerContext:
    """What an adapter may use besides its settings: where the workflow lives, the environment."""

    workflow_dir: Path
    environ: Mapping[str, str]


@runtime_checkable
class Watchable(Protocol):
    """A tracker whose data are files on this machine: the daemon watches `watch_paths()` and
    looks at the tracker as soon as one changes (polling stays the safety net)."""

    def watch_paths(self) -> Sequence[Path]: ...

    def watching(self, active: bool) -> None:
        """The watch started (it may then serve polls from what it last read, re-reading
        after a change) or stopped (every poll reads again)."""

    def note_change(self) -> None:
        """Something under `watch_paths()` changed."""


@runtime_checkable
class Tracker(Protocol):
    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        """Issues in scope whose state is one of `states`; [] without a request for []."""
        ...

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        """Current snapshots of the given ids; ids no longer visible are omitted."""
        ...

    def agent_tools(self) -> list[ToolSpec]:
        """Tools advertised to every agent session run against this tracker."""
        ...

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        """Run one tool call host-side for `issue`; never raises for a bad call."""
        ...

    def secret_env_names(self) -> list[str]:
        """Environment names the agent's process must not inherit."""
        ...

    async def aclose(self) -> None:
        """Release connections; the tracker is not used afterwards."""
        ...

    # The daemon's writes. Each raises TrackerError: `tracker_rejected` when the tracker cannot
    # do it as asked, the request categories when it could not be reached.

    async def move_issue(self, issue: Issue, state: str) -> None:
        """Put the ticket in `state` (the workflow's spelling); a no-op when it is there."""
        ...

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        """Post `body` (Markdown) on the ticket as the daemon."""
        ...

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        """Replace the body of one of the ticket's comments (one the daemon posted)."""
        ...

    async def list_comments(self, issue: Issue) -> list[Comment]:
        """The ticket's comments, oldest first."""
        ...

    async def create_issue(self, ticket: NewTicket) -> Issue:
        """Create a ticket in `ticket.state`, blocked by `ticket.blocked_by` where the tracker
        records blockers; returns it as a later read would."""
        ...

    async def link_pull_request(self, issue: Issue, url: str, title: str) -> None:
        """Link the ticket to the pull (merge) request the daemon opened for it, by the same
        means as the tracker's link tool; `title` is the link's text where the tracker shows
        one. Idempotent: linking the same URL again adds nothing."""
        ...

    async def tracker_states(self) -> list[str] | None:
        """Every state a ticket can be put in, when the tracker can list them (workflow states,
        columns, Status options); None when any name is accepted (labels, the local board)."""
        ...

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        """Make the tracker able to hold `states` where it can (create missing state labels);
        returns what it created."""
        ...


@dataclass(frozen=True, slots=True)
class TrackerAdapter:
    """What an adapter package declares about itself, as its `ADAPTER`."""

    kind: str
    create_tracker: Callable[[TrackerSettings, TrackerContext], Tracker]
    default_active_states: tuple[str, ...] | None = None
    """None: the workflow names them, or the tracker does (`states_from_tracker`)."""
    default_terminal_states: tuple[str, ...] | None = None
    provider_keys: tuple[str, ...] | None = None
    """Every `tracker.provider` key it reads (others are reported as unknown); None: not said."""
    states_from_tracker: bool = False
    """States the workflow leaves out are asked of the tracker before polling (Kaiten's column
    types, `resolve_states`)."""
    members: str = "nobody (the tracker does not say who its members are)"
    """Whom `Comment.author_member` counts as the tracker's people, in words for `check`."""


def tracker_adapter(kind: str) -> TrackerAdapter:
    """The adapter that `tracker.kind: <kind>` names, or `unsupported_tracker_kind`."""
    if not is_kind_name(kind):
        raise TrackerError(
            UNSUPPORTED_TRACKER_KIND, f"tracker.kind {kind!r} is not a known tracker"
        )
    module = adapter_module(kind)
    if module is None:
        raise TrackerError(
            UNSUPPORTED_TRACKER_KIND,
            f"tracker.kind {kind!r} is not supported (available: {', '.join(available_kinds())})",
        )
    adapter = getattr(module, "ADAPTER", None)
    if not isinstance(adapter, TrackerAdapter) or adapter.kind != kind:
        raise TrackerError(
            UNSUPPORTED_TRACKER_KIND, f"adapters/{kind} does not declare its TrackerAdapter"
        )
    return adapter


async def resolve_states(settings: TrackerSettings, tracker: Tracker) -> TrackerSettings:
    """Fill states the workflow left to the tracker (`states_from_tracker` adapters) by asking
    its `discover_states()`; settings that name their states come back unchanged."""
    if settings.active_states and settings.terminal_states:
        return settings
    discover = getattr(tracker, "discover_states", None)
    if discover is None:
        return settings
    active, terminal = await discover()
    if not settings.active_states and not active:
        raise TrackerError(
            INVALID_TRACKER_CONFIG,
            f"the {settings.kind} tracker offers no active states; name tracker.active_states",
        )
    return dataclasses.replace(
        settings,
        active_states=settings.active_states or tuple(active),
        terminal_states=settings.terminal_states or tuple(terminal),
    )


def create_tracker(settings: TrackerSettings, context: TrackerContext) -> Tracker:
    return tracker_adapter(settings.kind).create_tracker(settings, context)
