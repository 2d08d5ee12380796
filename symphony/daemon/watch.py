"""File watches that make the daemon look at once rather than at the next poll.

The local board's folder (a person's save is seen in tens of milliseconds) and WORKFLOW.md's
folder. A watch that stops is reported and the poll still sees every change: a watch only makes
the daemon faster, never correct.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog
from watchfiles import awatch

from symphony.tracker.contract import Watchable

log = structlog.get_logger("symphony.orchestrator")


async def watch_tracker(tracker: Watchable, changed: Callable[[], None]) -> None:
    """Tell the tracker of every change in its files, then call `changed`."""
    try:
        # Short debounce: a person's save is one or two events, and each costs one look.
        watch = awatch(*tracker.watch_paths(), debounce=30, step=10, recursive=False)
        tracker.watching(True)
        async for _ in watch:
            tracker.note_change()
            changed()
    except Exception as exc:  # polling still sees every change
        log.warning("tracker watcher stopped; changes seen at the next poll", reason=str(exc))
    finally:
        tracker.watching(False)


CONFIGMAP_SWAP = "..data"
"""What a Kubernetes ConfigMap volume replaces to update its files (a symlink to a new
timestamped folder): the file itself sees no event of its own."""


async def watch_workflow(path: Path, changed: Callable[[], None]) -> None:
    """Call `changed` whenever the file at `path` is written, created or removed, or the
    ConfigMap volume it is in swaps its contents."""
    try:
        async for changes in awatch(path.parent, debounce=200, recursive=False):
            if any(Path(name).name in (path.name, CONFIGMAP_SWAP) for _, name in changes):
                changed()
    except Exception as exc:  # the per-tick check still catches every change
        log.warning("workflow watcher stopped; changes seen at the next tick", reason=str(exc))
