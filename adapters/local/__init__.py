"""The `local` kinds: a tracker that is a folder of Markdown ticket files (`adapters.local.board`),
and a code host that is a folder of pull request files beside a bare repository
(`adapters.local.pulls`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from symphony.codehost.contract import CodeHostAdapter
from symphony.tracker.contract import TrackerAdapter

from .board import LocalBoard, board_folder

if TYPE_CHECKING:
    from symphony.codehost.contract import CodeHost
    from symphony.config.repository import RepositorySettings
    from symphony.config.sections import TrackerSettings
    from symphony.tracker.contract import Tracker, TrackerContext

DEFAULT_ACTIVE_STATES: tuple[str, ...] = ("Todo", "In Progress")
DEFAULT_TERMINAL_STATES: tuple[str, ...] = ("Done", "Cancelled", "Closed")
PROVIDER_KEYS: tuple[str, ...] = ("path",)
"""Every `tracker.provider` key this adapter reads; others are reported as unknown."""

__all__ = [
    "ADAPTER",
    "CODE_HOST",
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
    members="everyone who writes on the board",
    create_tracker=create_tracker,
    default_active_states=DEFAULT_ACTIVE_STATES,
    default_terminal_states=DEFAULT_TERMINAL_STATES,
    provider_keys=PROVIDER_KEYS,
)


def create_code_host(repository: RepositorySettings) -> CodeHost:
    """The pull requests beside the bare repository `repository` names; loaded by a workflow
    that publishes there, not by every local board."""
    from .pulls import LocalPulls

    return LocalPulls(repository)


CODE_HOST = CodeHostAdapter(kind="local", create=create_code_host)
