#!/usr/bin/env python3
"""A second demonstration agent for the symphony quickstart, speaking the Agent Client Protocol.

The quickstart plans tickets on this one and implements them on `demo_agent.py`, to show one
workflow running two kinds of agent, a stage each. It makes no model calls and needs no key.
It speaks ACP as Gemini CLI or the Claude Code adapter do (JSON-RPC 2.0 lines on stdio:
`initialize`, `session/new`, `session/prompt` with `session/update` notifications), and it
reports its plan the only way such an agent can: by calling symphony's `report_outcome` tool on
the MCP server the daemon names in `session/new` (streamable HTTP, with the bearer token it was
given). Stdlib only, Python 3.9 or newer.

`DEMO_AGENT_DELAY_MS` (default 1000) is how long a prompt takes; `session/cancel` ends it early.
`DEMO_AGENT_OUTCOME=blocked` reports `blocked` with a question instead of a plan.
To run a real ACP agent instead, set `acp.command` in WORKFLOW.md to it
(for example `gemini --experimental-acp`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.request
import uuid
from typing import Any

from demo_agent import files_named, ticket_of

LOCK = threading.Lock()
CANCELLED = threading.Event()


def send(message: dict[str, Any]) -> None:
    with LOCK:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()


def update(session: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": session, "update": body}})


class ToolServer:
    """A minimal MCP client of the server symphony gave in `session/new`."""

    def __init__(self, server: dict[str, Any]) -> None:
        self.url = server["url"]
        self.headers = {h["name"]: h["value"] for h in server.get("headers", [])}
        self.session: str | None = None
        self.next_id = 1

    def post(self, method: str, params: dict[str, Any], notify: bool = False) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            message["id"] = self.next_id
            self.next_id += 1
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        request = urllib.request.Request(
            self.url, data=json.dumps(message).encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            self.session = reply.headers.get("Mcp-Session-Id") or self.session
            body = reply.read()
        return json.loads(body) if body and not notify else None

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        if self.session is None:
            self.post(
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "demo-acp-agent", "version": "1"},
                },
            )
            self.post("notifications/initialized", {}, notify=True)
        return self.post("tools/call", {"name": tool, "arguments": arguments})


class Agent:
    def __init__(self) -> None:
        self.tools: ToolServer | None = None
        delay = os.environ.get("DEMO_AGENT_DELAY_MS", "1000")
        self.delay_s = (int(delay) if delay.isdigit() else 1000) / 1000

    def run(self) -> None:
        for line in sys.stdin:
            message = json.loads(line)
            method, params = message.get("method"), message.get("params") or {}
            if method == "initialize":
                send(
                    {
                        "id": message["id"],
                        "result": {
                            "protocolVersion": 1,
                            "agentCapabilities": {"loadSession": True},
                            "agentInfo": {"name": "demo-acp-agent", "version": "1"},
                        },
                    }
                )
            elif method in ("session/new", "session/load"):
                servers = [s for s in params.get("mcpServers", []) if s.get("type") == "http"]
                self.tools = ToolServer(servers[0]) if servers else None
                session = params.get("sessionId") or str(uuid.uuid4())
                send(
                    {
                        "id": message["id"],
                        "result": {
                            "sessionId": session,
                            "models": {"currentModelId": "demo"},
                        },
                    }
                )
            elif method == "session/prompt":
                CANCELLED.clear()
                threading.Thread(
                    target=self.prompt, args=(message["id"], params), daemon=True
                ).start()
            elif method == "session/cancel":
                CANCELLED.set()
            elif "id" in message:
                send(
                    {"id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
                )

    def prompt(self, request_id: Any, params: dict[str, Any]) -> None:
        session = params.get("sessionId", "")
        text = "".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict))
        identifier, title = ticket_of(text)
        update(
            session,
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {
                    "type": "text",
                    "text": f"Demo ACP agent: planning {identifier}. No model is involved. ",
                },
            },
        )
        if CANCELLED.wait(self.delay_s):
            send({"id": request_id, "result": {"stopReason": "cancelled"}})
            return
        files = files_named(text)
        plan = (
            f"1. Read the code that {title!r} touches.\n"
            f"2. Make the change for {identifier} in one small commit"
            + (f", in {', '.join(f'`{f}`' for f in files)}" if files else "")
            + ".\n3. Note what was done in NOTES/ so the reviewer can follow it."
        )
        report: dict[str, Any] = {
            "outcome": "done",
            "summary": "Plan written; nothing changed yet.",
            "plan": plan,
        }
        if os.environ.get("DEMO_AGENT_OUTCOME") == "blocked":
            report = {
                "outcome": "blocked",
                "summary": f"I cannot plan {identifier} without a decision.",
                "open_questions": ["Which behaviour do you want when the input is empty?"],
            }
        if self.tools is not None:
            self.tools.call("report_outcome", report)
        update(
            session,
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {
                    "type": "text",
                    "text": "The plan is reported.",
                },
            },
        )
        words = len(text) // 4
        usage = {
            "inputTokens": words + 300,
            "outputTokens": 80,
            "cachedReadTokens": 0,
            "cachedWriteTokens": 0,
            "totalTokens": words + 380,
        }
        send({"id": request_id, "result": {"stopReason": "end_turn", "usage": usage}})


if __name__ == "__main__":
    Agent().run()
