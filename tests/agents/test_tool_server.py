"""The loopback MCP server that serves the tracker's tools to agents without dynamicTools."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from symphony.agents.tool_server import Grant, ToolServer
from symphony.base.tools import ToolResult, ToolSpec

MOVE = ToolSpec(
    "local_move_issue",
    "Move the ticket",
    {"type": "object", "properties": {"state": {"type": "string"}}, "required": ["state"]},
)
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
async def server() -> AsyncIterator[ToolServer]:
    tools = ToolServer()
    try:
        yield tools
    finally:
        await tools.close()


class Client:
    """A minimal MCP client over streamable HTTP, as an agent's would speak it."""

    def __init__(self, http: httpx.AsyncClient, grant: Grant) -> None:
        self.http, self.grant = http, grant
        self.session: str | None = None
        self.next_id = 1

    async def post(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not method.startswith("notifications/"):
            message["id"] = self.next_id
            self.next_id += 1
        headers = {**ACCEPT, "authorization": self.grant.authorization}
        if self.session:
            headers["mcp-session-id"] = self.session
        return await self.http.post(self.grant.url, json=message, headers=headers)

    async def open(self) -> None:
        reply = await self.post(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        )
        assert reply.status_code == 200, reply.text
        self.session = reply.headers.get("mcp-session-id")
        await self.post("notifications/initialized")

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = await self.post(method, params)
        assert reply.status_code == 200, reply.text
        return reply.json()["result"]


async def test_a_session_lists_and_calls_only_its_own_tools(server: ToolServer) -> None:
    moved: list[tuple[str, Any]] = []

    def handler_for(ticket: str) -> Any:
        async def handle(name: str, arguments: Any) -> ToolResult:
            moved.append((ticket, arguments))
            return ToolResult(True, {"moved": ticket, "to": arguments["state"]})

        return handle

    first = await server.grant([MOVE], handler_for("ABC-1"))
    second = await server.grant([MOVE], handler_for("ABC-2"))
    assert first.token != second.token and first.url == second.url
    assert first.url.startswith("http://127.0.0.1:")
    async with httpx.AsyncClient() as http:
        client = Client(http, first)
        await client.open()
        listed = await client.call("tools/list")
        assert [t["name"] for t in listed["tools"]] == ["local_move_issue"]
        assert listed["tools"][0]["inputSchema"]["required"] == ["state"]
        result = await client.call(
            "tools/call", {"name": "local_move_issue", "arguments": {"state": "Done"}}
        )
        assert result["isError"] is False
        assert '"moved": "ABC-1"' in result["content"][0]["text"]
        other = await client.call("tools/call", {"name": "github_graphql", "arguments": {}})
        assert other["isError"] is True and "unsupported_tool_call" in other["content"][0]["text"]
    # The token named the session: ABC-2's handler was never reached.
    assert moved == [("ABC-1", {"state": "Done"})]


async def test_a_request_without_a_live_token_is_refused_without_detail(
    server: ToolServer,
) -> None:
    async def handle(name: str, arguments: Any) -> ToolResult:
        raise AssertionError("never called")

    grant = await server.grant([MOVE], handle)
    async with httpx.AsyncClient() as http:
        for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": grant.token}):
            reply = await http.post(grant.url, json={}, headers={**ACCEPT, **headers})
            assert reply.status_code == 401 and reply.content == b""
        client = Client(http, grant)
        await client.open()
        server.revoke(grant)  # the session ended: its token opens nothing any more
        reply = await client.post("tools/list")
        assert reply.status_code == 401
