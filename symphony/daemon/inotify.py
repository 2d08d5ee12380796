"""Linux's inotify read in the daemon's own event loop: the names changed in a few folders, with
no thread and no wake-up while nothing changes.

watchfiles, the portable watch the daemon falls back to, runs its watch in a worker thread that
wakes every few milliseconds to see whether it should stop; with a one-second poll that was a
third of an idle daemon's work. Here the inotify descriptor is one more reader of the loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import struct
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

# From <sys/inotify.h>.
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
CHANGES = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    | IN_DELETE_SELF | IN_MOVE_SELF
)  # fmt: skip
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of name
OVERFLOWED = ""
"""The name reported when the kernel dropped events: something changed, it cannot say what."""


class WatchGone(OSError):
    """A watched folder was removed or moved away: its watch ends."""


def available() -> bool:
    return hasattr(_libc(), "inotify_init1")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


async def changes(
    folders: Sequence[Path], *, quiet_s: float, most_s: float
) -> AsyncIterator[set[str]]:
    """The names changed in `folders` (not recursive), a batch at a time: a batch is yielded
    once `quiet_s` passed without another event, or `most_s` after its first. Raises OSError
    when the watch cannot be set up, and WatchGone once a folder is gone."""
    libc = _libc()
    fd = _check(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC), "inotify_init1")
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    try:
        for folder in folders:
            _check(
                libc.inotify_add_watch(fd, os.fsencode(folder), CHANGES | IN_ONLYDIR),
                f"cannot watch {folder}",
            )
        loop.add_reader(fd, ready.set)
        try:
            while True:
                await ready.wait()
                names: set[str] = set()
                first = loop.time()
                while True:
                    ready.clear()
                    if _drain(fd, names):
                        raise WatchGone(f"a watched folder of {', '.join(map(str, folders))} "
                                        "is gone")  # fmt: skip
                    wait = min(quiet_s, first + most_s - loop.time())
                    if wait <= 0:
                        break
                    try:
                        # Not wait_for: on 3.11 it loses a cancel that comes as the event does.
                        async with asyncio.timeout(wait):
                            await ready.wait()
                    except TimeoutError:
                        break
                if names:
                    yield names
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


def _drain(fd: int, names: set[str]) -> bool:
    """Read every pending event into `names`; True when a watched folder is gone."""
    gone = False
    while True:
        try:
            data = os.read(fd, 64 * 1024)
        except BlockingIOError:
            return gone
        offset = 0
        while offset + _EVENT.size <= len(data):
            _, mask, _, length = _EVENT.unpack_from(data, offset)
            start = offset + _EVENT.size
            offset = start + length
            if mask & IN_Q_OVERFLOW:
                names.add(OVERFLOWED)
            elif mask & GONE:
                gone = True
            else:
                names.add(os.fsdecode(data[start:offset].rstrip(b"\0")))
