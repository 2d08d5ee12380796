"""Child processes the daemon supervises: agents, hooks and verification gates.

Every child runs in its own process group (`start_new_session=True`) so that stopping it reaches
everything it started. Each group is tracked here from spawn until its owner has stopped it, so
that a forced shutdown (a third Ctrl-C) can kill them all at once instead of leaving orphans.
The registry is process-wide because signals are.

Stopping escalates: the owner's polite step first (an agent's stdin closed, a turn
interrupted), then SIGTERM to the group, then SIGKILL, and a last SIGKILL to the group in any
case, since whatever is left in it is an orphan of the child.

A descendant can leave its group (`setsid`, a daemonizing tool) and would then outlive every
signal to the group. Each child is therefore spawned with a mark of its own in its environment
(`SYMPHONY_CHILD=<id>`, inherited by everything it starts), and ending a child also kills every
process that still carries its mark (found in `/proc`; elsewhere only the group is reached).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import Callable, Collection
from pathlib import Path

CHILD_VARIABLE = "SYMPHONY_CHILD"
"""Set in each child's environment to a value of its own: how its escaped descendants are
found."""

_live: set[int] = set()


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user's counts: it is not gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


INSTANCE_VARIABLE = "SYMPHONY_INSTANCE"
"""Set in every agent's and hook's environment: which daemon started it."""


def new_mark() -> str:
    """A value for `CHILD_VARIABLE` that no other child has."""
    return uuid.uuid4().hex


def marked(variable: str, values: Collection[str], proc: Path = Path("/proc")) -> list[int]:
    """Pids of the live processes (not this one) whose environment sets `variable` to one of
    `values`; none where there is no `/proc` (nothing can be proven, nothing is signalled)."""
    if not values:
        return []
    wanted = {f"{variable}={value}".encode() for value in values}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return []
    me = os.getpid()
    found = []
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or another user's
        if wanted.intersection(environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def kill_marked(mark: str) -> int:
    """SIGKILL every process carrying a child's mark, wherever its group is; how many."""
    killed = 0
    for pid in marked(CHILD_VARIABLE, [mark]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def signal_group(pgid: int, signum: signal.Signals) -> None:
    """Signal a whole group; a group that is gone (every member exited) is the goal, not an
    error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def wait_exit(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """Whether the process exited within `timeout_s`."""
    try:
        async with asyncio.timeout(timeout_s):  # unlike wait_for on 3.11, never swallows a cancel
            await proc.wait()
    except TimeoutError:
        return False
    return True


async def end_group(
    proc: asyncio.subprocess.Process,
    term_grace_s: float,
    *,
    mark: str | None = None,
    on_escalate: Callable[[signal.Signals], None] | None = None,
) -> None:
    """SIGTERM the child's group, SIGKILL it if the child outlives `term_grace_s`, and SIGKILL
    the group once more after the child is gone (children may ignore SIGTERM or outlive their
    parent), and every process with the child's `mark`. The group is forgotten afterwards.
    Cancelled midway, it kills rather than orphans."""
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
        if mark is not None:
            kill_marked(mark)
        untrack(proc.pid)
