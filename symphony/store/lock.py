"""One daemon per workflow: an exclusive `flock` on a file beside the store.

The lock is the kernel's, tied to the open file: it goes away when the holding process ends,
however it ends (`kill -9` included), so a stale lock can never block a restart. The file holds
the holder's pid, only to name it in the message a second daemon prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from symphony.base.errors import ErrorCategory, SymphonyError
from symphony.hosts.process import pid_alive

DAEMON_RUNNING = ErrorCategory.DAEMON_ALREADY_RUNNING


class LockError(SymphonyError):
    """Another daemon holds the workflow's lock."""


class DaemonLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, what: str) -> None:
        """Take the lock or raise LockError naming the daemon that has it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process"
            raise LockError(
                DAEMON_RUNNING,
                f"another symphony daemon ({who}) is already running {what}; stop it first, "
                f"or give this one its own state file (the lock is {self.path})",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        mine = f"{os.getpid()}\n".encode()
        os.pwrite(fd, mine, 0)
        os.ftruncate(fd, len(mine))
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _holder_pid(fd: int, patience_s: float = 1.0) -> int | None:
    """The pid of the lock's holder, once it has written it.

    A daemon writes its pid just after it takes the lock, so one that lost a race by
    microseconds may find the file empty or still naming a previous, dead holder: wait a
    moment for a live pid rather than name the wrong process.
    """
    deadline = time.monotonic() + patience_s
    while True:
        pid = _read_pid(fd)
        if pid is not None and pid_alive(pid):
            return pid
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode()
    except (OSError, UnicodeDecodeError):
        return None
    first = text.split("\n", 1)[0].strip()  # a longer old pid may trail until the truncate
    return int(first) if first.isdigit() else None
