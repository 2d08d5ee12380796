"""Any ACP agent as a session: the Agent Client Protocol (JSON-RPC 2.0 over stdio).

Gemini CLI, OpenCode, Goose and adapters for Claude Code and codex speak it. `AcpSession`
launches `acp.command` in the workspace, checks `initialize` (protocol version 1), opens a
session with `session/new` (the workspace as `cwd`, the daemon's MCP tool server in
`mcpServers`), and runs each turn as a `session/prompt`, whose reply ends the turn.

The client is small and rides on the shared framing (`symphony.agents.jsonrpc`) rather than the
`agent-client-protocol` package: a daemon needs `initialize`, `session/new|load|prompt|cancel`,
`session/update` and `session/request_permission` only, and the package is pre-1.0, tracks a
moving schema and would bring pydantic along.

Posture:

- Permission requests are answered by `acp.approve` (`allow`: the agent's allow-once option;
  `deny`: its reject-once option), within `read_timeout_ms`, so a turn never hangs on one.
- The client declares no file-system or terminal capability; such requests are refused.
- **Retire after a cancel or an error.** Measured on claude-agent-acp 0.23.1: after a
  `cancelled` reply or a failed prompt, the next prompt on that process answers at once and
  its output arrives a prompt later. So a session whose turn was cancelled or failed is never
  prompted again in that process: the next turn starts a new process and `session/load`s the
  same session.
- Adapters may ignore stdin closing and leave children behind on SIGTERM: the process runs in
  its own group, which is killed (`symphony.hosts.process`).
- Usage comes per prompt in the reply (`usage`) and is reported as running totals; the agent's
  own cost (`usage_update.cost.amount`, cumulative for its process) is kept as
  `reported_cost_usd`.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from symphony.agents import (
    PORT_EXIT,
    RESPONSE_ERROR,
    STARTUP_FAILED,
    TOOL_SERVER_NAME,
    TURN_CANCELLED,
    TURN_FAILED,
    AgentError,
    AgentLaunch,
    TurnResult,
    client_version,
    truncate,
)
from symphony.agents.jsonrpc import METHOD_NOT_FOUND, JsonRpcPeer, Message, error_reply
from symphony.agents.limits import kind_of_api_error, reset_in_text
from symphony.agents.session import (
    RunningUsage,
    SessionBase,
    count,
    deliver,
    dig,
    turn_event,
    within_silence,
)
from symphony.agents.stdio import MAX_LINE_BYTES, AgentProcess
from symphony.base.events import RESUMED, EventKind
from symphony.base.limits import LimitKind, ProviderLimit
from symphony.config.acp import AcpSettings

_log = structlog.get_logger(__name__)

PROTOCOL_VERSION = 1
READ_TIMEOUT = "acp.read_timeout_ms"
"""The setting that bounds each request but a prompt: named when one times out."""
QUIET_ENV = {"CLAUDE_CODE_MAX_RETRIES": "2", "DISABLE_TELEMETRY": "1"}
EOF_GRACE_S = 0.5


_FAMILY = re.compile(r"\b(opus|sonnet|haiku)\s+(\d+(?:\.\d+)?)", re.IGNORECASE)


def concrete_model(models: object) -> str | None:
    """The model a session really uses, from the `models` an agent advertises when a session
    opens. An id that names no version (the Claude Code adapter's `default`, `opus`) is an
    alias: its entry's words say what it stands for ("Use the default model (currently
    Sonnet 4.5)"), which becomes the API's name (`claude-sonnet-4-5`), so its tokens are
    priced. None when the agent names no model."""
    current = dig(models, "currentModelId")
    if not isinstance(current, str) or not current:
        return None
    if any(ch.isdigit() for ch in current):
        return current
    listed = dig(models, "availableModels")
    entry = next(
        (m for m in listed if isinstance(m, dict) and m.get("modelId") == current), None
    ) if isinstance(listed, list) else None  # fmt: skip
    words = " ".join(str(entry.get(k) or "") for k in ("name", "description")) if entry else ""
    match = _FAMILY.search(words) or _FAMILY.search(current)
    if match is None:
        return current
    family, version = match.group(1).lower(), match.group(2).replace(".", "-")
    return f"claude-{family}-{version}"


@dataclass(slots=True)
class _Turn:
    """The turn in progress: what the agent has said in it so far."""

    text: list[str] = field(default_factory=list)
    """The agent's message of this turn, as streamed."""


class AcpSession(SessionBase):
    """An `AgentSession` speaking ACP to an agent process (a new one after a cancel or an
    error, on the same ACP session)."""

    def __init__(self, launch: AgentLaunch, *, stop_grace_s: float = 2.0) -> None:
        if not isinstance(launch.settings, AcpSettings):
            raise TypeError(f"an ACP session needs the acp block, not {launch.settings!r}")
        super().__init__(launch, _log, stop_grace_s=stop_grace_s, stop_name="acp-stop")
        self._settings: AcpSettings = launch.settings
        self._process: AgentProcess | None = None
        self._rpc: JsonRpcPeer | None = None
        self._session_id: str | None = None
        self._model: str | None = None
        self._turn: _Turn | None = None
        self._turn_number = 0
        self._usage = RunningUsage()
        self._retire_before_next = False
        self._started_event = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if not self._settings.command:
            raise AgentError(STARTUP_FAILED, "acp.command is not set: which agent should run?")
        await super().start()

    def _began(self) -> bool:
        return self._process is not None

    async def _open(self) -> None:
        await self._open_on(self._launch.resume_thread_id)

    async def _shutdown(self) -> None:
        await self._retire_process()

    async def _open_on(self, load: str | None) -> None:
        """A new agent process, initialized, on a new session or on `load`'s."""
        rpc = await self._spawn()
        timeout_s = self._settings.read_timeout_ms / 1000
        result = await rpc.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                },
                "clientInfo": {"name": "symphony", "version": client_version()},
            },
            timeout_s=timeout_s,
            setting=READ_TIMEOUT,
        )
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if version != PROTOCOL_VERSION:
            raise AgentError(
                STARTUP_FAILED, f"the agent speaks ACP version {version!r}, not {PROTOCOL_VERSION}"
            )
        can_load = bool(dig(result, "agentCapabilities", "loadSession"))
        params: Message = {"cwd": str(self._launch.workspace), "mcpServers": self._mcp_servers()}
        if load is not None and can_load:
            try:
                opened = await rpc.request(
                    "session/load",
                    {**params, "sessionId": load},
                    timeout_s=timeout_s,
                    setting=READ_TIMEOUT,
                )
            except AgentError as exc:
                self._logger.info("agent_resume_refused", thread_id=load, reason=str(exc))
            else:
                self._session_id = load
                self.resumed = self.resumed or load == self._launch.resume_thread_id
                await self._choose_model(rpc, opened)
                self._note_model(opened)
                return
        opened = await rpc.request("session/new", params, timeout_s=timeout_s, setting=READ_TIMEOUT)
        session_id = opened.get("sessionId") if isinstance(opened, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise AgentError(RESPONSE_ERROR, "session/new returned no sessionId")
        self._session_id = session_id
        await self._choose_model(rpc, opened)
        self._note_model(opened)

    async def _spawn(self) -> JsonRpcPeer:
        env = {**QUIET_ENV, **self._launch.env}
        rpc: JsonRpcPeer | None = None

        def on_line(line: bytes | bytearray) -> None:
            if rpc is not None:
                rpc.handle_line(line)

        process = AgentProcess(
            self._settings.command,
            workspace=self._launch.workspace,
            env=env,
            on_line=on_line,
            on_long_line=lambda: self._emit(
                EventKind.MALFORMED, message=f"skipped a line longer than {MAX_LINE_BYTES} bytes"
            ),
            logger=self._logger,
            host=self._launch.host,
        )
        rpc = JsonRpcPeer(
            process.write,
            on_request=self._reply_to,
            on_notification=self._on_notification,
            on_other=lambda kind, message: self._emit(kind, message=message),
            logger=self._logger,
            version="2.0",
        )
        self._process, self._rpc = process, rpc

        async def closed(returncode: int | None) -> None:
            if rpc is not None and self._rpc is rpc:
                rpc.fail(self._exit_failure(process, returncode))

        await process.spawn(closed)
        self._logger = process.logger
        return rpc

    def _mcp_servers(self) -> list[Message]:
        grant = self._launch.tool_grant
        if grant is None:
            return []
        return [
            {
                "type": "http",
                "name": TOOL_SERVER_NAME,
                "url": grant.url,
                "headers": [{"name": "Authorization", "value": grant.authorization}],
            }
        ]

    async def _choose_model(self, rpc: JsonRpcPeer, opened: Any) -> None:
        """With `acp.model`, ask the agent for it; the session's model is what it then uses."""
        wanted = self._settings.model
        if wanted is None or self._session_id is None:
            self._model = concrete_model(dig(opened, "models"))
            return
        try:
            await rpc.request(
                "session/set_model", {"sessionId": self._session_id, "modelId": wanted},
                timeout_s=self._settings.read_timeout_ms / 1000, setting=READ_TIMEOUT,
            )  # fmt: skip
        except AgentError as exc:
            self._logger.warning("agent_model_refused", model=wanted, reason=str(exc))
            self._model = concrete_model(dig(opened, "models"))
            return
        advertised = dig(opened, "models")
        listed = advertised if isinstance(advertised, dict) else {}
        self._model = concrete_model({**listed, "currentModelId": wanted}) or wanted

    def _note_model(self, opened: Any) -> None:
        if not self._started_event:
            self._started_event = True
            self._emit(
                EventKind.SESSION_STARTED,
                message=RESUMED if self.resumed else None,
                model=self._model,
            )

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        if self._stopping or self._rpc is None or self._session_id is None:
            raise AgentError(PORT_EXIT, "the session is not running")
        if self._turn is not None:
            raise RuntimeError("a turn is already running on this session")
        if self._retire_before_next or self._rpc.failure is not None:
            # The process may answer the next prompt with the last one's leftovers: a new one.
            await self._retire_process()
            await self._open_on(self._session_id)
            self._retire_before_next = False
        rpc = self._rpc
        assert rpc is not None
        self._turn_number += 1
        turn_id = f"turn-{self._turn_number}"
        turn = self._turn = _Turn()
        self._emit(EventKind.TURN_STARTED, message=title)
        prompt_task = asyncio.ensure_future(
            rpc.request(
                "session/prompt",
                {"sessionId": self._session_id, "prompt": [{"type": "text", "text": prompt}]},
                # The silence timer below bounds the turn; this only must not fire first.
                timeout_s=self._settings.turn_timeout_ms / 1000 * 10,
            )
        )
        try:
            assert self._process is not None
            process = self._process
            result = await within_silence(
                prompt_task, lambda: process.last_output, self._settings.turn_timeout_ms
            )
            usage = result.get("usage") if isinstance(result, dict) else None
            if isinstance(usage, dict):
                totals = self._usage.add(
                    count(usage, "inputTokens"),
                    count(usage, "cachedReadTokens"),
                    count(usage, "cachedWriteTokens"),
                    count(usage, "outputTokens"),
                )
                self._emit(EventKind.TOKEN_USAGE, usage=totals)
            stop = result.get("stopReason") if isinstance(result, dict) else None
            message = "".join(turn.text).strip() or None
            if stop == "end_turn":
                self._emit(EventKind.TURN_COMPLETED, message=truncate(message) if message else None)
                return TurnResult(turn_id, f"{self._session_id}-{turn_id}", message)
            self._retire_before_next = True
            if stop == "cancelled":
                self._emit(EventKind.TURN_CANCELLED, message="the turn was cancelled")
                raise AgentError(TURN_CANCELLED, "the turn was cancelled")
            self._emit(EventKind.TURN_FAILED, message=f"stopped: {stop}")
            raise AgentError(TURN_FAILED, f"the agent stopped the turn: {stop}")
        except AgentError as exc:
            self._retire_before_next = True
            self._turn_failed(exc, said=exc.category in (TURN_FAILED, TURN_CANCELLED))
            if exc.category == RESPONSE_ERROR:
                limit = exc.limit or _limit_of(exc.message)
                raise AgentError(TURN_FAILED, exc.message, limit=limit) from None
            raise
        finally:
            self._turn = None
            if not prompt_task.done():
                prompt_task.cancel()

    async def _retire_process(self) -> None:
        process, rpc = self._process, self._rpc
        try:
            if process is not None:
                # Adapters measured here ignore stdin closing: no use waiting long for it.
                await process.stop(min(self._stop_grace_s, EOF_GRACE_S), self._cancel)
        finally:
            if rpc is not None:
                await rpc.close()
                rpc.fail(AgentError(PORT_EXIT, "the session was stopped"))
            self._process = self._rpc = None

    async def _cancel(self) -> None:
        rpc = self._rpc
        if self._turn is None or rpc is None or rpc.failure is not None:
            return
        try:
            await rpc.notify("session/cancel", {"sessionId": self._session_id})
            # The pending prompt answers `cancelled` within milliseconds.
            await asyncio.sleep(min(0.5, self._stop_grace_s / 2))
        except AgentError:
            pass

    # -- the agent's messages ------------------------------------------------------------------

    async def _reply_to(self, method: str, params: Message) -> Message:
        if method == "session/request_permission":
            return {"result": {"outcome": self._permission(params)}}
        self._emit(EventKind.OTHER_MESSAGE, message=truncate(f"refused agent request {method}"))
        return error_reply(METHOD_NOT_FOUND, f"unsupported by symphony: {method}")

    def _permission(self, params: Message) -> Message:
        options = params.get("options")
        options = options if isinstance(options, list) else []
        tool = dig(params, "toolCall", "title") or "a tool"
        wanted = (
            ("allow_once", "allow_always")
            if self._settings.approve == "allow"
            else ("reject_once", "reject_always")
        )
        for kind in wanted:
            for option in options:
                if isinstance(option, dict) and option.get("kind") == kind:
                    if self._settings.approve == "allow":
                        self._emit(
                            EventKind.APPROVAL_AUTO_APPROVED, message=truncate(f"{tool} allowed")
                        )
                    else:
                        self._emit(EventKind.PERMISSION_DENIED, message=truncate(f"refused {tool}"))
                    return {"outcome": "selected", "optionId": option.get("optionId")}
        self._emit(
            EventKind.PERMISSION_DENIED, message=truncate(f"refused {tool} (no option fits)")
        )
        return {"outcome": "cancelled"}

    def _on_notification(self, method: str, params: Message) -> None:
        if method != "session/update":
            self._emit(EventKind.NOTIFICATION, message=truncate(method))
            return
        update = params.get("update")
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = dig(update, "content", "text")
            if isinstance(text, str) and self._turn is not None:
                self._turn.text.append(text)
            if isinstance(text, str) and text:
                self._emit(EventKind.NOTIFICATION, message=truncate(f"agentMessage {text}"))
        elif kind in ("tool_call", "tool_call_update"):
            title = update.get("title") or update.get("toolCallId")
            status = update.get("status") or ""
            self._emit(EventKind.NOTIFICATION, message=truncate(f"{kind} {title} {status}".strip()))
        elif kind == "usage_update":
            amount = dig(update, "cost", "amount")
            if isinstance(amount, int | float):
                self._emit(EventKind.NOTIFICATION, message="usage_update", reported_cost_usd=amount)
        else:
            self._emit(EventKind.NOTIFICATION, message=truncate(f"session/update {kind}"))

    def _emit(self, kind: EventKind, **fields: Any) -> None:
        event = turn_event(kind, self.pid, self._session_id, self._turn_number, **fields)
        deliver(self._launch.on_event, event, self._logger)


def _limit_of(message: str, now: datetime | None = None) -> ProviderLimit | None:
    """The provider's limit a failed `session/prompt` names. ACP has no field for it: the
    adapters pass the model server's words on (measured on claude-agent-acp 0.23.1: `Internal
    error: API Error: 429 {"type":"error",...}`, and for a subscription's spent window
    `Internal error: You've hit your session limit · resets 7am (UTC)`)."""
    kind = kind_of_api_error(message)
    if kind is None:
        return None
    resets_at = reset_in_text(message, now) if kind in (LimitKind.USAGE, LimitKind.RATE) else None
    return ProviderLimit(kind, resets_at, truncate(message))
