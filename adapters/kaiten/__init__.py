"""The `kaiten` tracker kind: cards of one Kaiten board (see `adapters.kaiten.tracker`).

Kaiten boards have no fixed state names, but every column has a type (1 queue, 2 in progress,
3 done). A workflow may therefore omit `active_states` / `terminal_states`: the daemon then asks
`KaitenTracker.discover_states()`, which takes the board's top-level queue and in-progress
columns as active and its done columns as terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symphony.tracker.contract import TrackerAdapter

from .config import KaitenConfig, parse_config
from .tracker import KaitenTracker

if TYPE_CHECKING:
    from symphony.config.sections import TrackerSettings
    from symphony.tracker.contract import Tracker, TrackerContext

STATES_FROM_TRACKER = True
DEFAULT_ACTIVE_STATES: tuple[str, ...] | None = None
DEFAULT_TERMINAL_STATES: tuple[str, ...] | None = None
PROVIDER_KEYS: tuple[str, ...] = ("domain", "base_url", "board_id", "space_id", "lane_id", "token")
"""Every `tracker.provider` key this adapter reads; others are reported as unknown."""

__all__ = [
    "ADAPTER",
    "DEFAULT_ACTIVE_STATES",
    "DEFAULT_TERMINAL_STATES",
    "PROVIDER_KEYS",
    "STATES_FROM_TRACKER",
    "KaitenConfig",
    "KaitenTracker",
    "create_tracker",
]


def create_tracker(settings: TrackerSettings, context: TrackerContext) -> Tracker:
    """A tracker for `tracker.provider`; raises `invalid_tracker_config` or
    `missing_tracker_secret` when it cannot be used. Makes no request."""
    config = parse_config(settings.provider, context.environ)
    return KaitenTracker(
        config,
        workflow_states=(
            *settings.active_states,
            *settings.other_states,
            *settings.terminal_states,
        ),
        terminal_states=settings.terminal_states,
    )


ADAPTER = TrackerAdapter(
    kind="kaiten",
    members="the Kaiten company's users",
    create_tracker=create_tracker,
    default_active_states=DEFAULT_ACTIVE_STATES,
    default_terminal_states=DEFAULT_TERMINAL_STATES,
    provider_keys=PROVIDER_KEYS,
    states_from_tracker=STATES_FROM_TRACKER,
)
