"""The `linear` tracker kind: issues of one Linear project or team (see `adapters.linear.tracker`).

Default states are the names of the workflow Linear gives a new team: `Todo` and `In Progress`
are worked on; `Done`, `Canceled` (one L, Linear's spelling) and `Duplicate` end a ticket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symphony.tracker.contract import TrackerAdapter

from .api import LinearApi
from .config import LinearConfig, parse_config
from .tracker import LinearTracker

if TYPE_CHECKING:
    from symphony.config.sections import TrackerSettings
    from symphony.tracker.contract import Tracker, TrackerContext

DEFAULT_ACTIVE_STATES: tuple[str, ...] = ("Todo", "In Progress")
DEFAULT_TERMINAL_STATES: tuple[str, ...] = ("Done", "Canceled", "Duplicate")
PROVIDER_KEYS: tuple[str, ...] = (
    "endpoint",
    "project_slug",
    "team_key",
    "assignee",
    "api_key",
    "webhook_secret",
)
"""Every `tracker.provider` key this adapter reads; others are reported as unknown."""

__all__ = [
    "ADAPTER",
    "DEFAULT_ACTIVE_STATES",
    "DEFAULT_TERMINAL_STATES",
    "PROVIDER_KEYS",
    "LinearConfig",
    "LinearTracker",
    "create_tracker",
]


def create_tracker(settings: TrackerSettings, context: TrackerContext) -> Tracker:
    """A tracker for `tracker.provider`; raises `invalid_tracker_config` or
    `missing_tracker_secret` when it cannot be used. Makes no request."""
    config = parse_config(settings.provider, context.environ)
    api = LinearApi(config.endpoint, config.api_key.value)
    return LinearTracker(config, api, settings.terminal_states)


ADAPTER = TrackerAdapter(
    kind="linear",
    members="the Linear workspace's members (not its guests)",
    create_tracker=create_tracker,
    default_active_states=DEFAULT_ACTIVE_STATES,
    default_terminal_states=DEFAULT_TERMINAL_STATES,
    provider_keys=PROVIDER_KEYS,
)
