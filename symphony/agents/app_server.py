"""Codex app-server client: one agent process per worker run, JSON lines over stdio.

`AppServerSession` launches `bash -lc <codex.command>` in the issue workspace, performs the
`initialize` / `initialized` / `thread/start` handshake, runs turns with `turn/start`, streams
everything the server says as `AgentEvent`s, and stops the process (and its process group) when
the worker ends. The wire format follows codex app-server 0.171: one JSON object per line, no
`"jsonrpc"` member from the server, turn outcomes read from `turn/completed.turn.status`.

Approval and input posture (spec §10.5). Symphony runs unattended, so it never leaves codex
waiting on a person:

- Command and file-change approvals are answered `{"decision": "accept"}` (legacy
  `execCommandApproval` / `applyPatchApproval`: `{"decision": "approved"}`) and reported as
  `approval_auto_approved` events. What codex may do is controlled by the approval policy and
  sandbox symphony sends on `thread/start` and `turn/start` (`codex.approval_policy`,
  `codex.thread_sandbox`, `codex.turn_sandbox_policy`), not by refusing requests here.
- `item/tool/requestUserInput` is answered with no answers, the turn is interrupted, and
  `run_turn` fails with `turn_input_required`.
- Dynamic tool calls run through the launch's tool handler when the tool was advertised; any
  other tool gets a failure result (`unsupported_tool_call: <name>`) and the turn continues.
- Any other server request gets a JSON-RPC error, so codex can move on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import orjson
import structlog

from symphony import process
from symphony.agents import (
    CODEX_NOT_FOUND,
    INVALID_WORKSPACE_CWD,
    PORT_EXIT,
    RESPONSE_ERROR,
    RESPONSE_TIMEOUT,
    RESUMED,
    STARTUP_FAILED,
    TURN_CANCELLED,
    TURN_FAILED,
    TURN_INPUT_REQUIRED,
    TURN_TIMEOUT,
    AgentError,
    AgentEvent,
    AgentLaunch,
    TokenUsage,
    TurnResult,
)
from symphony.tools import ToolResult

MAX_LINE_BYTES = 10 * 1024 * 1024
"""Longest protocol line accepted (spec §10.1); longer lines are skipped, not fatal."""

_READ_CHUNK = 256 * 1024
_SMALL_READ = 4096
_BATCH_PAUSE_S = 0.01

_STDERR_TAIL_LINES = 20
_STDERR_LINES_IN_ERRORS = 5
_STDERR_LINE_CHARS = 500
_SUMMARY_CHARS = 200
_METHOD_NOT_FOUND = -32601
_INTERNAL_ERROR = -32603

_COMMAND_APPROVALS = frozenset(
    {"item/commandExecution/requestApproval", "item/fileChange/requestApproval"}
)
_LEGACY_APPROVALS = frozenset({"execCommandApproval", "applyPatchApproval"})
_USER_INPUT = "item/tool/requestUserInput"
_TOOL_CALL = "item/tool/call"

# Outcomes whose event is emitted where the outcome is decided (turn/completed or the user-input
# request); `run_turn` reports every other failure as `turn_ended_with_error`.
_REPORTED_CATEGORIES = frozenset({TURN_FAILED, TURN_CANCELLED, TURN_INPUT_REQUIRED})

_LOUD_STDERR = re.compile(r"\b(error|warn|warning|panic|panicked|fatal)\b", re.IGNORECASE)
# Codex colours its log lines even into a pipe; colour codes would hide the words above.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Frames of a Rust backtrace (`Stack backtrace:`, `  3: <unknown>`, `at src/x.rs:1`) say
# nothing to an operator; an exit error quotes the lines before them.
_BACKTRACE_LINE = re.compile(r"^(stack backtrace:|\s*\d+: |\s+at )", re.IGNORECASE)

Message = dict[str, Any]

_log = structlog.get_logger(__name__)


DELTA_INTERVAL_S = 0.25
"""Streaming deltas (`item/agentMessage/delta`, `item/commandExecution/outputDelta`, ...) come
by the hundred per second. They matter to the orchestrator only as signs of life, so at most one
event per interval is passed on; every line still resets the silence timer."""


@dataclass(slots=True)
class _TurnWaiter:
    """The caller's view of the turn `run_turn` is waiting on."""

    outcome: asyncio.Future[TurnResult | AgentError]
    turn_id: str | None = None
    last_message: str | None = None
    input_required: AgentError | None = None  # set when codex asked for user input
    reported: bool = False


class AppServerSession:
    """An `AgentSession` speaking the codex app-server protocol to a child process.

    `stop_grace_s` bounds each polite step of `stop()`: waiting for the interrupt reply (at most
    half of it), for the process to exit once stdin is closed, and (half) after SIGTERM.
    """

    resumed = False
    """The session continues the thread `launch.resume_thread_id` named (codex still had it)."""

    def __init__(self, launch: AgentLaunch, *, stop_grace_s: float = 2.0) -> None:
        self._launch = launch
        self._settings = launch.settings
        self._stop_grace_s = stop_grace_s
        self._tool_names = frozenset(tool.name for tool in launch.tools)
        self._proc: asyncio.subprocess.Process | None = None
        self._next_id = 1
        self._pending: dict[int, asyncio.Future[Message | AgentError]] = {}
        self._result_hooks: dict[int, Callable[[Any], None]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._stderr_reader: asyncio.Task[None] | None = None
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._failure: AgentError | None = None
        self._thread_id: str | None = None
        self._model: str | None = None
        self._turn_id: str | None = None
        self._session_id: str | None = None
        self._active_turn_id: str | None = None  # a turn codex has not reported finished
        self._turn: _TurnWaiter | None = None
        self._last_output = 0.0
        self._last_delta_event = float("-inf")
        self.lines_read = 0
        """Protocol lines read from the agent so far (diagnostics and benchmarks)."""
        self._stopping = False
        self._stop_task: asyncio.Task[None] | None = None
        self._logger = _log.bind(workspace=str(launch.workspace))

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def thread_id(self) -> str | None:
        return self._thread_id

    @property
    def session_id(self) -> str | None:
        return self._session_id

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the agent in the workspace and open a thread; raises AgentError."""
        if self._proc is not None or self._stop_task is not None:
            raise AgentError(STARTUP_FAILED, "the session was already started")
        workspace = self._launch.workspace
        if not workspace.is_absolute() or not workspace.is_dir():
            raise AgentError(
                INVALID_WORKSPACE_CWD,
                f"workspace {str(workspace)!r} is not an existing absolute directory",
            )
        try:
            await self._spawn()
            await self._handshake()
        except BaseException as exc:
            if isinstance(exc, AgentError):
                self._emit("startup_failed", message=str(exc))
                self._logger.warning("agent_startup_failed", reason=str(exc))
            await self.stop()
            raise
        self._logger.debug("agent_session_started", thread_id=self._thread_id, resumed=self.resumed)
        self._emit("session_started", message=RESUMED if self.resumed else None, model=self._model)

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        """Start a turn on the thread and stream it to its end; raises AgentError unless it
        completed. `title` only labels logs and events: the protocol has no turn title."""
        if self._failure is not None:
            raise _again(self._failure)
        if self._thread_id is None or self._proc is None or self._stopping:
            raise AgentError(PORT_EXIT, "the session is not running")
        if self._turn is not None:
            raise RuntimeError("a turn is already running on this session")
        waiter = _TurnWaiter(asyncio.get_running_loop().create_future())
        # Registered before turn/start goes out: the server may report the turn's end before
        # this coroutine sees the turn/start reply.
        self._turn = waiter
        self._turn_id = None
        self._session_id = None
        self._logger.debug("agent_turn_starting", title=title)
        try:
            await self._request(
                "turn/start",
                self._turn_params(prompt),
                on_result=lambda result: self._begin_turn(waiter, result, title),
            )
            if waiter.turn_id is None:
                raise AgentError(RESPONSE_ERROR, "turn/start returned no turn id")
            outcome = await self._await_outcome(waiter)
        except AgentError as exc:
            if not (waiter.reported and exc.category in _REPORTED_CATEGORIES):
                self._emit("turn_ended_with_error", message=str(exc))
            self._logger.warning("agent_turn_failed", session_id=self._session_id, reason=str(exc))
            raise
        finally:
            self._turn = None
        self._logger.debug("agent_turn_completed", session_id=outcome.session_id)
        return outcome

    async def stop(self) -> None:
        """Interrupt any running turn, end the process and its group; never raises.

        The cleanup runs in its own task and is awaited to the end even when the caller is
        cancelled meanwhile (the cancellation is re-raised afterwards), so no agent process is
        left running or unreaped behind a cancelled worker.
        """
        if self._stop_task is None:
            self._stopping = True
            self._stop_task = asyncio.create_task(self._shutdown(), name="app-server-stop")
        task = self._stop_task
        cancelled: asyncio.CancelledError | None = None
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as exc:
                cancelled = exc
        if not task.cancelled():
            task.exception()  # _shutdown catches everything; this only marks it retrieved
        if cancelled is not None:
            raise cancelled

    # -- startup ---------------------------------------------------------------------------

    async def _spawn(self) -> None:
        command = self._settings.command
        # The launcher resolves bash on symphony's PATH; the agent gets launch.env and nothing
        # else, so secrets removed from it stay removed.
        bash = shutil.which("bash") or "/bin/bash"
        try:
            proc = await asyncio.create_subprocess_exec(
                bash,
                "-lc",
                command,
                cwd=self._launch.workspace,
                env=dict(self._launch.env),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group, so stop() reaches every child
                limit=MAX_LINE_BYTES,
            )
        except FileNotFoundError as exc:
            if not self._launch.workspace.is_dir():
                raise AgentError(
                    INVALID_WORKSPACE_CWD, f"workspace {self._launch.workspace} vanished"
                ) from None
            raise AgentError(CODEX_NOT_FOUND, f"cannot run bash for {command!r}: {exc}") from None
        except OSError as exc:
            raise AgentError(STARTUP_FAILED, f"cannot launch {command!r}: {exc}") from None
        self._proc = proc
        process.track(proc.pid)
        self._logger = self._logger.bind(pid=proc.pid)
        self._last_output = asyncio.get_running_loop().time()
        self._reader = asyncio.create_task(self._read_stdout(proc), name="app-server-stdout")
        self._stderr_reader = asyncio.create_task(self._read_stderr(proc), name="app-server-stderr")

    async def _handshake(self) -> None:
        await self._request(
            "initialize",
            {
                "clientInfo": {"name": "symphony", "title": "Symphony", "version": _version()},
                # dynamicTools on thread/start is an experimental field.
                "capabilities": {"experimentalApi": True},
            },
        )
        await self._send({"method": "initialized"})
        params: Message = {
            "cwd": str(self._launch.workspace),
            "approvalPolicy": _plain(self._settings.approval_policy),
            "sandbox": self._settings.thread_sandbox,
        }
        resume = self._launch.resume_thread_id
        if resume is not None:
            # A run a restart interrupted: continue its thread when codex still has it.
            try:
                result = await self._request("thread/resume", {**params, "threadId": resume})
            except AgentError as exc:
                if exc.category not in (RESPONSE_ERROR,):
                    raise
                self._logger.info("agent_resume_refused", thread_id=resume, reason=str(exc))
            else:
                resumed = _dig(result, "thread", "id")
                if resumed == resume:
                    self._thread_id, self.resumed = resume, True
                    self._model = _model(result)
                    return
                self._logger.info("agent_resume_refused", thread_id=resume, reason="other thread")
        if self._launch.tools:
            params["dynamicTools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "inputSchema": _plain(tool.input_schema),
                }
                for tool in self._launch.tools
            ]
        result = await self._request("thread/start", params)
        thread_id = _dig(result, "thread", "id")
        if not isinstance(thread_id, str) or not thread_id:
            raise AgentError(RESPONSE_ERROR, "thread/start returned no thread id")
        self._thread_id = thread_id
        self._model = _model(result)

    def _begin_turn(self, waiter: _TurnWaiter, result: Any, title: str) -> None:
        """Runs in the reader as the turn/start reply is read, so that the turn's own
        notifications, read right after it, already carry the session id."""
        turn_id = _dig(result, "turn", "id")
        if not isinstance(turn_id, str) or not turn_id:
            return
        waiter.turn_id = turn_id
        self._turn_id = turn_id
        self._session_id = f"{self._thread_id}-{turn_id}"
        if not waiter.outcome.done():
            self._active_turn_id = turn_id
        self._logger.debug("agent_turn_started", session_id=self._session_id, title=title)
        self._emit("turn_started", message=title)

    def _turn_params(self, prompt: str) -> Message:
        params: Message = {
            "threadId": self._thread_id,
            "input": [{"type": "text", "text": prompt}],
            "cwd": str(self._launch.workspace),
            "approvalPolicy": _plain(self._settings.approval_policy),
        }
        if self._settings.turn_sandbox_policy is not None:
            params["sandboxPolicy"] = _plain(self._settings.turn_sandbox_policy)
        return params

    async def _await_outcome(self, waiter: _TurnWaiter) -> TurnResult:
        loop = asyncio.get_running_loop()
        silence_s = self._settings.turn_timeout_ms / 1000
        while True:
            # Any output line moves _last_output, so this bounds silence, not turn length.
            remaining = self._last_output + silence_s - loop.time()
            if remaining <= 0:
                raise AgentError(
                    TURN_TIMEOUT,
                    f"no output from the agent for {self._settings.turn_timeout_ms} ms",
                )
            done, _ = await asyncio.wait({waiter.outcome}, timeout=remaining)
            if done:
                outcome = waiter.outcome.result()
                if isinstance(outcome, AgentError):
                    raise _again(outcome)
                return outcome

    # -- requests and writes -----------------------------------------------------------------

    async def _request(
        self,
        method: str,
        params: Message,
        *,
        timeout_s: float | None = None,
        on_result: Callable[[Any], None] | None = None,
    ) -> Any:
        """Send a request and return its `result`; raises AgentError on error, timeout or exit.

        `on_result` runs in the reader the moment a successful reply is read, before any later
        line is handled."""
        if timeout_s is None:
            timeout_s = self._settings.read_timeout_ms / 1000
        request_id = self._next_id
        self._next_id += 1
        waiter: asyncio.Future[Message | AgentError] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        if on_result is not None:
            self._result_hooks[request_id] = on_result
        try:
            async with asyncio.timeout(timeout_s):
                await self._send({"id": request_id, "method": method, "params": params})
                reply = await waiter
        except TimeoutError:
            raise AgentError(
                RESPONSE_TIMEOUT, f"no reply to {method} within {round(timeout_s * 1000)} ms"
            ) from None
        finally:
            self._pending.pop(request_id, None)
            self._result_hooks.pop(request_id, None)
        if isinstance(reply, AgentError):
            raise _again(reply)
        error = reply.get("error")
        if error is not None:
            if isinstance(error, Mapping):
                detail = f"{error.get('message', 'no message')} (code {error.get('code')})"
            else:
                detail = str(error)
            raise AgentError(RESPONSE_ERROR, _truncate(f"{method} failed: {detail}", 1000))
        return reply.get("result")

    async def _send(self, message: Message) -> None:
        if self._failure is not None:
            raise _again(self._failure)
        proc = self._proc
        stdin = proc.stdin if proc is not None else None
        if stdin is None or stdin.is_closing():
            raise AgentError(PORT_EXIT, "the agent's stdin is closed")
        try:
            stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            if self._failure is not None:
                raise _again(self._failure) from None
            raise AgentError(PORT_EXIT, f"the agent stopped reading its stdin ({exc})") from None

    # -- stdout --------------------------------------------------------------------------------

    async def _read_stdout(self, proc: asyncio.subprocess.Process) -> None:
        stream = proc.stdout
        assert stream is not None
        pending = bytearray()  # the start of a line whose newline has not arrived yet
        discarding = False  # inside a line longer than MAX_LINE_BYTES
        try:
            while chunk := await stream.read(_READ_CHUNK):
                self._touch()
                if discarding:
                    newline = chunk.find(b"\n")
                    if newline < 0:
                        continue
                    chunk, discarding = chunk[newline + 1 :], False
                newline = chunk.rfind(b"\n")
                if newline < 0:
                    pending += chunk
                    if len(pending) > MAX_LINE_BYTES:
                        pending.clear()
                        discarding = True
                        self._skip_long_line()
                    continue
                complete = pending + chunk[:newline]
                pending = bytearray(chunk[newline + 1 :])
                for line in complete.split(b"\n"):
                    if len(line) > MAX_LINE_BYTES:
                        self._skip_long_line()
                    else:
                        self._handle_line(line)
                if len(chunk) < _SMALL_READ:
                    # An agent that flushes every line would otherwise wake us once per line;
                    # a short pause lets the pipe gather a batch, at a few ms of latency.
                    await asyncio.sleep(_BATCH_PAUSE_S)
            if pending and not discarding:
                self._handle_line(bytes(pending))
        except Exception as exc:
            self._logger.warning("agent_stdout_read_failed", error=repr(exc))
        await self._on_stdout_closed(proc)

    def _skip_long_line(self) -> None:
        self._emit(
            "malformed", message=f"skipped a protocol line longer than {MAX_LINE_BYTES} bytes"
        )

    def _touch(self) -> None:
        self._last_output = asyncio.get_running_loop().time()

    def _handle_line(self, line: bytes | bytearray) -> None:
        self.lines_read += 1
        if not line.strip():
            return
        try:
            # orjson decodes the bytes directly (invalid UTF-8 and trailing data are errors),
            # several times faster than the json module: decoding is most of a line's cost.
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            text = line.decode("utf-8", "replace").strip()
            self._emit("malformed", message=_truncate(f"not JSON: {text}", _SUMMARY_CHARS))
            return
        if not isinstance(message, dict):
            self._emit("other_message", message=_truncate(f"not an object: {message!r}"))
            return
        try:
            self._dispatch(message)
        except Exception:
            # A surprising message shape must not end the session's only reader.
            self._logger.exception("agent_message_handling_failed")

    def _dispatch(self, message: Message) -> None:
        method = message.get("method")
        # Server request ids start at 0, so presence is tested, never truthiness.
        has_id = message.get("id") is not None
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        if isinstance(method, str) and has_id:
            task = asyncio.create_task(self._answer(message["id"], method, params))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        elif has_id and ("result" in message or "error" in message):
            self._resolve(message)
        elif isinstance(method, str):
            self._on_notification(method, params)
        else:
            self._emit("other_message", message=_truncate(json.dumps(message)))

    def _resolve(self, message: Message) -> None:
        request_id = message["id"]
        waiter = self._pending.get(request_id) if isinstance(request_id, int) else None
        if waiter is None or waiter.done():
            self._logger.debug("agent_late_reply", request_id=request_id)
            return
        hook = self._result_hooks.pop(request_id, None)
        try:
            if hook is not None and message.get("error") is None:
                hook(message.get("result"))
        finally:
            waiter.set_result(message)

    async def _on_stdout_closed(self, proc: asyncio.subprocess.Process) -> None:
        if self._stopping:
            failure = AgentError(PORT_EXIT, "the session was stopped")
        else:
            # Give stderr and the exit status a moment, so the error can say why it ended.
            if self._stderr_reader is not None:
                await asyncio.wait({self._stderr_reader}, timeout=1.0)
            returncode = proc.returncode
            if returncode is None:
                with contextlib.suppress(TimeoutError):
                    returncode = await asyncio.wait_for(proc.wait(), 1.0)
            failure = self._exit_failure(returncode)
            self._logger.warning("agent_exited", returncode=returncode, reason=failure.message)
        self._fail(failure)

    def _exit_failure(self, returncode: int | None) -> AgentError:
        meaningful = [line for line in self._stderr_tail if not _BACKTRACE_LINE.match(line)]
        tail = meaningful[-_STDERR_LINES_IN_ERRORS:]
        stderr = _truncate(f"; stderr: {' | '.join(tail)}", 1000) if tail else ""
        if returncode == 127:
            return AgentError(
                CODEX_NOT_FOUND,
                f"bash could not run {self._settings.command!r} (exit 127){stderr}",
            )
        if returncode is None:
            return AgentError(PORT_EXIT, f"the agent closed its stdout{stderr}")
        if returncode < 0:
            return AgentError(PORT_EXIT, f"the agent was killed by signal {-returncode}{stderr}")
        return AgentError(PORT_EXIT, f"the agent exited with code {returncode}{stderr}")

    def _fail(self, failure: AgentError) -> None:
        """Record that the session is over and release everyone waiting on it."""
        if self._failure is None:
            self._failure = failure
        failure = self._failure
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_result(failure)
        if self._turn is not None and not self._turn.outcome.done():
            self._turn.outcome.set_result(failure)

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
            self._logger.debug("agent_stderr_read_failed", error=repr(exc))

    def _stderr_line(self, raw: bytes) -> None:
        text = _ANSI_ESCAPE.sub("", raw.decode("utf-8", "replace")).rstrip()
        if not text:
            return
        text = _truncate(text, _STDERR_LINE_CHARS)
        self._stderr_tail.append(text)
        if _LOUD_STDERR.search(text):
            self._logger.warning("agent_stderr", line=text)
        else:
            self._logger.debug("agent_stderr", line=text)

    # -- server requests -----------------------------------------------------------------------

    async def _answer(self, request_id: Any, method: str, params: Message) -> None:
        """Answer one server request; every request gets a reply so no turn waits forever."""
        try:
            reply = await self._reply_to(method, params)
        except Exception as exc:
            self._logger.exception("agent_request_handling_failed", method=method)
            reply = {
                "error": {
                    "code": _INTERNAL_ERROR,
                    "message": _truncate(f"symphony could not handle {method}: {exc}"),
                }
            }
        try:
            await self._send({"id": request_id, **reply})
            if method == _USER_INPUT:
                await self._interrupt_for_input(params)
        except AgentError as exc:
            self._logger.debug("agent_request_unanswered", method=method, reason=str(exc))
        except Exception:
            self._logger.exception("agent_request_reply_failed", method=method)

    async def _reply_to(self, method: str, params: Message) -> Message:
        if method in _COMMAND_APPROVALS or method in _LEGACY_APPROVALS:
            self._emit("approval_auto_approved", message=_summarize(method, params))
            decision = "approved" if method in _LEGACY_APPROVALS else "accept"
            return {"result": {"decision": decision}}
        if method == _TOOL_CALL:
            return {"result": await self._call_tool(params)}
        if method == _USER_INPUT:
            # Flag first: the interrupted turn/completed may arrive before this task resumes.
            if self._turn is not None:
                self._turn.input_required = self._input_required_error(params)
                self._turn.reported = True
            self._emit("turn_input_required", message=_summarize(method, params))
            return {"result": {"answers": {}}}
        self._emit("other_message", message=_truncate(f"refused server request {method}"))
        return {
            "error": {"code": _METHOD_NOT_FOUND, "message": f"unsupported by symphony: {method}"}
        }

    async def _call_tool(self, params: Message) -> Message:
        name = params.get("tool")
        namespace = params.get("namespace")
        label = f"{namespace}.{name}" if namespace else str(name)
        handler = self._launch.handle_tool
        # Only un-namespaced functions are advertised, so a namespaced call is never ours.
        if (
            handler is None
            or namespace
            or not isinstance(name, str)
            or name not in self._tool_names
        ):
            self._emit("unsupported_tool_call", message=_truncate(label))
            return _tool_reply(False, f"unsupported_tool_call: {label}")
        try:
            result = await handler(name, params.get("arguments"))
            success, text = bool(result.success), json.dumps(result.output, default=str)
        except Exception as exc:
            failure = ToolResult.failure("tool_error", f"{type(exc).__name__}: {exc}")
            success, text = False, json.dumps(failure.output)
        # The agent was waiting on us, not silent: the wait must not count towards turn_timeout.
        self._touch()
        self._emit("tool_call", message=f"{name} success={str(success).lower()}")
        return _tool_reply(success, text)

    async def _interrupt_for_input(self, params: Message) -> None:
        turn_id = params.get("turnId") or self._active_turn_id
        if self._thread_id is not None and isinstance(turn_id, str):
            with contextlib.suppress(AgentError):
                await self._request(
                    "turn/interrupt", {"threadId": self._thread_id, "turnId": turn_id}
                )
        waiter = self._turn
        if waiter is not None and not waiter.outcome.done():
            waiter.outcome.set_result(waiter.input_required or self._input_required_error(params))

    def _input_required_error(self, params: Message) -> AgentError:
        question = ""
        questions = params.get("questions")
        if isinstance(questions, list) and questions and isinstance(questions[0], dict):
            question = f": {questions[0].get('question', '')}"
        return AgentError(
            TURN_INPUT_REQUIRED,
            _truncate(f"the agent asked for user input, which symphony does not give{question}"),
        )

    # -- notifications -------------------------------------------------------------------------

    def _on_notification(self, method: str, params: Message) -> None:
        if method.endswith(("delta", "Delta")):
            if self._last_output - self._last_delta_event < DELTA_INTERVAL_S:
                return
            self._last_delta_event = self._last_output
            self._emit("notification", message=method)
            return
        if method == "thread/tokenUsage/updated":
            usage = _token_usage(params)
            if usage is not None:
                self._emit("token_usage", usage=usage)
                return
        elif method == "account/rateLimits/updated":
            limits = params.get("rateLimits")
            if isinstance(limits, dict):
                self._emit("rate_limits", rate_limits=limits)
                return
        elif method == "turn/completed":
            self._on_turn_completed(params)
            return
        elif method == "turn/started":
            turn_id = _dig(params, "turn", "id")
            if self._turn is not None and self._turn.turn_id is None and isinstance(turn_id, str):
                self._turn.turn_id = turn_id
        elif method == "item/completed":
            item = params.get("item")
            if (
                self._turn is not None
                and isinstance(item, dict)
                and item.get("type") == "agentMessage"
                and isinstance(item.get("text"), str)
            ):
                self._turn.last_message = item["text"]
        self._emit("notification", message=_summarize(method, params))

    def _on_turn_completed(self, params: Message) -> None:
        turn = params.get("turn")
        if not isinstance(turn, dict):
            turn = {}
        turn_id = turn.get("id")
        if turn_id is not None and turn_id == self._active_turn_id:
            self._active_turn_id = None
        waiter = self._turn
        if (
            waiter is None
            or waiter.outcome.done()
            or not isinstance(turn_id, str)
            or (waiter.turn_id is not None and waiter.turn_id != turn_id)
        ):
            # The end of a turn nobody waits for any more (e.g. after a turn timeout).
            self._emit("notification", message=_summarize("turn/completed", params))
            return
        waiter.turn_id = turn_id
        status = turn.get("status")
        outcome: TurnResult | AgentError
        if status == "completed":
            message = waiter.last_message or _final_message(turn)
            outcome = TurnResult(turn_id, f"{self._thread_id}-{turn_id}", message)
            self._emit("turn_completed", message=_truncate(message) if message else None)
        elif status == "failed":
            error = turn.get("error")
            reason = error.get("message") if isinstance(error, dict) else None
            outcome = AgentError(TURN_FAILED, reason or "the turn failed")
            self._emit("turn_failed", message=_truncate(outcome.message))
        elif status == "interrupted" and waiter.input_required is not None:
            outcome = waiter.input_required
        elif status == "interrupted":
            outcome = AgentError(TURN_CANCELLED, "the turn was interrupted")
            self._emit("turn_cancelled", message=outcome.message)
        else:
            outcome = AgentError(RESPONSE_ERROR, f"turn/completed with unknown status {status!r}")
        waiter.reported = waiter.reported or isinstance(outcome, AgentError)
        waiter.outcome.set_result(outcome)

    def _emit(
        self,
        kind: str,
        *,
        message: str | None = None,
        usage: TokenUsage | None = None,
        rate_limits: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> None:
        event = AgentEvent(
            kind=kind,
            pid=self.pid,
            session_id=self._session_id,
            thread_id=self._thread_id,
            turn_id=self._turn_id,
            message=message,
            usage=usage,
            rate_limits=rate_limits,
            model=model,
        )
        try:
            self._launch.on_event(event)
        except Exception:
            # The sink belongs to the orchestrator; its failure must not end the agent's run.
            self._logger.exception("agent_event_sink_failed", kind=kind)

    # -- shutdown ------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        proc = self._proc
        try:
            if proc is not None:
                await self._interrupt_running_turn(proc)
                if proc.stdin is not None and not proc.stdin.is_closing():
                    proc.stdin.close()  # codex exits by itself once stdin closes
                if not await _wait_exit(proc, self._stop_grace_s):
                    self._logger.warning("agent_terminating", signal="SIGTERM")
                    _signal_group(proc, signal.SIGTERM)
                    if not await _wait_exit(proc, self._stop_grace_s / 2):
                        self._logger.warning("agent_terminating", signal="SIGKILL")
                        _signal_group(proc, signal.SIGKILL)
                        await _wait_exit(proc, 5.0)
                # Whatever is left in the group is an orphan of this session's agent.
                _signal_group(proc, signal.SIGKILL)
                process.untrack(proc.pid)
                self._logger.debug("agent_stopped", returncode=proc.returncode)
        except asyncio.CancelledError:
            # Only the event loop shutting down cancels this task: kill rather than orphan.
            if proc is not None:
                _signal_group(proc, signal.SIGKILL)
                process.untrack(proc.pid)
            raise
        except Exception:
            self._logger.exception("agent_stop_failed")
        finally:
            tasks = [t for t in (self._reader, self._stderr_reader, *self._handlers) if t]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._fail(AgentError(PORT_EXIT, "the session was stopped"))

    async def _interrupt_running_turn(self, proc: asyncio.subprocess.Process) -> None:
        turn_id = self._active_turn_id
        if turn_id is None or self._thread_id is None or self._failure is not None:
            return
        if proc.returncode is not None:
            return
        timeout_s = min(self._settings.read_timeout_ms / 1000, self._stop_grace_s / 2)
        with contextlib.suppress(AgentError):
            await self._request(
                "turn/interrupt",
                {"threadId": self._thread_id, "turnId": turn_id},
                timeout_s=timeout_s,
            )


async def _wait_exit(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        return False
    return True


def _signal_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    # start_new_session made the agent a group leader: its pid is the group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _again(error: AgentError) -> AgentError:
    # One stored failure may be raised in several places; a fresh instance keeps each
    # traceback its own.
    return AgentError(error.category, error.message)


def _tool_reply(success: bool, text: str) -> Message:
    # contentItems is required even for failures: without it codex treats the reply as invalid.
    return {"success": success, "contentItems": [{"type": "inputText", "text": text}]}


def _token_usage(params: Message) -> TokenUsage | None:
    """Absolute thread totals from `tokenUsage.total`; `last` is a per-call delta, never used."""
    total = _dig(params, "tokenUsage", "total")
    if not isinstance(total, dict):
        return None
    input_tokens = _count(total, "inputTokens", "input_tokens")
    output_tokens = _count(total, "outputTokens", "output_tokens")
    total_tokens = _count(total, "totalTokens", "total_tokens")
    cached = _count(total, "cachedInputTokens", "cached_input_tokens") or 0
    if total_tokens is None and input_tokens is None and output_tokens is None:
        return None
    if total_tokens is None:
        total_tokens = (input_tokens or 0) + (output_tokens or 0)
    # Cached input is part of the input; a total that says otherwise is kept within it.
    return TokenUsage(
        input_tokens or 0, output_tokens or 0, total_tokens, min(cached, input_tokens or 0)
    )


def _model(result: Any) -> str | None:
    """The model a `thread/start` or `thread/resume` result names."""
    model = _dig(result, "model")
    return model.strip() if isinstance(model, str) and model.strip() else None


def _count(values: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = values.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _final_message(turn: Message) -> str | None:
    items = turn.get("items")
    if not isinstance(items, list):
        return None
    texts = [
        item["text"]
        for item in items
        if isinstance(item, dict)
        and item.get("type") == "agentMessage"
        and isinstance(item.get("text"), str)
    ]
    return texts[-1] if texts else None


def _summarize(method: str, params: Message) -> str:
    """`method` plus the detail a person scanning events wants, kept short."""
    detail: Any = ""
    item = params.get("item")
    if isinstance(item, dict):
        kind = item.get("type")
        if kind == "commandExecution":
            detail = f"commandExecution {item.get('status', '')} {item.get('command', '')}"
        elif kind == "agentMessage":
            detail = f"agentMessage {item.get('text', '')}"
        elif kind in ("dynamicToolCall", "mcpToolCall"):
            detail = f"{kind} {item.get('tool', '')} {item.get('status', '')}"
        elif kind == "fileChange":
            changes = item.get("changes")
            paths = (
                [c.get("path") for c in changes if isinstance(c, dict)]
                if isinstance(changes, list)
                else []
            )
            detail = f"fileChange {item.get('status', '')} {' '.join(map(str, paths))}"
        else:
            detail = kind
    elif method == "error":
        detail = _dig(params, "error", "message")
    elif method in ("turn/started", "turn/completed"):
        detail = _dig(params, "turn", "status")
    elif method == "thread/status/changed":
        detail = _dig(params, "status", "type")
    elif "command" in params:
        detail = params["command"]
    elif "delta" in params:
        detail = params["delta"]
    else:
        for key in ("message", "summary", "reason"):
            if isinstance(params.get(key), str):
                detail = params[key]
                break
    text = f"{method} {detail if detail is not None else ''}"
    return _truncate(" ".join(text.split()))


def _truncate(text: str, limit: int = _SUMMARY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _plain(value: Any) -> Any:
    """Settings hold read-only mappings; JSON needs plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _version() -> str:
    try:
        return metadata.version("symphony")
    except metadata.PackageNotFoundError:
        return "0.0.0"
