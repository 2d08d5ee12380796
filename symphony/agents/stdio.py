"""An agent's process: launched with `bash -lc <command>` in the workspace, spoken to in lines.

`AgentProcess` owns the child and nothing of its protocol: it starts it in its own process
group (tracked by `symphony.hosts.process`), hands every complete stdout line to `on_line` as
it is read (a streaming agent's stdout at a tick shared by every agent, so an agent that
flushes every line does not wake the loop once per line: `symphony.agents.batching`; a line
longer than `MAX_LINE_BYTES` is skipped, not fatal), keeps stderr flowing into
the log with its last lines kept for error messages, says why the process ended, and stops it
with escalation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from symphony.agents import (
    CODEX_NOT_FOUND,
    INVALID_WORKSPACE_CWD,
    PORT_EXIT,
    STARTUP_FAILED,
    AgentError,
    truncate,
)
from symphony.agents.batching import Stdout, batches_of
from symphony.base.hosts import HOST_UNREACHABLE
from symphony.hosts import AgentLaunchSpec, CarrierKind, Host, process
from symphony.hosts.local import LOCAL_HOST

MAX_LINE_BYTES = 10 * 1024 * 1024
"""Longest protocol line accepted (spec §10.1); longer lines are skipped, not fatal."""

_STDERR_LIMIT = 64 * 1024
"""The buffer of the stderr stream (read in chunks, never by line)."""
EXIT_GRACE_S = 5.0
"""How long an agent whose stdout closed is given to exit and finish its stderr."""

_STDERR_TAIL_LINES = 20
_STDERR_LINES_IN_ERRORS = 5
_STDERR_LINE_CHARS = 500

_LOUD_STDERR = re.compile(r"\b(error|warn|warning|panic|panicked|fatal)\b", re.IGNORECASE)
# Agents colour their log lines even into a pipe; colour codes would hide the words above.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Frames of a Rust backtrace (`Stack backtrace:`, `  3: <unknown>`, `at src/x.rs:1`) say
# nothing to an operator; an exit error quotes the lines before them.
_BACKTRACE_LINE = re.compile(r"^(stack backtrace:|\s*\d+: |\s+at )", re.IGNORECASE)

_CARRIER_CATEGORIES: dict[CarrierKind, str] = {
    "forward_refused": STARTUP_FAILED,
    "unreachable": HOST_UNREACHABLE,
    "no_workspace": INVALID_WORKSPACE_CWD,
}
"""How an agent's error names a failure of the way to its host (`Host.carrier_failure`)."""


class AgentProcess:
    """One agent child process and its two output streams."""

    def __init__(
        self,
        command: str,
        *,
        workspace: Path,
        env: Mapping[str, str],
        on_line: Callable[[bytes | bytearray], None],
        on_long_line: Callable[[], None],
        logger: Any,
        host: Host = LOCAL_HOST,
        on_lines: Callable[[list[bytes]], None] | None = None,
    ) -> None:
        """`on_lines`, when given, takes the complete lines of each read at once instead of
        `on_line` one by one (a protocol that skips most of them does it in one loop)."""
        self.command = command
        self.host = host
        self.remote_pgid: int | None = None
        """The agent's process group on its SSH host, as the host's wrapper reported it."""
        self._workspace = workspace
        self._mark = process.new_mark()
        self._env = {**env, process.CHILD_VARIABLE: self._mark}
        self._on_line = on_line
        self._on_lines = on_lines
        self._on_long_line = on_long_line
        self.logger = logger
        self._proc: asyncio.subprocess.Process | None = None
        self._pid: int | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stderr_reader: asyncio.Task[None] | None = None
        self._stdout: Stdout | None = None
        self._stdout_ended: asyncio.Future[None] | None = None
        self._pending = bytearray()  # the start of a line whose newline has not arrived yet
        self._discarding = False  # inside a line longer than MAX_LINE_BYTES
        self._read_failed = False
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self.last_output = 0.0
        """Loop time of the latest stdout bytes: what silence timers measure from."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self.lines_read = 0

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def spawn(self, on_closed: Callable[[int | None], Awaitable[None]]) -> None:
        """Start the child; `on_closed(returncode)` runs once its stdout has ended."""
        spec = self.host.agent_launch(self.command, self._workspace, self._env)
        loop = asyncio.get_running_loop()
        # stdout is a pipe of the daemon's own, read in batches (`symphony.agents.batching`).
        read_end, write_end = os.pipe()
        try:
            transport, protocol = await self._launch(loop, spec, write_end)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the child holds its copy: when it closes it, stdout ends
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        self._proc, self._pid = proc, proc.pid
        self._loop = loop
        self._stdout_ended = loop.create_future()
        self._stdout = batches_of(loop).add(read_end, self._stdout_data, self._stdout_end)
        process.track(proc.pid)
        self.logger = self.logger.bind(pid=proc.pid)
        self.touch()
        self._reader = asyncio.create_task(self._watch_stdout(proc, on_closed), name="agent-stdout")
        self._stderr_reader = asyncio.create_task(self._read_stderr(proc), name="agent-stderr")
        if spec.preamble:
            await self.write(spec.preamble)

    async def _launch(
        self, loop: asyncio.AbstractEventLoop, spec: AgentLaunchSpec, stdout: int
    ) -> tuple[asyncio.SubprocessTransport, asyncio.subprocess.SubprocessStreamProtocol]:
        """The child, with `stdout` as its stdout and pipes for stdin and stderr."""
        try:
            return await loop.subprocess_exec(
                lambda: asyncio.subprocess.SubprocessStreamProtocol(_STDERR_LIMIT, loop),
                *spec.argv,
                cwd=spec.cwd,
                env=dict(spec.env),
                stdin=asyncio.subprocess.PIPE,
                stdout=stdout,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group, so a stop reaches every child
            )
        except FileNotFoundError as exc:
            if not self._workspace.is_dir():
                raise AgentError(
                    INVALID_WORKSPACE_CWD, f"workspace {self._workspace} vanished"
                ) from None
            raise AgentError(
                CODEX_NOT_FOUND, f"cannot run {spec.argv[0]} for {self.command!r}: {exc}"
            ) from None
        except OSError as exc:
            raise AgentError(STARTUP_FAILED, f"cannot launch {self.command!r}: {exc}") from None

    def touch(self) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        # The loop is kept: looking it up again on every read checks the process id each time.
        self.last_output = loop.time()

    async def write(self, data: bytes) -> None:
        """Write to the agent's stdin; raises AgentError(PORT_EXIT) when it cannot be."""
        proc = self._proc
        stdin = proc.stdin if proc is not None else None
        if stdin is None or stdin.is_closing():
            raise AgentError(PORT_EXIT, "the agent's stdin is closed")
        if self._stdout is not None and self._loop is not None:
            batches_of(self._loop).read_now(self._stdout)  # its answer is read when it comes
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise AgentError(PORT_EXIT, f"the agent stopped reading its stdin ({exc})") from None

    # -- stdout --------------------------------------------------------------------------------

    def _stdout_data(self, chunk: bytes) -> None:
        """What a read of the agent's stdout brought: every complete line to `on_line` at once,
        in this callback (no task switch per read). A streaming agent's lines arrive by the
        dozen per read (`symphony.agents.batching`)."""
        self.touch()
        try:
            if self._discarding:
                newline = chunk.find(b"\n")
                if newline < 0:
                    return
                chunk, self._discarding = chunk[newline + 1 :], False
            newline = chunk.rfind(b"\n")
            pending = self._pending
            if newline < 0:
                pending += chunk
                if len(pending) > MAX_LINE_BYTES:
                    pending.clear()
                    self._discarding = True
                    self._on_long_line()
            else:
                complete = bytes(pending) + chunk[:newline] if pending else chunk[:newline]
                self._pending = bytearray(chunk[newline + 1 :])
                lines = complete.split(b"\n")
                self.lines_read += len(lines)
                if len(complete) > MAX_LINE_BYTES:
                    long = [line for line in lines if len(line) > MAX_LINE_BYTES]
                    for _ in long:
                        self._on_long_line()
                    lines = [line for line in lines if len(line) <= MAX_LINE_BYTES]
                if self._on_lines is not None:
                    self._on_lines(lines)
                else:
                    for line in lines:
                        self._on_line(line)
        except Exception as exc:
            self.logger.warning("agent_stdout_read_failed", error=repr(exc))
            self._read_failed = True
            self._close_stdout()  # nothing more is taken from it: the session ends
            self._stdout_end()

    def _stdout_end(self) -> None:
        ended = self._stdout_ended
        if ended is not None and not ended.done():
            ended.set_result(None)

    def _close_stdout(self) -> None:
        if self._stdout is not None and self._loop is not None:
            batches_of(self._loop).close(self._stdout)

    async def _watch_stdout(
        self,
        proc: asyncio.subprocess.Process,
        on_closed: Callable[[int | None], Awaitable[None]],
    ) -> None:
        assert self._stdout_ended is not None
        await self._stdout_ended
        if self._pending and not self._discarding and not self._read_failed:
            self.lines_read += 1
            self._on_line(bytes(self._pending))
            self._pending.clear()
        returncode = proc.returncode
        if returncode is None:
            # Give stderr and the exit status a moment, so an error can say why it ended (a
            # shell that closed its stdout is exiting; on a loaded machine that can take over a
            # second, and without its status a missing command reads as a mere exit).
            if self._stderr_reader is not None:
                await asyncio.wait({self._stderr_reader}, timeout=EXIT_GRACE_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXIT_GRACE_S):
                    returncode = await proc.wait()
        await on_closed(returncode)

    def exit_failure(self, returncode: int | None) -> AgentError:
        """Why the agent ended, with the last meaningful lines of its stderr."""
        meaningful = [line for line in self._stderr_tail if not _BACKTRACE_LINE.match(line)]
        tail = meaningful[-_STDERR_LINES_IN_ERRORS:]
        stderr = truncate(f"; stderr: {' | '.join(tail)}", 1000) if tail else ""
        carrier = self.host.carrier_failure(returncode, tail)
        if carrier is not None:
            return AgentError(_CARRIER_CATEGORIES[carrier.kind], f"{carrier.message}{stderr}")
        if returncode == 127:
            return AgentError(
                CODEX_NOT_FOUND, f"bash could not run {self.command!r} (exit 127){stderr}"
            )
        if returncode is None:
            return AgentError(PORT_EXIT, f"the agent closed its stdout{stderr}")
        if returncode < 0:
            return AgentError(PORT_EXIT, f"the agent was killed by signal {-returncode}{stderr}")
        return AgentError(PORT_EXIT, f"the agent exited with code {returncode}{stderr}")

    # -- stderr --------------------------------------------------------------------------------

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        """Keep stderr flowing (a full pipe would block the agent) and log it; it carries
        diagnostics only and is never read as protocol."""
        stream = proc.stderr
        assert stream is not None
        partial = b""
        try:
            while chunk := await stream.read(65536):
                partial += chunk
                *lines, partial = partial.split(b"\n")
                for line in lines:
                    self._stderr_line(line)
                if len(partial) > _STDERR_LINE_CHARS * 4:
                    self._stderr_line(partial)
                    partial = b""
            if partial:
                self._stderr_line(partial)
        except Exception as exc:
            self.logger.debug("agent_stderr_read_failed", error=repr(exc))

    def _stderr_line(self, raw: bytes) -> None:
        text = _ANSI_ESCAPE.sub("", raw.decode("utf-8", "replace")).rstrip()
        if not text:
            return
        if self.remote_pgid is None:
            pgid = self.host.reported_group(text)
            if pgid is not None:
                self.remote_pgid = pgid
                self.logger = self.logger.bind(host=self.host.name, remote_pgid=pgid)
                return
        text = truncate(text, _STDERR_LINE_CHARS)
        self._stderr_tail.append(text)
        if _LOUD_STDERR.search(text):
            self.logger.warning("agent_stderr", line=text)
        else:
            self.logger.debug("agent_stderr", line=text)

    # -- stop ----------------------------------------------------------------------------------

    async def stop(self, grace_s: float, polite: Callable[[], Awaitable[None]] | None) -> None:
        """End the process and its group: `polite()` first (e.g. interrupt the turn), then
        stdin closed and up to `grace_s` to exit, then SIGTERM and SIGKILL to the group.
        Never raises, except the cancellation of the event loop shutting down (which kills)."""
        proc = self._proc
        try:
            if proc is not None:
                if polite is not None and proc.returncode is None:
                    await polite()
                if proc.stdin is not None and not proc.stdin.is_closing():
                    proc.stdin.close()  # a well-behaved agent exits once its stdin closes
                exited = await process.wait_exit(proc, grace_s)
                await process.end_group(
                    proc,
                    0.0 if exited else grace_s / 2,
                    mark=self._mark,
                    on_escalate=lambda sig: self.logger.warning(
                        "agent_terminating", signal=sig.name
                    ),
                )
                if self.remote_pgid is not None:
                    # The ssh client is gone; what it carried may not be.
                    await self.host.end_group(self.remote_pgid, grace_s / 2, self._mark)
                self.logger.debug("agent_stopped", returncode=proc.returncode)
        except asyncio.CancelledError:
            # Only the event loop shutting down cancels a stop: kill rather than orphan.
            if proc is not None:
                process.signal_group(proc.pid, signal.SIGKILL)
                process.kill_marked(self._mark)
                process.untrack(proc.pid)
            raise
        except Exception:
            self.logger.exception("agent_stop_failed")
        finally:
            self._close_stdout()
            tasks = [t for t in (self._reader, self._stderr_reader) if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
