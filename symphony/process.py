"""The process groups the daemon has started and not yet reaped: agents and running hooks.

Every child runs in its own process group (`start_new_session=True`) so that stopping it reaches
everything it started. Each group is tracked here from spawn until its owner has stopped it, so
that a forced shutdown (a third Ctrl-C) can kill them all at once instead of leaving orphans.
The registry is process-wide because signals are.
"""

from __future__ import annotations

import contextlib
import os
import signal

_live: set[int] = set()


def track(pgid: int) -> None:
    """Remember a process group this daemon started."""
    _live.add(pgid)


def untrack(pgid: int) -> None:
    """Forget a group whose owner has stopped it (or that finished on its own)."""
    _live.discard(pgid)


def live_groups() -> frozenset[int]:
    return frozenset(_live)


def kill_all() -> int:
    """SIGKILL every tracked group at once; returns how many were still there."""
    reached = 0
    for pgid in list(_live):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            reached += 1
    _live.clear()
    return reached
