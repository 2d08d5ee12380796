"""Child processes the daemon supervises: agents, hooks and verification gates.

Every child runs in its own process group (`start_new_session=True`) so that stopping it reaches
everything it started. Each group is tracked here from spawn until its owner has stopped it, so
that a forced shutdown (a third Ctrl-C) can kill them all at once instead of leaving orphans.
The registry is process-wide because signals are.

Stopping escalates: the owner's polite step first (an agent's stdin closed, a turn
interrupted), then SIGTERM to the group, then SIGKILL, and a last SIGKILL to the group in any
case, since whatever is left in it is an orphan of the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable

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


def signal_group(pgid: int, signum: signal.Signals) -> None:
    """Signal a whole group; a group that is gone (every member exited) is the goal, not an
    error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def wait_exit(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """Whether the process exited within `timeout_s`."""
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        return False
    return True


async def end_group(
    proc: asyncio.subprocess.Process,
    term_grace_s: float,
    *,
    on_escalate: Callable[[signal.Signals], None] | None = None,
) -> None:
    """SIGTERM the child's group, SIGKILL it if the child outlives `term_grace_s`, and SIGKILL
    the group once more after the child is gone (children may ignore SIGTERM or outlive their
    parent). The group is forgotten afterwards. Cancelled midway, it kills rather than
    orphans."""
    try:
        if proc.returncode is None:
            if on_escalate is not None:
                on_escalate(signal.SIGTERM)
            signal_group(proc.pid, signal.SIGTERM)
            if not await wait_exit(proc, term_grace_s):
                if on_escalate is not None:
                    on_escalate(signal.SIGKILL)
                signal_group(proc.pid, signal.SIGKILL)
                await wait_exit(proc, 5.0)
    finally:
        signal_group(proc.pid, signal.SIGKILL)
        untrack(proc.pid)
