"""File watches that make the daemon look at once rather than at the next poll.

The local board's folder (a person's save is seen in tens of milliseconds) and WORKFLOW.md's
folder. A watch that stops is reported and the poll still sees every change: a watch only makes
the daemon faster, never correct. On Linux the watch is inotify read in the daemon's loop
(`symphony.daemon.inotify`); elsewhere, or where inotify cannot be set up, watchfiles.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import structlog

from symphony.daemon import inotify
from symphony.tracker.contract import Watchable

log = structlog.get_logger("symphony.orchestrator")


async def watch_tracker(tracker: Watchable, changed: Callable[[], None]) -> None:
    """Tell the tracker of every change in its files, then call `changed`."""
    try:
        # Short batches: a person's save is one or two events, and each costs one look.
        watch = folder_changes(tracker.watch_paths(), quiet_ms=10, most_ms=30)
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
        async for names in folder_changes([path.parent], quiet_ms=50, most_ms=200):
            if names & {path.name, CONFIGMAP_SWAP, inotify.OVERFLOWED}:
                changed()
    except Exception as exc:  # the per-tick check still catches every change
        log.warning("workflow watcher stopped; changes seen at the next tick", reason=str(exc))


async def folder_changes(
    folders: Sequence[Path], *, quiet_ms: int, most_ms: int
) -> AsyncIterator[set[str]]:
    """The names changed in `folders` (not recursive), a batch at a time: once `quiet_ms`
    passed without another change, or `most_ms` after the batch's first."""
    if inotify.available():
        watching = False
        try:
            async for names in inotify.changes(
                folders, quiet_s=quiet_ms / 1000, most_s=most_ms / 1000
            ):
                watching = True
                yield names
            return
        except OSError as exc:
            if watching or isinstance(exc, inotify.WatchGone):
                raise
            # No inotify watch here (the instance limit reached, say): the portable way.
            log.info("inotify unavailable, watching with watchfiles", reason=str(exc))
    from watchfiles import awatch

    async for changes in awatch(*folders, debounce=most_ms, step=quiet_ms, recursive=False):
        yield {Path(name).name for _, name in changes}
