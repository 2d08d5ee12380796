"""JSON-RPC over newline-delimited JSON: requests with ids, their replies, notifications, and
requests from the other side, each answered.

`JsonRpcPeer` knows no protocol's methods. It numbers and sends requests and matches replies
(`request`, with the `Replies` every session's requests go through), sends notifications
(`notify`), and sorts every incoming line into a reply, a notification (`on_notification`) or
a request from the agent (`on_request`, whose answer is sent back; an exception becomes a
JSON-RPC error, so the agent never waits forever). Codex omits the `"jsonrpc": "2.0"` member
and ACP requires it: `version` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from symphony.agents import RESPONSE_ERROR, AgentError, truncate
from symphony.agents.session import Replies, again
from symphony.agents.stdio import EXIT_GRACE_S
from symphony.base.events import EventKind

Message = dict[str, Any]

EXIT_WAIT_S = 2 * EXIT_GRACE_S + 1
"""How long a write the agent refused waits for why: its output closing, then up to
`EXIT_GRACE_S` each for its stderr and its exit status."""
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
_DETAIL_CHARS = 200

RequestHandler = Callable[[str, Message], Awaitable[Message]]
"""Answers a request from the agent: `{"result": ...}` or `{"error": {...}}`."""


class JsonRpcPeer:
    def __init__(
        self,
        write: Callable[[bytes], Awaitable[None]],
        *,
        on_request: RequestHandler,
        on_notification: Callable[[str, Message], None],
        on_other: Callable[[EventKind, str], None],
        logger: Any,
        version: str | None = None,
        after_answer: Callable[[str, Message], Awaitable[None]] | None = None,
    ) -> None:
        self._write = write
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_other = on_other
        self._after_answer = after_answer
        self._version = version
        self._logger = logger
        self._replies: Replies[int, Message] = Replies(int)
        self._result_hooks: dict[int, Callable[[Any], None]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._failure: AgentError | None = None
        self._failed = asyncio.Event()

    @property
    def failure(self) -> AgentError | None:
        return self._failure

    async def send(self, message: Message) -> None:
        if self._failure is not None:
            raise again(self._failure)
        if self._version is not None:
            message = {"jsonrpc": self._version, **message}
        try:
            await self._write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        except AgentError:
            # The agent stopped reading: once its output has closed, its exit says why (a
            # missing command's "command not found" rather than a broken pipe).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXIT_WAIT_S):
                    await self._failed.wait()
            if self._failure is not None:
                raise again(self._failure) from None
            raise

    async def notify(self, method: str, params: Message | None = None) -> None:
        await self.send(
            {"method": method} if params is None else {"method": method, "params": params}
        )

    async def request(
        self,
        method: str,
        params: Message,
        *,
        timeout_s: float,
        on_result: Callable[[Any], None] | None = None,
        setting: str | None = None,
    ) -> Any:
        """Send a request and return its `result`; raises AgentError on an error reply, a
        timeout, or the end of the connection. `on_result` runs in the reader the moment a
        successful reply is read, before any later line is handled. `setting` names the
        WORKFLOW.md setting `timeout_s` came from, so that a timeout says what to raise."""
        sent: list[int] = []

        async def send(request_id: int) -> None:
            sent.append(request_id)
            if on_result is not None:
                self._result_hooks[request_id] = on_result
            await self.send({"id": request_id, "method": method, "params": params})

        try:
            reply = await self._replies.exchange(
                send,
                timeout_s=timeout_s,
                timeout_message=timeout_words(method, timeout_s, setting),
            )
        finally:
            for request_id in sent:
                self._result_hooks.pop(request_id, None)
        error = reply.get("error")
        if error is not None:
            if isinstance(error, Mapping):
                detail = f"{error.get('message', 'no message')} (code {error.get('code')})"
                data = error.get("data")
                if data:
                    detail += f": {json.dumps(data, default=str)}"
            else:
                detail = str(error)
            raise AgentError(RESPONSE_ERROR, truncate(f"{method} failed: {detail}", 1000))
        return reply.get("result")

    def fail(self, failure: AgentError) -> None:
        """The connection is over: every pending request gets `failure` (the first one
        recorded wins)."""
        if self._failure is None:
            self._failure = failure
        self._failed.set()
        self._replies.fail(self._failure)

    async def close(self) -> None:
        """Cancel the handlers of agent requests still running."""
        tasks = list(self._handlers)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- incoming ------------------------------------------------------------------------------

    def handle_line(self, line: bytes | bytearray) -> None:
        if not line.strip():
            return
        try:
            # orjson decodes the bytes directly (invalid UTF-8 and trailing data are errors),
            # several times faster than the json module: decoding is most of a line's cost.
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            text = line.decode("utf-8", "replace").strip()
            self._on_other(EventKind.MALFORMED, truncate(f"not JSON: {text}", _DETAIL_CHARS))
            return
        if not isinstance(message, dict):
            self._on_other(
                EventKind.OTHER_MESSAGE, truncate(f"not an object: {message!r}", _DETAIL_CHARS)
            )
            return
        try:
            self._dispatch(message)
        except Exception:
            # A surprising message shape must not end the session's only reader.
            self._logger.exception("agent_message_handling_failed")

    def _dispatch(self, message: Message) -> None:
        method = message.get("method")
        # Request ids may start at 0, so presence is tested, never truthiness.
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
            self._on_other(EventKind.OTHER_MESSAGE, truncate(json.dumps(message), _DETAIL_CHARS))

    def _resolve(self, message: Message) -> None:
        request_id = message["id"]
        if not isinstance(request_id, int) or not self._replies.awaits(request_id):
            self._logger.debug("agent_late_reply", request_id=request_id)
            return
        hook = self._result_hooks.pop(request_id, None)
        try:
            if hook is not None and message.get("error") is None:
                hook(message.get("result"))
        finally:
            self._replies.resolve(request_id, message)

    async def _answer(self, request_id: Any, method: str, params: Message) -> None:
        """Answer one request from the agent; every request gets a reply."""
        try:
            reply = await self._on_request(method, params)
        except Exception as exc:
            self._logger.exception("agent_request_handling_failed", method=method)
            reply = error_reply(INTERNAL_ERROR, f"symphony could not handle {method}: {exc}")
        try:
            await self.send({"id": request_id, **reply})
            if self._after_answer is not None:
                await self._after_answer(method, params)
        except AgentError as exc:
            self._logger.debug("agent_request_unanswered", method=method, reason=str(exc))
        except Exception:
            self._logger.exception("agent_request_reply_failed", method=method)


def error_reply(code: int, message: str) -> Message:
    return {"error": {"code": code, "message": truncate(message, _DETAIL_CHARS)}}


def timeout_words(what: str, timeout_s: float, setting: str | None) -> str:
    """What a request that got no answer in time says: which, how long, and the setting that
    allows more (an agent slow to start may just need a longer one)."""
    said = f"no reply to {what} within {round(timeout_s * 1000)} ms"
    return f"{said}; raise {setting} in WORKFLOW.md if the agent needs longer" if setting else said
