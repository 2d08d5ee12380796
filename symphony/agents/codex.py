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

A turn the provider refused (codex's `codexErrorInfo`: a usage or rate limit, no capacity, a
failing or unreachable model server) fails with a `ProviderLimit` on its error (`_limit_of`);
its reset comes from the newest `account/rateLimits/updated` snapshot the session saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import structlog

from symphony.agents import (
    PORT_EXIT,
    RESPONSE_ERROR,
    TURN_CANCELLED,
    TURN_FAILED,
    TURN_INPUT_REQUIRED,
    AgentError,
    AgentLaunch,
    TurnResult,
    client_version,
    plain,
    truncate,
)
from symphony.agents.jsonrpc import METHOD_NOT_FOUND, JsonRpcPeer, Message, error_reply
from symphony.agents.limits import from_epoch, kind_of_status
from symphony.agents.session import (
    SessionBase,
    again,
    deliver,
    dig,
    within_silence,
)
from symphony.agents.stdio import MAX_LINE_BYTES, AgentProcess
from symphony.base.events import RESUMED, AgentEvent, EventKind, TokenUsage
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.base.tools import ToolResult
from symphony.config.agents import SessionSettings
from symphony.config.fields import INVALID_CONFIG, ConfigError, integer

__all__ = ["MAX_LINE_BYTES", "AppServerSession"]

_SUMMARY_CHARS = 200

_COMMAND_APPROVALS = frozenset(
    {"item/commandExecution/requestApproval", "item/fileChange/requestApproval"}
)
_LEGACY_APPROVALS = frozenset({"execCommandApproval", "applyPatchApproval"})
_USER_INPUT = "item/tool/requestUserInput"
_TOOL_CALL = "item/tool/call"

# Outcomes whose event is emitted where the outcome is decided (turn/completed or the user-input
# request); `run_turn` reports every other failure as `turn_ended_with_error`.
_REPORTED_CATEGORIES = frozenset({TURN_FAILED, TURN_CANCELLED, TURN_INPUT_REQUIRED})

_log = structlog.get_logger(__name__)


KEYS = (
    "command",
    "approval_policy",
    "thread_sandbox",
    "turn_sandbox_policy",
    "turn_timeout_ms",
    "read_timeout_ms",
    "stall_timeout_ms",
)
"""The keys of the `codex:` section (spec §5.3.6)."""


@dataclass(frozen=True, slots=True)
class CodexSettings:
    command: str = "codex app-server"
    approval_policy: Any = "never"
    thread_sandbox: str = "workspace-write"
    turn_sandbox_policy: Mapping[str, Any] | None = None
    turn_timeout_ms: int = 3_600_000
    read_timeout_ms: int = 5_000
    stall_timeout_ms: int = 300_000


_CODEX = CodexSettings()

OUTER_BOUNDARY = "danger-full-access"
"""Codex's own sandbox inside symphony's: off, since the outer one is the boundary (codex's
bubblewrap cannot make its namespaces inside another sandbox and refuses every write)."""


def inside_sandbox(settings: SessionSettings) -> SessionSettings:
    """The settings of a codex run inside a symphony sandbox (`Backend.inside_sandbox`)."""
    assert isinstance(settings, CodexSettings)
    policy = settings.turn_sandbox_policy
    return dataclasses.replace(
        settings,
        thread_sandbox=OUTER_BOUNDARY,
        turn_sandbox_policy=None
        if policy is None
        else MappingProxyType({"type": "dangerFullAccess"}),
    )


GATEWAY_PROVIDER = "symphony"
"""The model provider codex is given when its calls go through the daemon's model gateway."""


def through_gateway(settings: SessionSettings, env: Mapping[str, str]) -> SessionSettings:
    """The settings of a codex run whose model calls go through the daemon's model gateway
    (`Backend.through_gateway`): codex 0.171 reads no base URL from its environment, so its
    command names a model provider of its own, at the gateway `OPENAI_BASE_URL` now names,
    with the run's token in `OPENAI_API_KEY` as its key."""
    assert isinstance(settings, CodexSettings)
    key = "OPENAI_API_KEY" if "OPENAI_API_KEY" in env else "CODEX_API_KEY"
    provider = f"model_providers.{GATEWAY_PROVIDER}"
    overrides = {
        "model_provider": GATEWAY_PROVIDER,
        f"{provider}.name": "symphony model gateway",
        f"{provider}.base_url": env.get("OPENAI_BASE_URL", ""),
        f"{provider}.env_key": key,
        f"{provider}.wire_api": "responses",
    }
    words = [f"{name}={json.dumps(value)}" for name, value in overrides.items()]
    extra = " ".join(f"-c {shlex.quote(word)}" for word in words)
    return dataclasses.replace(settings, command=f"{settings.command} {extra}")


def traces_to(settings: SessionSettings, endpoint: str) -> tuple[SessionSettings, dict[str, str]]:
    """The settings of a codex run that exports its own spans to the OTLP/HTTP traces URL
    `endpoint` (`Backend.traces_to`): codex 0.171 reads its exporter from its config only
    (`[otel] trace_exporter`), so its command sets it, key by key, leaving whatever else the
    user's config.toml says of it (headers, TLS) in place; it continues the trace its
    `TRACEPARENT` names."""
    assert isinstance(settings, CodexSettings)
    exporter = "otel.trace_exporter.otlp-http"
    words = [f"{exporter}.endpoint={json.dumps(endpoint)}", f'{exporter}.protocol="binary"']
    extra = " ".join(f"-c {shlex.quote(word)}" for word in words)
    return dataclasses.replace(settings, command=f"{settings.command} {extra}"), {}


def parse_settings(raw: Mapping[str, Any]) -> CodexSettings:
    """The `codex:` section (spec §6.1)."""
    command = raw.get("command", _CODEX.command)
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(INVALID_CONFIG, "codex.command must be a non-empty shell command")
    sandbox = raw.get("thread_sandbox", _CODEX.thread_sandbox)
    if not isinstance(sandbox, str):
        raise ConfigError(INVALID_CONFIG, "codex.thread_sandbox must be a string")
    turn_policy = raw.get("turn_sandbox_policy")
    if turn_policy is not None and not isinstance(turn_policy, dict):
        raise ConfigError(INVALID_CONFIG, "codex.turn_sandbox_policy must be a map")
    return CodexSettings(
        command=command,
        approval_policy=raw.get("approval_policy", _CODEX.approval_policy),
        thread_sandbox=sandbox,
        turn_sandbox_policy=MappingProxyType(turn_policy) if turn_policy is not None else None,
        turn_timeout_ms=integer(raw, "codex.turn_timeout_ms", _CODEX.turn_timeout_ms, 1),
        read_timeout_ms=integer(raw, "codex.read_timeout_ms", _CODEX.read_timeout_ms, 1),
        stall_timeout_ms=integer(raw, "codex.stall_timeout_ms", _CODEX.stall_timeout_ms, None),
    )


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
    error_info: Any = None  # `codexErrorInfo` of the turn's final `error` notification


class AppServerSession(SessionBase):
    """An `AgentSession` speaking the codex app-server protocol to a child process.

    `stop_grace_s` bounds each polite step of `stop()`: waiting for the interrupt reply (at most
    half of it), for the process to exit once stdin is closed, and (half) after SIGTERM.
    """

    def __init__(self, launch: AgentLaunch, *, stop_grace_s: float = 2.0) -> None:
        if not isinstance(launch.settings, CodexSettings):
            raise TypeError(f"a codex session needs the codex block, not {launch.settings!r}")
        super().__init__(launch, _log, stop_grace_s=stop_grace_s, stop_name="app-server-stop")
        self._settings: CodexSettings = launch.settings
        self._tool_names = frozenset(tool.name for tool in launch.tools)
        self._process = AgentProcess(
            launch.settings.command,
            workspace=launch.workspace,
            env=launch.env,
            on_line=self._on_line,
            on_lines=self._on_lines,
            on_long_line=self._skip_long_line,
            logger=self._logger,
            host=launch.host,
        )
        self._rpc = JsonRpcPeer(
            self._process.write,
            on_request=self._reply_to,
            on_notification=self._on_notification,
            on_other=lambda kind, message: self._emit(kind, message=message),
            after_answer=self._after_answer,
            logger=self._logger,
        )
        self._spawned = False
        self._thread_id: str | None = None
        self._model: str | None = None
        self._turn_id: str | None = None
        self._session_id: str | None = None
        self._active_turn_id: str | None = None  # a turn codex has not reported finished
        self._turn: _TurnWaiter | None = None
        self._last_delta_event = float("-inf")
        self._rate_limits: dict[str, Any] = {}  # the account's windows, merged as they come

    @property
    def lines_read(self) -> int:
        """Protocol lines read from the agent so far (diagnostics and benchmarks)."""
        return self._process.lines_read

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def thread_id(self) -> str | None:
        return self._thread_id

    @property
    def session_id(self) -> str | None:
        return self._session_id

    # -- lifecycle -------------------------------------------------------------------------

    def _began(self) -> bool:
        return self._spawned

    async def _open(self) -> None:
        """Launch the agent in the workspace and open a thread."""
        self._spawned = True
        await self._process.spawn(self._on_stdout_closed)
        self._logger = self._process.logger
        await self._handshake()

    def _opened(self) -> None:
        self._logger.debug("agent_session_started", thread_id=self._thread_id, resumed=self.resumed)
        self._emit(
            EventKind.SESSION_STARTED, message=RESUMED if self.resumed else None, model=self._model
        )

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        """Start a turn on the thread and stream it to its end; raises AgentError unless it
        completed. `title` only labels logs and events: the protocol has no turn title."""
        if self._rpc.failure is not None:
            raise again(self._rpc.failure)
        if self._thread_id is None or not self._spawned or self._stopping:
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
            outcome = await within_silence(
                waiter.outcome, lambda: self._process.last_output, self._settings.turn_timeout_ms
            )
        except AgentError as exc:
            said = waiter.reported and exc.category in _REPORTED_CATEGORIES
            self._turn_failed(exc, said=said, session_id=self._session_id)
            raise
        finally:
            self._turn = None
        self._logger.debug("agent_turn_completed", session_id=outcome.session_id)
        return outcome

    # -- startup ---------------------------------------------------------------------------

    async def _handshake(self) -> None:
        await self._request(
            "initialize",
            {
                "clientInfo": {
                    "name": "symphony",
                    "title": "Symphony",
                    "version": client_version(),
                },
                # dynamicTools on thread/start is an experimental field.
                "capabilities": {"experimentalApi": True},
            },
        )
        await self._rpc.notify("initialized")
        params: Message = {
            "cwd": str(self._launch.workspace),
            "approvalPolicy": plain(self._settings.approval_policy),
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
                resumed = dig(result, "thread", "id")
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
                    "inputSchema": plain(tool.input_schema),
                }
                for tool in self._launch.tools
            ]
        result = await self._request("thread/start", params)
        thread_id = dig(result, "thread", "id")
        if not isinstance(thread_id, str) or not thread_id:
            raise AgentError(RESPONSE_ERROR, "thread/start returned no thread id")
        self._thread_id = thread_id
        self._model = _model(result)

    def _begin_turn(self, waiter: _TurnWaiter, result: Any, title: str) -> None:
        """Runs in the reader as the turn/start reply is read, so that the turn's own
        notifications, read right after it, already carry the session id."""
        turn_id = dig(result, "turn", "id")
        if not isinstance(turn_id, str) or not turn_id:
            return
        waiter.turn_id = turn_id
        self._turn_id = turn_id
        self._session_id = f"{self._thread_id}-{turn_id}"
        if not waiter.outcome.done():
            self._active_turn_id = turn_id
        self._logger.debug("agent_turn_started", session_id=self._session_id, title=title)
        self._emit(EventKind.TURN_STARTED, message=title)

    def _turn_params(self, prompt: str) -> Message:
        params: Message = {
            "threadId": self._thread_id,
            "input": [{"type": "text", "text": prompt}],
            "cwd": str(self._launch.workspace),
            "approvalPolicy": plain(self._settings.approval_policy),
        }
        if self._settings.turn_sandbox_policy is not None:
            params["sandboxPolicy"] = plain(self._settings.turn_sandbox_policy)
        return params

    # -- requests and writes -----------------------------------------------------------------

    async def _request(
        self,
        method: str,
        params: Message,
        *,
        timeout_s: float | None = None,
        on_result: Any = None,
    ) -> Any:
        setting = None
        if timeout_s is None:
            timeout_s, setting = self._settings.read_timeout_ms / 1000, "codex.read_timeout_ms"
        return await self._rpc.request(
            method, params, timeout_s=timeout_s, on_result=on_result, setting=setting
        )

    # -- stdout --------------------------------------------------------------------------------

    def _on_line(self, line: bytes | bytearray) -> None:
        self._on_lines([line])

    def _on_lines(self, lines: list[bytes] | list[bytes | bytearray]) -> None:
        """The lines of one read. Streaming deltas inside the coalescing interval are known
        without decoding them and skipped: most of a streaming agent's lines are these, and
        nothing of them is used but the sign of life the read already noted. Every other line
        is decoded as usual."""
        handle = self._rpc.handle_line
        process = self._process
        skipping = process.last_output - self._last_delta_event < DELTA_INTERVAL_S
        for line in lines:
            if skipping and _is_delta(line):
                continue
            handle(line)
            skipping = process.last_output - self._last_delta_event < DELTA_INTERVAL_S

    def _skip_long_line(self) -> None:
        self._emit(
            EventKind.MALFORMED,
            message=f"skipped a protocol line longer than {MAX_LINE_BYTES} bytes",
        )

    async def _on_stdout_closed(self, returncode: int | None) -> None:
        self._fail(self._exit_failure(self._process, returncode))

    def _fail(self, failure: AgentError) -> None:
        """Record that the session is over and release everyone waiting on it."""
        self._rpc.fail(failure)
        failure = self._rpc.failure or failure
        if self._turn is not None and not self._turn.outcome.done():
            self._turn.outcome.set_result(failure)

    # -- server requests -----------------------------------------------------------------------

    async def _after_answer(self, method: str, params: Message) -> None:
        if method == _USER_INPUT:
            await self._interrupt_for_input(params)

    async def _reply_to(self, method: str, params: Message) -> Message:
        if method in _COMMAND_APPROVALS or method in _LEGACY_APPROVALS:
            self._emit(EventKind.APPROVAL_AUTO_APPROVED, message=_summarize(method, params))
            decision = "approved" if method in _LEGACY_APPROVALS else "accept"
            return {"result": {"decision": decision}}
        if method == _TOOL_CALL:
            return {"result": await self._call_tool(params)}
        if method == _USER_INPUT:
            # Flag first: the interrupted turn/completed may arrive before this task resumes.
            if self._turn is not None:
                self._turn.input_required = self._input_required_error(params)
                self._turn.reported = True
            self._emit(EventKind.TURN_INPUT_REQUIRED, message=_summarize(method, params))
            return {"result": {"answers": {}}}
        self._emit(EventKind.OTHER_MESSAGE, message=_truncate(f"refused server request {method}"))
        return error_reply(METHOD_NOT_FOUND, f"unsupported by symphony: {method}")

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
            self._emit(EventKind.UNSUPPORTED_TOOL_CALL, message=_truncate(label))
            return _tool_reply(False, f"unsupported_tool_call: {label}")
        try:
            result = await handler(name, params.get("arguments"))
            success, text = bool(result.success), json.dumps(result.output, default=str)
        except Exception as exc:
            failure = ToolResult.failure("tool_error", f"{type(exc).__name__}: {exc}")
            success, text = False, json.dumps(failure.output)
        # The agent was waiting on us, not silent: the wait must not count towards turn_timeout.
        self._process.touch()
        self._emit(EventKind.TOOL_CALL, message=f"{name} success={str(success).lower()}")
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
            last_output = self._process.last_output
            if last_output - self._last_delta_event < DELTA_INTERVAL_S:
                return
            self._last_delta_event = last_output
            self._emit(EventKind.NOTIFICATION, message=method)
            return
        if method == "thread/tokenUsage/updated":
            usage = _token_usage(params)
            if usage is not None:
                self._emit(EventKind.TOKEN_USAGE, usage=usage)
                return
        elif method == "account/rateLimits/updated":
            limits = params.get("rateLimits")
            if isinstance(limits, dict):
                # Updates are sparse: a null leaves what an earlier one said standing.
                self._rate_limits.update((k, v) for k, v in limits.items() if v is not None)
                self._emit(EventKind.RATE_LIMITS, rate_limits=limits)
                return
        elif method == "error":
            waiter = self._turn
            if (
                waiter is not None
                and not params.get("willRetry")
                and params.get("turnId") in (None, waiter.turn_id)
            ):
                waiter.error_info = dig(params, "error", "codexErrorInfo")
        elif method == "turn/completed":
            self._on_turn_completed(params)
            return
        elif method == "turn/started":
            turn_id = dig(params, "turn", "id")
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
        self._emit(EventKind.NOTIFICATION, message=_summarize(method, params))

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
            self._emit(EventKind.NOTIFICATION, message=_summarize("turn/completed", params))
            return
        waiter.turn_id = turn_id
        status = turn.get("status")
        outcome: TurnResult | AgentError
        if status == "completed":
            message = waiter.last_message or _final_message(turn)
            outcome = TurnResult(turn_id, f"{self._thread_id}-{turn_id}", message)
            self._emit(EventKind.TURN_COMPLETED, message=_truncate(message) if message else None)
        elif status == "failed":
            error = turn.get("error")
            reason = error.get("message") if isinstance(error, dict) else None
            info = error.get("codexErrorInfo") if isinstance(error, dict) else None
            limit = _limit_of(
                waiter.error_info if info is None else info,
                reason or "",
                self._rate_limits,
                datetime.now(UTC),
            )
            outcome = AgentError(TURN_FAILED, reason or "the turn failed", limit=limit)
            self._emit(EventKind.TURN_FAILED, message=_truncate(outcome.message))
        elif status == "interrupted" and waiter.input_required is not None:
            outcome = waiter.input_required
        elif status == "interrupted":
            outcome = AgentError(TURN_CANCELLED, "the turn was interrupted")
            self._emit(EventKind.TURN_CANCELLED, message=outcome.message)
        else:
            outcome = AgentError(RESPONSE_ERROR, f"turn/completed with unknown status {status!r}")
        waiter.reported = waiter.reported or isinstance(outcome, AgentError)
        waiter.outcome.set_result(outcome)

    def _emit(
        self,
        kind: EventKind,
        *,
        message: str | None = None,
        usage: TokenUsage | None = None,
        rate_limits: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> None:
        event = AgentEvent(
            kind=kind,
            pid=self.pid,
            remote_pgid=self._process.remote_pgid,
            session_id=self._session_id,
            thread_id=self._thread_id,
            turn_id=self._turn_id,
            message=message,
            usage=usage,
            rate_limits=rate_limits,
            model=model,
        )
        deliver(self._launch.on_event, event, self._logger)

    # -- shutdown ------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        try:
            await self._process.stop(self._stop_grace_s, self._interrupt_running_turn)
        finally:
            await self._rpc.close()
            self._fail(AgentError(PORT_EXIT, "the session was stopped"))

    async def _interrupt_running_turn(self) -> None:
        turn_id = self._active_turn_id
        if turn_id is None or self._thread_id is None or self._rpc.failure is not None:
            return
        timeout_s = min(self._settings.read_timeout_ms / 1000, self._stop_grace_s / 2)
        with contextlib.suppress(AgentError):
            await self._request(
                "turn/interrupt",
                {"threadId": self._thread_id, "turnId": turn_id},
                timeout_s=timeout_s,
            )


_NAMED_LIMITS = MappingProxyType(
    {
        "usageLimitExceeded": LimitKind.USAGE,
        "rateLimitExceeded": LimitKind.RATE,
        # No capacity for the request, at large or for its tier or policy: an overload.
        "serverOverloaded": LimitKind.OVERLOADED,
        "flexUnavailable": LimitKind.OVERLOADED,
        "policyCapacityUnavailable": LimitKind.OVERLOADED,
        "internalServerError": LimitKind.OUTAGE,
    }
)
"""`codexErrorInfo` names that are the provider's refusal. The rest (a full context window, a
bad request, a refused key, a policy, `other`) are the work's or the setup's failures."""

_HTTP_FAILURES = (
    "httpConnectionFailed",
    "responseStreamConnectionFailed",
    "responseStreamDisconnected",
    "responseTooManyFailedAttempts",
)
"""`codexErrorInfo` objects carrying the model server's status (measured with codex 0.171: a
429 comes as `responseTooManyFailedAttempts`, a 503 or 529 as `httpConnectionFailed`)."""


def _limit_of(
    info: Any, message: str, rate_limits: Mapping[str, Any], now: datetime
) -> ProviderLimit | None:
    """The provider's limit a failed turn's `codexErrorInfo` names, or None for a failure of
    the work. A failure over HTTP is read by its status: none at all (the server could not be
    reached, the stream broke) is an outage, a 4xx other than 429 is the request's fault."""
    kind: LimitKind | None = None
    if isinstance(info, str):
        kind = _NAMED_LIMITS.get(info)
    elif isinstance(info, dict) and len(info) == 1:
        ((name, detail),) = info.items()
        if name in _HTTP_FAILURES:
            status = detail.get("httpStatusCode") if isinstance(detail, dict) else None
            if status is None or isinstance(status, int):
                kind = LimitKind.OUTAGE if status is None else kind_of_status(status)
    if kind is None:
        return None
    resets_at = None
    if kind in (LimitKind.USAGE, LimitKind.RATE):
        resets_at = _window_reset(rate_limits, now)
    return ProviderLimit(kind, resets_at, _truncate(message))


def _window_reset(rate_limits: Mapping[str, Any], now: datetime) -> datetime | None:
    """When the account's windows let it work again: the reset of the window that is used up
    (the later one if both are), else the latest reset any window names; a reset already past
    says nothing."""
    full: list[datetime] = []
    named: list[datetime] = []
    for window in (rate_limits.get("primary"), rate_limits.get("secondary")):
        if not isinstance(window, dict):
            continue
        when = from_epoch(window.get("resetsAt"))
        if when is None or when <= now:
            continue
        named.append(when)
        used = window.get("usedPercent")
        if isinstance(used, int | float) and not isinstance(used, bool) and used >= 100:
            full.append(when)
    candidates = full or named
    return max(candidates) if candidates else None


def _tool_reply(success: bool, text: str) -> Message:
    # contentItems is required even for failures: without it codex treats the reply as invalid.
    return {"success": success, "contentItems": [{"type": "inputText", "text": text}]}


def _token_usage(params: Message) -> TokenUsage | None:
    """Absolute thread totals from `tokenUsage.total`; `last` is a per-call delta, never used."""
    total = dig(params, "tokenUsage", "total")
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
    model = dig(result, "model")
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


def _is_delta(line: bytes | bytearray) -> bool:
    """Whether a raw protocol line is a notification whose method ends in `delta`/`Delta`,
    read from the line without decoding it (codex writes `method` first, which is looked at
    first; any other order is looked for)."""
    if line.startswith(b'{"method":'):  # compact, or with a space after the colon
        start = 11 if line[10:11] == b'"' else 12 if line[10:12] == b' "' else 0
        end = line.find(b'"', start) if start else -1
    else:
        start = line.find(b'"method":')
        if start < 0:
            return False
        start = line.find(b'"', start + 9) + 1  # the value's opening quote, after any space
        end = line.find(b'"', start) if start > 0 else -1
    return end > 0 and line[end - 5 : end] in (b"delta", b"Delta") and line.endswith(b"}")


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
        detail = dig(params, "error", "message")
    elif method in ("turn/started", "turn/completed"):
        detail = dig(params, "turn", "status")
    elif method == "thread/status/changed":
        detail = dig(params, "status", "type")
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
    return truncate(text, limit)
