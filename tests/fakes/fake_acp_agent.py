"""A scripted ACP agent (JSON-RPC 2.0 over stdio) for the edge cases a real one rarely shows.

Run as `python3 fake_acp_agent.py`. The environment picks the behaviour:

- `FAKE_ACP_VERSION`: the protocolVersion `initialize` answers (default 1);
- `FAKE_ACP_PROMPT`: what a `session/prompt` does, a comma-separated list of steps run in order:
  `permission` (ask `session/request_permission` and say which option came back), `read_file`
  (ask `fs/read_text_file` and say whether it was refused), `say:<text>`, `hang` (never answer
  until `session/cancel`, then answer `cancelled`), `error` (answer a JSON-RPC error,
  `Internal error: ` and `FAKE_ACP_ERROR`, default `boom`); default `say:done`;
- `FAKE_ACP_MODELS`: the `models` a session opens with (JSON, as the Claude Code adapter sends
  them); with it `session/set_model` is answered, without it refused as unknown;
- `FAKE_ACP_IGNORE_TERM=1`: ignore SIGTERM (and stdin closing, as real adapters do).

Every message it receives, and every answer it gets to its own requests, is appended to
`FAKE_ACP_RECORD` as a JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import urllib.request
from typing import Any

RECORD = os.environ.get("FAKE_ACP_RECORD")
LOCK = threading.Lock()
PENDING: dict[int, Any] = {}
CANCELLED = threading.Event()
NEXT_ID = [0]
MCP_SERVERS: list[dict[str, Any]] = []


def record(entry: dict[str, Any]) -> None:
    if RECORD:
        with LOCK, open(RECORD, "a") as out:
            out.write(json.dumps(entry) + "\n")


def send(message: dict[str, Any]) -> None:
    with LOCK:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()


def ask(method: str, params: dict[str, Any]) -> Any:
    """A request to the client; waits for its answer (read by the main loop)."""
    done = threading.Event()
    request_id = NEXT_ID[0]
    NEXT_ID[0] += 1
    PENDING[request_id] = done
    send({"id": request_id, "method": method, "params": params})
    done.wait(30)
    answer = PENDING.pop(request_id)
    return answer


def update(session: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": session, "update": body}})


def say(session: str, text: str) -> None:
    update(
        session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    )


def prompt(request_id: Any, params: dict[str, Any]) -> None:
    session = params.get("sessionId", "")
    for step in os.environ.get("FAKE_ACP_PROMPT", "say:done").split(","):
        kind, _, argument = step.partition(":")
        if kind == "permission":
            answer = ask(
                "session/request_permission",
                {
                    "sessionId": session,
                    "toolCall": {"toolCallId": "t1", "title": "rm -rf build", "kind": "execute"},
                    "options": [
                        {"kind": "allow_always", "name": "Always", "optionId": "always"},
                        {"kind": "allow_once", "name": "Allow", "optionId": "once"},
                        {"kind": "reject_once", "name": "Reject", "optionId": "no"},
                    ],
                },
            )
            record({"permission_answer": answer})
            say(session, f"permission {json.dumps(answer.get('result'))} ")
        elif kind == "read_file":
            answer = ask("fs/read_text_file", {"sessionId": session, "path": "/etc/hostname"})
            record({"read_file_answer": answer})
            say(session, "refused " if "error" in answer else "read ")
        elif kind == "mcp_call":
            answer = mcp_call(argument)
            say(session, f"called {argument} ")
            record({"mcp_answer": answer, "mcp_url": MCP_SERVERS[0]["url"]})
        elif kind == "say":
            say(session, argument)
        elif kind == "hang":
            CANCELLED.wait(60)
            send({"id": request_id, "result": {"stopReason": "cancelled"}})
            return
        elif kind == "error":
            reason = f"Internal error: {os.environ.get('FAKE_ACP_ERROR', 'boom')}"
            send({"id": request_id, "error": {"code": -32603, "message": reason}})
            return
    update(
        session,
        {
            "sessionUpdate": "usage_update",
            "used": 10,
            "size": 100,
            "cost": {"amount": 0.25, "currency": "USD"},
        },
    )
    usage = {
        "inputTokens": 100,
        "outputTokens": 10,
        "cachedReadTokens": 40,
        "cachedWriteTokens": 5,
        "totalTokens": 155,
    }
    send({"id": request_id, "result": {"stopReason": "end_turn", "usage": usage}})


def mcp_call(tool: str) -> Any:
    """One MCP tool call, as a client over streamable HTTP makes it: initialize, the
    initialized notification, then tools/call; the call's JSON-RPC answer."""
    server = MCP_SERVERS[0]
    headers = {h["name"]: h["value"] for h in server.get("headers", [])}
    headers["content-type"] = "application/json"
    headers["accept"] = "application/json, text/event-stream"

    def post(message: dict[str, Any]) -> Any:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        request = urllib.request.Request(server["url"], body, headers)
        with urllib.request.urlopen(request, timeout=15) as answer:
            if "mcp-session-id" in answer.headers:
                headers["mcp-session-id"] = answer.headers["mcp-session-id"]
            text = answer.read()
            return json.loads(text) if text else None

    post({"id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fake-acp", "version": "1"}}})  # fmt: skip
    post({"method": "notifications/initialized"})
    arguments = json.loads(os.environ.get("FAKE_ACP_TOOL_ARGS") or "{}")
    return post({"id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})


def main() -> None:
    if os.environ.get("FAKE_ACP_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in sys.stdin:
        message = json.loads(line)
        record(message)
        method = message.get("method")
        if method is None:
            waiter = PENDING.get(message.get("id"))
            if waiter is not None:
                PENDING[message["id"]] = message
                waiter.set()
            continue
        params = message.get("params") or {}
        if method == "initialize":
            version = int(os.environ.get("FAKE_ACP_VERSION", "1"))
            send(
                {
                    "id": message["id"],
                    "result": {
                        "protocolVersion": version,
                        "agentCapabilities": {"loadSession": True},
                        "agentInfo": {"name": "fake-acp", "version": "1"},
                    },
                }
            )
        elif method in ("session/new", "session/load"):
            MCP_SERVERS[:] = params.get("mcpServers") or []
            session = params.get("sessionId") or "sess-1"
            models = json.loads(os.environ.get("FAKE_ACP_MODELS") or "null") or {
                "currentModelId": "fake-acp-model"
            }
            send({"id": message["id"], "result": {"sessionId": session, "models": models}})
        elif method == "session/set_model" and os.environ.get("FAKE_ACP_MODELS"):
            send({"id": message["id"], "result": {}})
        elif method == "session/prompt":
            threading.Thread(target=prompt, args=(message["id"], params), daemon=True).start()
        elif method == "session/cancel":
            CANCELLED.set()
        elif "id" in message:
            send({"id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
    if os.environ.get("FAKE_ACP_IGNORE_TERM") == "1":
        threading.Event().wait()  # like the real adapter: stdin closing does not end it


if __name__ == "__main__":
    main()
