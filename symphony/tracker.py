"""The tracker boundary: two reads for scheduling, optional host-side agent tools.

Adapters live in `adapters/<kind>/` and are found by the `tracker.kind` name; installed, that
folder is the `symphony_adapters` package (`ADAPTERS_PACKAGE`), a name no other distribution is
likely to use. Each adapter package exposes:

- `DEFAULT_ACTIVE_STATES` / `DEFAULT_TERMINAL_STATES`: tuples, or None when the workflow must
  name them;
- `create_tracker(settings, context) -> Tracker`, which validates `tracker.provider` and raises
  `TrackerError` (`invalid_tracker_config`, `missing_tracker_secret`) when it cannot be used.

The core never looks inside provider payloads: it sees `Issue`, `dispatchable` and `native_ref`.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from symphony.errors import SymphonyError
from symphony.issue import Issue
from symphony.tools import ToolResult, ToolSpec

if TYPE_CHECKING:
    from symphony.config import TrackerSettings

# Stable categories (spec §11.4) plus the ones our adapters add.
UNSUPPORTED_TRACKER_KIND = "unsupported_tracker_kind"
INVALID_TRACKER_CONFIG = "invalid_tracker_config"
MISSING_TRACKER_SECRET = "missing_tracker_secret"
TRACKER_REQUEST = "tracker_request"
TRACKER_STATUS = "tracker_status"
TRACKER_RESPONSE = "tracker_response"
TRACKER_PAGINATION = "tracker_pagination"
TRACKER_RATE_LIMITED = "tracker_rate_limited"
TRACKER_INTERNAL = "tracker_internal"
"""An adapter raised something other than TrackerError: a bug, reported as a failed read."""


class TrackerError(SymphonyError):
    """A tracker failure with a stable category; `retry_after_s` when the provider said so."""

    def __init__(self, category: str, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(category, message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class TrackerContext:
    """What an adapter may use besides its settings: where the workflow lives, the environment."""

    workflow_dir: Path
    environ: Mapping[str, str]


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


_KIND = re.compile(r"^[a-z][a-z0-9_]*$")

ADAPTERS_PACKAGE = "symphony_adapters"
"""The import name of the repository's `adapters/` folder (see pyproject.toml)."""


def adapter_module(kind: str) -> ModuleType:
    """The adapter package for `kind`, or `unsupported_tracker_kind`."""
    if not _KIND.match(kind):
        raise TrackerError(
            UNSUPPORTED_TRACKER_KIND, f"tracker.kind {kind!r} is not a known tracker"
        )
    try:
        module = importlib.import_module(f"{ADAPTERS_PACKAGE}.{kind}")
    except ModuleNotFoundError as exc:
        if exc.name not in (f"{ADAPTERS_PACKAGE}.{kind}", ADAPTERS_PACKAGE):
            raise
        raise TrackerError(
            UNSUPPORTED_TRACKER_KIND,
            f"tracker.kind {kind!r} is not supported (available: {', '.join(available_kinds())})",
        ) from None
    if not hasattr(module, "create_tracker"):
        raise TrackerError(UNSUPPORTED_TRACKER_KIND, f"adapters/{kind} has no create_tracker")
    return module


def available_kinds() -> list[str]:
    package = importlib.import_module(ADAPTERS_PACKAGE)
    return sorted(
        path.parent.name
        for folder in package.__path__
        for path in Path(folder).glob("*/__init__.py")
        if _KIND.match(path.parent.name)
    )


async def resolve_states(settings: TrackerSettings, tracker: Tracker) -> TrackerSettings:
    """Fill states the workflow left to the tracker (`STATES_FROM_TRACKER` adapters) by asking
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
    tracker: Tracker = adapter_module(settings.kind).create_tracker(settings, context)
    return tracker
