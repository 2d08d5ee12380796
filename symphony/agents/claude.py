"""Claude Code as a session: the `claude` CLI in stream-json mode, one process per worker run.

`ClaudeSession` launches `<claude.command> -p --input-format stream-json --output-format
stream-json --verbose` in the workspace and keeps that one process for every turn of the run:
measured on Claude Code 2.1.332, each user line written to stdin runs one turn, which ends with
exactly one `result` line, on the same session. (Resuming with `--resume <id>` in a new process
per turn also works but pays the 0.3 s start and the history reload each turn.) A session id is
chosen here (`--session-id`), so a restarted daemon can `--resume` it; a session Claude no
longer has falls back to a new one.

Posture, like codex's (`symphony.agents.codex`):

- Permission requests come to symphony (`--permission-prompt-tool stdio`, `can_use_tool`
  control requests) and are answered by `claude.approve`: `allow` (the default, reported as
  `approval_auto_approved`) or `deny`, so that only what `permission_mode` and `allowed_tools`
  grant runs. A request is never left unanswered: Claude would wait forever.
- Tools Claude refused by itself do not fail a turn (`permission_denials` in the result): each
  is reported as a `permission_denied` event.
- The tracker's tools come over MCP from the daemon (`symphony.agents.tool_server`), passed with
  `--mcp-config` and `--strict-mcp-config` (a repository's own `.mcp.json` is not loaded); the
  token reaches Claude in its environment (`SYMPHONY_MCP_TOKEN`), never on its command line.
  A server Claude could not connect to fails the turn, since its tools would be missing.
- Claude retries model errors for minutes by itself; `CLAUDE_CODE_MAX_RETRIES` (2 unless
  `agent.env` says otherwise) bounds that, and the daemon's own silence and stall timers still
  apply. An error result fails the turn whatever its `subtype` says.
- Usage comes per turn in `result.usage`; the session reports its running total as the thread
  totals the core expects, with cache reads and writes apart for pricing. `total_cost_usd`
  (Claude's own estimate, cumulative for the process) is kept as `reported_cost_usd`.
- An error result the model server caused (`api_error_status` 429, 529, 5xx, a refused
  connection; the turn's last `api_retry` line backs a result that names no status) fails the
  turn with a `ProviderLimit` (`_limit_of`); a 400 or 401 stays an ordinary failure. A
  subscription's spent window (measured: a 429 with `anthropic-ratelimit-unified-status:
  rejected`) comes as a `rate_limit_event` with `status: rejected` and its `resetsAt` epoch,
  then a result with `api_error: usage_limit_reached` and `You've hit your 5-hour limit ·
  resets 6:58am (UTC)`: a usage limit until that epoch.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import structlog

from symphony.agents import (
    PORT_EXIT,
    RESPONSE_ERROR,
    STARTUP_FAILED,
    TURN_CANCELLED,
    TURN_FAILED,
    AgentError,
    AgentLaunch,
    TurnResult,
    truncate,
)
from symphony.agents import TOOL_SERVER_NAME as SERVER_NAME
from symphony.agents.jsonrpc import timeout_words
from symphony.agents.limits import (
    api_error_status,
    from_epoch,
    kind_of_status,
    names_overload,
    names_usage_limit,
    reset_in_text,
)
from symphony.agents.session import (
    Replies,
    RunningUsage,
    SessionBase,
    again,
    count,
    deliver,
    dig,
    turn_event,
    within_silence,
)
from symphony.agents.stdio import MAX_LINE_BYTES, AgentProcess
from symphony.base.events import RESUMED, EventKind
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.config.claude import ClaudeSettings

_log = structlog.get_logger(__name__)

MCP_TOKEN_VARIABLE = "SYMPHONY_MCP_TOKEN"
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_MAX_RETRIES": "2",
}
"""Set unless the agent's environment already says otherwise: no telemetry, no update checks,
and a bound on Claude's own retries of a failing model."""


@dataclass(frozen=True, slots=True)
class _Retry:
    """Claude's last `api_retry` line of a turn: why it retried the model, and how long it
    said it would wait."""

    error: str | None
    status: int | None
    delay_ms: int | None


@dataclass(slots=True)
class _Turn:
    """The turn in progress: where its result goes, and what the stream has told of it so far."""

    outcome: asyncio.Future[TurnResult | AgentError]
    last_message: str | None = None
    interrupted: bool = False
    retry: _Retry | None = None
    rejected: Mapping[str, Any] | None = None
    """The `rate_limit_info` of the turn's last refused request (`status: rejected`)."""


class ClaudeSession(SessionBase):
    """An `AgentSession` speaking Claude Code's stream-json protocol to one CLI process."""

    def __init__(self, launch: AgentLaunch, *, stop_grace_s: float = 2.0) -> None:
        if not isinstance(launch.settings, ClaudeSettings):
            raise TypeError(f"a claude session needs the claude block, not {launch.settings!r}")
        super().__init__(launch, _log, stop_grace_s=stop_grace_s, stop_name="claude-stop")
        self._settings: ClaudeSettings = launch.settings
        self._process: AgentProcess | None = None
        self._session_id: str | None = None
        self._model: str | None = self._settings.model
        self._turn: _Turn | None = None
        self._turn_number = 0
        self._control: Replies[str, Mapping[str, Any]] = Replies(lambda n: f"symphony-{n}")
        self._usage = RunningUsage()
        self._failure: AgentError | None = None
        self._started_event = False
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def lines_read(self) -> int:
        return self._process.lines_read if self._process is not None else 0

    # -- lifecycle -------------------------------------------------------------------------

    def _began(self) -> bool:
        return self._process is not None

    async def _open(self) -> None:
        """Launch Claude Code and check it answers: on the session to resume when it still
        has it, else on a new one."""
        resume = self._launch.resume_thread_id
        if resume is not None:
            try:
                await self._launch_process(resume, resuming=True)
                self.resumed = True
            except AgentError as exc:
                # Claude no longer has that session (or never had it): start a new one.
                self._logger.info("agent_resume_refused", thread_id=resume, reason=str(exc))
                await self._retire()
        if not self.resumed:
            await self._launch_process(str(uuid.uuid4()), resuming=False)

    def _opened(self) -> None:
        self._logger.debug(
            "agent_session_started", thread_id=self._session_id, resumed=self.resumed
        )

    async def _shutdown(self) -> None:
        await self._retire()

    async def _launch_process(self, session_id: str, *, resuming: bool) -> None:
        self._failure = None
        self._session_id = session_id
        env = {**QUIET_ENV, **self._launch.env}
        grant = self._launch.tool_grant
        if grant is not None:
            env[MCP_TOKEN_VARIABLE] = grant.token
        process = AgentProcess(
            self._command(session_id, resuming),
            workspace=self._launch.workspace,
            env=env,
            on_line=self._on_line,
            on_long_line=lambda: self._emit(
                EventKind.MALFORMED, message=f"skipped a line longer than {MAX_LINE_BYTES} bytes"
            ),
            logger=self._logger,
            host=self._launch.host,
        )
        self._process = process
        await process.spawn(self._on_stdout_closed)
        self._logger = process.logger
        # The SDK's handshake: the answer proves the CLI is up, and a session it cannot resume
        # makes it end here, before any turn is sent.
        await self._control_request({"subtype": "initialize", "hooks": {}})

    def _command(self, session_id: str, resuming: bool) -> str:
        s = self._settings
        args = [
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-prompt-tool",
            "stdio",
            "--permission-mode",
            s.permission_mode,
            *(["--resume", session_id] if resuming else ["--session-id", session_id]),
        ]
        if s.model is not None:
            args += ["--model", s.model]
        allowed = list(s.allowed_tools)
        grant = self._launch.tool_grant
        if grant is not None:
            config = {
                "mcpServers": {
                    SERVER_NAME: {
                        "type": "http",
                        "url": grant.url,
                        # Expanded by Claude from its environment: the token is not in argv.
                        "headers": {"Authorization": f"Bearer ${{{MCP_TOKEN_VARIABLE}}}"},
                    }
                }
            }
            args += ["--mcp-config", json.dumps(config)]
            allowed.append(f"mcp__{SERVER_NAME}")
        args.append("--strict-mcp-config")
        if allowed:
            args += ["--allowedTools", ",".join(allowed)]
        if s.disallowed_tools:
            args += ["--disallowedTools", ",".join(s.disallowed_tools)]
        args += list(s.extra_args)
        return " ".join([s.command, *(shlex.quote(a) for a in args)])

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        """Send one user message and stream the turn to its `result`."""
        if self._failure is not None:
            raise again(self._failure)
        if self._process is None or self._stopping:
            raise AgentError(PORT_EXIT, "the session is not running")
        if self._turn is not None:
            raise RuntimeError("a turn is already running on this session")
        turn = self._turn = _Turn(asyncio.get_running_loop().create_future())
        self._turn_number += 1
        turn_id = f"turn-{self._turn_number}"
        self._emit(EventKind.TURN_STARTED, message=title)
        try:
            await self._write(
                {
                    "type": "user",
                    "message": {"role": "user", "content": prompt},
                    "parent_tool_use_id": None,
                    "session_id": self._session_id or "",
                }
            )
            assert self._process is not None
            outcome = await within_silence(
                turn.outcome, self._process_output, self._settings.turn_timeout_ms
            )
        except AgentError as exc:
            self._turn_failed(exc, said=exc.category in (TURN_FAILED, TURN_CANCELLED))
            raise
        finally:
            self._turn = None
        return TurnResult(turn_id, f"{self._session_id}-{turn_id}", outcome.message)

    def _process_output(self) -> float:
        return self._process.last_output if self._process is not None else 0.0

    async def _retire(self) -> None:
        process = self._process
        try:
            if process is not None:
                await process.stop(self._stop_grace_s, self._interrupt)
        finally:
            tasks = list(self._handlers)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._fail(AgentError(PORT_EXIT, "the session was stopped"))
            self._process = None

    async def _interrupt(self) -> None:
        turn = self._turn
        if turn is None or turn.outcome.done() or self._failure is not None:
            return
        turn.interrupted = True
        timeout = min(self._settings.read_timeout_ms / 1000, self._stop_grace_s / 2)
        try:
            async with asyncio.timeout(timeout):
                await self._control_request({"subtype": "interrupt"})
            # Claude ends the turn with an error result right after answering.
            await asyncio.wait({turn.outcome}, timeout=timeout)
        except (AgentError, TimeoutError):
            pass

    # -- writing -------------------------------------------------------------------------------

    async def _write(self, message: Mapping[str, Any]) -> None:
        if self._failure is not None:
            raise again(self._failure)
        if self._process is None:
            raise AgentError(PORT_EXIT, "the session is not running")
        try:
            await self._process.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        except AgentError:
            if self._failure is not None:
                raise again(self._failure) from None
            raise

    async def _control_request(self, request: Mapping[str, Any]) -> Mapping[str, Any]:
        timeout_s = self._settings.read_timeout_ms / 1000

        async def send(request_id: str) -> None:
            await self._write(
                {"type": "control_request", "request_id": request_id, "request": request}
            )

        return await self._control.exchange(
            send,
            timeout_s=timeout_s,
            timeout_message=timeout_words(
                str(request.get("subtype")), timeout_s, "claude.read_timeout_ms"
            ),
        )

    # -- reading -------------------------------------------------------------------------------

    def _on_line(self, line: bytes | bytearray) -> None:
        if not line.strip():
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            text = line.decode("utf-8", "replace").strip()
            self._emit(EventKind.MALFORMED, message=truncate(f"not JSON: {text}"))
            return
        if not isinstance(message, dict):
            return
        try:
            self._dispatch(message)
        except Exception:
            self._logger.exception("agent_message_handling_failed")

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "system":
            self._on_system(message)
        elif kind == "assistant":
            self._on_assistant(message)
        elif kind == "user":
            self._on_tool_results(message)
        elif kind == "result":
            self._on_result(message)
        elif kind == "control_request":
            task = asyncio.create_task(self._answer(message))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        elif kind == "control_response":
            response = message.get("response") or {}
            self._control.resolve(
                str(response.get("request_id")),
                AgentError(RESPONSE_ERROR, truncate(str(response.get("error")), 500))
                if response.get("subtype") == "error"
                else response.get("response") or {},
            )
        elif kind == "control_cancel_request":
            pass  # the permission it asked for is no longer wanted; our answer is ignored
        elif kind == "rate_limit_event":
            self._on_rate_limit(message.get("rate_limit_info"))
        else:
            self._emit(EventKind.NOTIFICATION, message=truncate(f"{kind}"))

    def _on_system(self, message: dict[str, Any]) -> None:
        subtype = message.get("subtype")
        if subtype == "init":
            session = message.get("session_id")
            if isinstance(session, str) and session:
                self._session_id = session
            model = message.get("model")
            if isinstance(model, str) and model:
                self._model = model
            if not self._started_event:
                self._started_event = True
                self._emit(
                    EventKind.SESSION_STARTED,
                    message=RESUMED if self.resumed else None,
                    model=self._model,
                )
            if self._launch.tool_grant is not None:
                servers = message.get("mcp_servers") or []
                ours = [s for s in servers if isinstance(s, dict) and s.get("name") == SERVER_NAME]
                if not ours or ours[0].get("status") != "connected":
                    status = ours[0].get("status") if ours else "missing"
                    self._end_turn(
                        AgentError(
                            STARTUP_FAILED,
                            f"Claude could not reach symphony's tool server (status {status})",
                        )
                    )
        elif subtype == "api_retry":
            if self._turn is not None:
                self._turn.retry = _Retry(
                    _text(message.get("error")),
                    _number(message.get("error_status")),
                    _number(message.get("retry_delay_ms")),
                )
            self._emit(
                EventKind.NOTIFICATION,
                message=truncate(
                    f"api_retry {message.get('attempt')}/{message.get('max_retries')}: "
                    f"{message.get('error')} {message.get('error_status') or ''}"
                ),
            )
        else:
            self._emit(EventKind.NOTIFICATION, message=truncate(f"system {subtype}"))

    def _on_rate_limit(self, info: Any) -> None:
        """A subscription's rate-limit window, as the last response reported it; a refused one
        is kept for the turn's error result to name its reset."""
        if not isinstance(info, dict):
            return
        if info.get("status") == "rejected" and self._turn is not None:
            self._turn.rejected = info
        self._emit(
            EventKind.NOTIFICATION,
            message=truncate(f"rate_limit {info.get('status')} {info.get('rateLimitType') or ''}"),
        )

    def _on_assistant(self, message: dict[str, Any]) -> None:
        refused = dig(message, "api_error_params", "rate_limit_info")
        if isinstance(refused, dict) and refused.get("status") == "rejected":
            self._on_rate_limit(refused)
        content = (message.get("message") or {}).get("content") or []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if self._turn is not None:
                    self._turn.last_message = block["text"]
                self._emit(
                    EventKind.NOTIFICATION, message=truncate(f"agentMessage {block['text']}")
                )
            elif block.get("type") == "tool_use":
                self._emit(
                    EventKind.NOTIFICATION, message=truncate(f"tool_use {_tool_summary(block)}")
                )

    def _on_tool_results(self, message: dict[str, Any]) -> None:
        content = (message.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                status = "failed" if block.get("is_error") else "completed"
                self._emit(EventKind.NOTIFICATION, message=f"tool_result {status}")

    def _on_result(self, message: dict[str, Any]) -> None:
        usage = message.get("usage")
        if isinstance(usage, dict):
            totals = self._usage.add(
                count(usage, "input_tokens"),
                count(usage, "cache_read_input_tokens"),
                count(usage, "cache_creation_input_tokens"),
                count(usage, "output_tokens"),
            )
            cost = message.get("total_cost_usd")
            self._emit(
                EventKind.TOKEN_USAGE,
                usage=totals,
                reported_cost_usd=float(cost) if isinstance(cost, int | float) else None,
            )
        for denial in message.get("permission_denials") or []:
            if isinstance(denial, dict):
                self._emit(
                    EventKind.PERMISSION_DENIED,
                    message=truncate(f"refused {denial.get('tool_name')}"),
                )
        turn = self._turn
        text = message.get("result") if isinstance(message.get("result"), str) else None
        if message.get("is_error"):
            if turn is not None and turn.interrupted:
                outcome = AgentError(TURN_CANCELLED, "the turn was interrupted")
                self._emit(EventKind.TURN_CANCELLED, message=outcome.message)
            else:
                detail = text or "; ".join(map(str, message.get("errors") or [])) or "error"
                status = message.get("api_error_status")
                reason = f"{detail} (HTTP {status})" if status else detail
                limit = _limit_of(
                    message,
                    detail,
                    turn.retry if turn else None,
                    datetime.now(UTC),
                    rejected=turn.rejected if turn else None,
                )
                outcome = AgentError(TURN_FAILED, truncate(reason, 1000), limit=limit)
                self._emit(EventKind.TURN_FAILED, message=truncate(outcome.message))
            self._end_turn(outcome)
            return
        final = (turn.last_message if turn is not None else None) or text
        self._emit(EventKind.TURN_COMPLETED, message=truncate(final) if final else None)
        self._end_turn(TurnResult("", "", final))

    def _end_turn(self, outcome: TurnResult | AgentError) -> None:
        turn = self._turn
        if turn is not None and not turn.outcome.done():
            turn.outcome.set_result(outcome)

    async def _answer(self, message: dict[str, Any]) -> None:
        request = message.get("request") or {}
        request_id = message.get("request_id")
        if request.get("subtype") == "can_use_tool":
            tool = str(request.get("tool_name"))
            if self._settings.approve == "allow":
                self._emit(EventKind.APPROVAL_AUTO_APPROVED, message=truncate(f"{tool} allowed"))
                answer: dict[str, Any] = {
                    "behavior": "allow",
                    "updatedInput": request.get("input") or {},
                }
            else:
                self._emit(EventKind.PERMISSION_DENIED, message=truncate(f"refused {tool}"))
                answer = {"behavior": "deny", "message": "not allowed by the workflow"}
            response = {"subtype": "success", "request_id": request_id, "response": answer}
        else:
            response = {
                "subtype": "error",
                "request_id": request_id,
                "error": f"unsupported by symphony: {request.get('subtype')}",
            }
        try:
            await self._write({"type": "control_response", "response": response})
        except AgentError as exc:
            self._logger.debug("agent_request_unanswered", reason=str(exc))

    async def _on_stdout_closed(self, returncode: int | None) -> None:
        self._fail(self._exit_failure(self._process, returncode))

    def _fail(self, failure: AgentError) -> None:
        if self._failure is None:
            self._failure = failure
        self._control.fail(self._failure)
        self._end_turn(self._failure)

    def _emit(self, kind: EventKind, **fields: Any) -> None:
        event = turn_event(kind, self.pid, self._session_id, self._turn_number, **fields)
        deliver(self._launch.on_event, event, self._logger)


_RETRY_KINDS = {
    "rate_limit": LimitKind.RATE,
    "overloaded": LimitKind.OVERLOADED,
    "server_error": LimitKind.OUTAGE,
}
"""`api_retry` errors that are the model server's (`authentication_failed`, `unknown` are not)."""

_UNREACHABLE = re.compile(r"connection (?:refused|error|reset)|ECONNREFUSED|ECONNRESET", re.I)


def _limit_of(
    result: Mapping[str, Any],
    text: str,
    retry: _Retry | None,
    now: datetime,
    *,
    rejected: Mapping[str, Any] | None = None,
) -> ProviderLimit | None:
    """The provider's limit an error `result` names, or None when the turn failed otherwise.

    The result's own `api_error_status` decides when it has one (the `API Error: NNN` of its
    text when not); without any, the turn's last `api_retry` says what Claude was retrying, and
    a refused connection is an outage. A usage limit is a 429 (or a status-less error) that
    Claude calls `usage_limit_reached` or whose words say the quota is spent (`You've hit your
    5-hour limit`); it resets at the refused window's `resetsAt` (`rejected`), else at a time
    its words name."""
    if result.get("api_error") == "usage_limit_reached":
        return _usage_limit(text, rejected, now)
    status = _number(result.get("api_error_status")) or api_error_status(text)
    # A retry earlier in the turn says nothing of a failure that was not the model server's.
    api_failure = result.get("terminal_reason") == "api_error" or "API Error" in text
    if retry is None or not api_failure:
        retry = None
    if status is not None:
        kind = kind_of_status(status)
    elif retry is not None and retry.error in _RETRY_KINDS:
        kind = _RETRY_KINDS[retry.error]
    elif retry is not None and retry.status is not None:
        kind = kind_of_status(retry.status)
    elif api_failure and _UNREACHABLE.search(text):
        kind = LimitKind.OUTAGE
    elif names_usage_limit(text):
        kind = LimitKind.USAGE
    else:
        kind = None
    if kind is LimitKind.RATE and names_usage_limit(text):
        kind = LimitKind.USAGE
    elif kind is LimitKind.OUTAGE and names_overload(text):
        kind = LimitKind.OVERLOADED
    if kind is None:
        return None
    if kind is LimitKind.USAGE:
        return _usage_limit(text, rejected, now)
    resets_at = None
    if kind is LimitKind.RATE:
        resets_at = reset_in_text(text, now)
        waited = retry.delay_ms if retry is not None and retry.error == "rate_limit" else None
        if resets_at is None and kind is LimitKind.RATE and waited:
            # Claude waits what the server's retry-after asked: the best word on when it lifts.
            resets_at = now + timedelta(milliseconds=waited)
    return ProviderLimit(kind, resets_at, truncate(text or str(kind)))


def _usage_limit(text: str, rejected: Mapping[str, Any] | None, now: datetime) -> ProviderLimit:
    named = from_epoch(rejected.get("resetsAt")) if rejected is not None else None
    resets_at = named if named is not None and named > now else reset_in_text(text, now)
    return ProviderLimit(LimitKind.USAGE, resets_at, truncate(text or str(LimitKind.USAGE)))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tool_summary(block: Mapping[str, Any]) -> str:
    name = block.get("name")
    arguments = block.get("input")
    if isinstance(arguments, dict):
        detail = arguments.get("command") or arguments.get("file_path") or ""
    else:
        detail = ""
    return f"{name} {detail}".strip()
