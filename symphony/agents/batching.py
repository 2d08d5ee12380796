"""Agents' stdout read in batches, on a tick shared by every agent of an event loop.

A streaming agent flushes every few milliseconds, and each read would wake the whole event loop.
So an agent's stdout, once it has output, is not watched by the loop but read directly at the
next tick (`PAUSE_S` at most away), together with every other streaming agent's: one wake-up
reads them all, each with the dozens of lines it gathered since. A stdout found empty at two
ticks in a row belongs to an agent gone quiet: the loop watches it again, and its next line is
read the moment it comes. So is the stdout of an agent the daemon has just written to (its
answer is not kept waiting), and of one writing faster than a tick's read takes in (a read
that filled the pipe reads on at once). No line waits longer than `PAUSE_S`.

The pipes are the daemon's own (`os.pipe`, the write end given to the child), read with
`os.read` on a non-blocking descriptor: a streaming stdout costs one read a tick, with no
registration with the loop to undo and redo around it (a pipe transport paused between ticks
costs two, and on some loops is still woken by the next write).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

PAUSE_S = 0.1
"""The tick: the longest a line waits in its pipe (a turn's end, a request for approval)."""
QUIET_TICKS = 2
"""Ticks in a row that find a stdout empty before the loop watches it again."""
READ_BYTES = 256 * 1024
FULL_READ = 64 * 1024
"""A read this long may have filled the pipe (64 KiB on Linux) and held its writer: the pipe
is read on at once rather than at the next tick."""


class Stdout:
    """One agent's stdout: the read end of its pipe, and what its bytes and end are given to."""

    __slots__ = ("empty_ticks", "ended", "fd", "on_data", "on_end", "watched")

    def __init__(self, fd: int, on_data: Callable[[bytes], None], on_end: Callable[[], None]):
        self.fd = fd
        self.on_data = on_data
        """Takes what a read brought (never empty)."""
        self.on_end = on_end
        """Called once, when the pipe is at its end (every writer closed it) or failed."""
        self.watched = False
        """The event loop watches it (quiet, or an answer awaited); else it streams, read at
        ticks."""
        self.empty_ticks = 0
        self.ended = False


class ReadBatches:
    """The tick of one event loop and the stdouts it reads (see the module's docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pause_s: float = PAUSE_S) -> None:
        self._loop = loop
        self._pause_s = pause_s
        self._streaming: dict[Stdout, None] = {}
        self._ticking = False

    def add(self, fd: int, on_data: Callable[[bytes], None], on_end: Callable[[], None]) -> Stdout:
        """Read the pipe `fd` (this takes it over: `close` closes it). It is watched at first:
        an agent's first output answers the daemon's first request."""
        os.set_blocking(fd, False)
        stdout = Stdout(fd, on_data, on_end)
        self._watch(stdout)
        return stdout

    def read_now(self, stdout: Stdout) -> None:
        """The daemon waits for an answer on `stdout`: read it as soon as anything comes."""
        if not stdout.ended and not stdout.watched:
            self._streaming.pop(stdout, None)
            self._watch(stdout)

    def close(self, stdout: Stdout) -> None:
        """Stop reading `stdout` and close its descriptor (`on_end` is not called)."""
        if stdout.ended:
            return
        stdout.ended = True
        self._unwatch(stdout)
        self._streaming.pop(stdout, None)
        with contextlib.suppress(OSError):
            os.close(stdout.fd)

    def _watch(self, stdout: Stdout) -> None:
        stdout.watched, stdout.empty_ticks = True, 0
        self._loop.add_reader(stdout.fd, self._readable, stdout)

    def _unwatch(self, stdout: Stdout) -> None:
        if stdout.watched:
            stdout.watched = False
            if not self._loop.is_closed():
                self._loop.remove_reader(stdout.fd)

    def _readable(self, stdout: Stdout) -> None:
        """The loop saw output on a watched stdout: read it; unless that filled the pipe, the
        stdout streams from now on, read at ticks."""
        size = self._read(stdout)
        if stdout.ended or size >= FULL_READ:
            return
        self._unwatch(stdout)
        self._stream(stdout)

    def _stream(self, stdout: Stdout) -> None:
        self._streaming[stdout] = None
        if not self._ticking:
            self._ticking = True
            self._loop.call_later(self._pause_s, self.tick)

    def tick(self) -> None:
        """Read every streaming stdout (the loop calls it `pause_s` after a stdout streams)."""
        self._ticking = False
        streaming, self._streaming = self._streaming, {}
        for stdout in streaming:
            if stdout.ended:
                continue
            size = self._read(stdout)
            if stdout.ended:
                continue
            if size >= FULL_READ:
                self._watch(stdout)  # its writer may be held: read on at once
            elif size == 0 and stdout.empty_ticks + 1 >= QUIET_TICKS:
                self._watch(stdout)  # gone quiet: its next line is read when it comes
            else:
                stdout.empty_ticks = 0 if size else stdout.empty_ticks + 1
                self._stream(stdout)

    def _read(self, stdout: Stdout) -> int:
        """Take what the pipe holds to `on_data`; how many bytes that was. At the pipe's end
        (or a failed read) the stdout is closed and `on_end` called."""
        try:
            data = os.read(stdout.fd, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            data = b""  # a broken pipe ends like a closed one; the process's exit says why
        if data:
            try:
                stdout.on_data(data)
            except Exception:  # a reader's bug ends its stdout, never the other agents' tick
                data = b""
            else:
                return len(data)
        on_end = stdout.on_end
        self.close(stdout)
        on_end()
        return 0


_batches: dict[asyncio.AbstractEventLoop, ReadBatches] = {}


def batches_of(loop: asyncio.AbstractEventLoop) -> ReadBatches:
    """The read batches of `loop` (made on first use; those of closed loops are dropped)."""
    batches = _batches.get(loop)
    if batches is None:
        for gone in [other for other in _batches if other.is_closed()]:
            del _batches[gone]
        batches = _batches[loop] = ReadBatches(loop)
    return batches
