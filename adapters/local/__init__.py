"""The `local` tracker kind: a folder of Markdown ticket files (see `adapters.local.board`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from symphony.tracker.contract import TrackerAdapter

from .board import LocalBoard, board_folder

if TYPE_CHECKING:
    from symphony.config.sections import TrackerSettings
    from symphony.tracker.contract import Tracker, TrackerContext

DEFAULT_ACTIVE_STATES: tuple[str, ...] = ("Todo", "In Progress")
DEFAULT_TERMINAL_STATES: tuple[str, ...] = ("Done", "Cancelled", "Closed")
PROVIDER_KEYS: tuple[str, ...] = ("path",)
"""Every `tracker.provider` key this adapter reads; others are reported as unknown."""

__all__ = [
    "ADAPTER",
    "DEFAULT_ACTIVE_STATES",
    "DEFAULT_TERMINAL_STATES",
    "PROVIDER_KEYS",
    "LocalBoard",
    "create_tracker",
]


def create_tracker(settings: TrackerSettings, context: TrackerContext) -> Tracker:
    """A board over `tracker.provider.path`; raises `invalid_tracker_config` when unusable."""
    folder = board_folder(settings.provider, context)
    return LocalBoard(
        folder, (*settings.active_states, *settings.other_states), settings.terminal_states
    )


ADAPTER = TrackerAdapter(
    kind="local",
    create_tracker=create_tracker,
    default_active_states=DEFAULT_ACTIVE_STATES,
    default_terminal_states=DEFAULT_TERMINAL_STATES,
    provider_keys=PROVIDER_KEYS,
)
