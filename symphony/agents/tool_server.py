"""The tracker's tools for agents that take them over MCP: a loopback server in the daemon.

Codex receives the tools as `dynamicTools` on its own protocol. Other agents (Claude Code, ACP
agents) reach tools through MCP, so the daemon serves them over streamable HTTP on 127.0.0.1
(the `mcp` SDK, running in the daemon's own event loop). Each session gets a `Grant`: a random
bearer token bound to that session's tools and handler, so a session can reach only its own
ticket, and the tracker's credential never leaves the daemon: the agent holds a token that is
worthless once its session ends. A request without a live token is answered 401, with no
detail.

For agents in pods (`worker.kubernetes.daemon_address`) it listens where they reach it
instead (`Listen`: all interfaces at a fixed port by default); the token is all that opens it
there as here, and a request naming a host other than loopback or that address (a rebound
name) is refused before its token is looked at.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog

from symphony.agents import TOOL_SERVER_NAME, Grant, ToolHandler, plain
from symphony.base.tools import ToolResult, ToolSpec
from symphony.hosts.serve import (
    LOOPBACK,
    Listen,
    local_url,
    request_host,
    serve_embedded,
    stop_embedded,
)

if TYPE_CHECKING:
    import mcp_types as types
    import uvicorn

MCP_PATH = "/mcp"

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Session:
    """What a session's token opens: that session's tools and the handler that runs them."""

    tools: tuple[ToolSpec, ...]
    handle: ToolHandler


def _key(token: str) -> str:
    # Looked up by digest, so the time a lookup takes says nothing about any live token.
    return hashlib.sha256(token.encode()).hexdigest()


class ToolServer:
    def __init__(self, listen: Callable[[], Listen] = lambda: LOOPBACK) -> None:
        self._listen = listen
        """Where to listen when a grant starts the server (the current settings')."""
        self._where = LOOPBACK
        self._sessions: dict[str, _Session] = {}
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._url: str | None = None
        self._lock = asyncio.Lock()
        self._types: ModuleType | None = None
        self.calls = 0
        """Tool calls served (diagnostics)."""

    async def grant(self, tools: Sequence[ToolSpec], handle: ToolHandler) -> Grant:
        """A token for one session's tools; the server starts with the first grant."""
        url = await self._ensure_started()
        token = secrets.token_urlsafe(32)
        self._sessions[_key(token)] = _Session(tuple(tools), handle)
        return Grant(url, token)

    def revoke(self, grant: Grant) -> None:
        """The session ended: its token opens nothing any more."""
        self._sessions.pop(_key(grant.token), None)

    async def close(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = self._url = None
        await stop_embedded(server, task)

    # -- serving -------------------------------------------------------------------------------

    async def _ensure_started(self) -> str:
        wanted = self._listen()
        if self._url is not None and wanted != self._where and not self._sessions:
            # Where it listens changed (a reload) and no session holds the old address.
            await self.close()
        async with self._lock:
            if self._url is not None:
                return self._url
            # The MCP SDK takes about 0.4 s to import: only a workflow whose agents take their
            # tools over MCP pays for it, when its first such session starts.
            import mcp_types
            from mcp.server.lowlevel import Server
            from mcp.server.transport_security import TransportSecuritySettings

            self._types = mcp_types
            mcp = Server(
                TOOL_SERVER_NAME, on_list_tools=self._list_tools, on_call_tool=self._call_tool
            )
            # The host check is the app's own below: the SDK's knows loopback names only.
            unchecked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            inner = mcp.streamable_http_app(
                streamable_http_path=MCP_PATH, json_response=True, transport_security=unchecked
            )
            where = wanted
            names = where.names()

            async def app(scope: Any, receive: Any, send: Any) -> None:
                if scope["type"] == "lifespan":
                    await inner(scope, receive, send)
                elif scope["type"] != "http":
                    await send({"type": "websocket.close", "code": 1008})
                elif request_host(scope) not in names:
                    await _answer(send, 421)
                elif self._session_of(scope) is None:
                    await _answer(send, 401, [(b"www-authenticate", b"Bearer")])
                else:
                    await inner(scope, receive, send)

            server, task, base = await serve_embedded(
                app, where.host, where.port, name="mcp-tool-server", lifespan="on"
            )
            self._server, self._task, self._where = server, task, where
            self._url = local_url(base).rstrip("/") + MCP_PATH
            log.info("mcp tool server listening", url=self._url,
                     reached_as=where.reached_as or "loopback only")  # fmt: skip
            return self._url

    def _mcp_types(self) -> Any:
        assert self._types is not None, "the server answers only once it has started"
        return self._types

    def _session_of(self, scope: Any) -> _Session | None:
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                text = value.decode("latin-1")
                if text.startswith("Bearer "):
                    return self._sessions.get(_key(text[len("Bearer ") :].strip()))
        return None

    def _session_for(self, ctx: Any) -> _Session:
        request = getattr(ctx, "request", None)
        scope = getattr(request, "scope", None)
        session = self._session_of(scope) if scope is not None else None
        if session is None:
            raise PermissionError("this session's token is no longer valid")
        return session

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        session = self._session_for(ctx)
        mcp = self._mcp_types()
        listed: types.ListToolsResult = mcp.ListToolsResult(
            tools=[
                mcp.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=plain(tool.input_schema),
                )
                for tool in session.tools
            ]
        )
        return listed

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        session = self._session_for(ctx)
        self.calls += 1
        if params.name not in {tool.name for tool in session.tools}:
            result = ToolResult.failure("unsupported_tool_call", f"no tool {params.name!r} here")
        else:
            try:
                result = await session.handle(params.name, params.arguments or {})
            except Exception as exc:
                result = ToolResult.failure("tool_error", f"{type(exc).__name__}: {exc}")
        text = json.dumps(result.output, default=str)
        mcp = self._mcp_types()
        answer: types.CallToolResult = mcp.CallToolResult(
            content=[mcp.TextContent(text=text)], is_error=not result.success
        )
        return answer


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers or []})
    await send({"type": "http.response.body", "body": b""})
