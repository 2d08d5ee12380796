"""A fake Anthropic Messages API on 127.0.0.1 for driving the real Claude Code CLI offline.

`POST /v1/messages` answers as the real API streams (server-sent events: `message_start`,
content blocks with their deltas, `message_delta`, `message_stop`), or as one JSON body when the
request is not streamed. What it answers is scripted by markers in the turn's prompt, the
newest user message that is not a tool result:

    <<bash CMD>>          a Bash tool call running CMD
    <<tool NAME JSON>>    a call of tool NAME with the JSON arguments
    <<text WORDS>>        a text reply (ends the turn)
    <<fail CODE N>>       the first N requests of the turn get HTTP CODE
    <<stall SECONDS>>     the reply starts, then says nothing for SECONDS

The markers run in order, one per model call of the turn (a tool call's result comes back as
the next call); after the last one the reply is `done`. Each call reports the same usage
(`USAGE`). Every request is recorded (`FakeAnthropic.requests`, and the log file as one JSON
line each).

A test may also refuse requests as the real API does at its worst: `FakeAnthropic(refuse=...)`
takes a function of the recorded request returning a `Refusal` (or None to answer as above);
`rate_limited`, `overloaded` and `window_spent` build the real error bodies and headers.

In a test: `with FakeAnthropic() as model: ... model.base_url ...`. By hand:
`python fake_anthropic.py --log FILE` prints `LISTENING <port>` when ready.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

try:
    from tests.fakes.quiet_http import QuietHTTPServer
except ImportError:  # run as a script, from its own folder
    from quiet_http import QuietHTTPServer  # type: ignore[no-redef]

USAGE = {
    "input_tokens": 100,
    "cache_creation_input_tokens": 10,
    "cache_read_input_tokens": 50,
    "output_tokens": 20,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP error answer: the status, the JSON body and the headers the real API sends."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_01"}


def rate_limited(retry_after_s: int, reset: float) -> Refusal:
    """A 429 `rate_limit_error` of an API-key organisation, with `retry-after` and the
    `anthropic-ratelimit-*-reset` headers (RFC 3339) at `reset` (a unix time)."""
    at = datetime.fromtimestamp(reset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = "This request would exceed the rate limit for your organization of 50 requests"
    return Refusal(
        429,
        _error("rate_limit_error", f"{message} per minute."),
        {
            "retry-after": str(retry_after_s),
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": at,
            "anthropic-ratelimit-tokens-reset": at,
            "request-id": "req_01",
        },
    )


def overloaded() -> Refusal:
    return Refusal(529, _error("overloaded_error", "Overloaded"), {"request-id": "req_01"})


def window_spent(reset: int, claim: str = "five_hour") -> Refusal:
    """A subscription's spent usage window (`anthropic-ratelimit-unified-status: rejected`),
    resetting at the unix time `reset`: what an OAuth-token client meets."""
    short = {"five_hour": "5h", "seven_day": "7d"}.get(claim, claim)
    return Refusal(
        429,
        _error("rate_limit_error", "This request would exceed your account's rate limit."),
        {
            "anthropic-ratelimit-unified-status": "rejected",
            "anthropic-ratelimit-unified-reset": str(reset),
            "anthropic-ratelimit-unified-representative-claim": claim,
            f"anthropic-ratelimit-unified-{short}-status": "rejected",
            f"anthropic-ratelimit-unified-{short}-reset": str(reset),
            f"anthropic-ratelimit-unified-{short}-utilization": "1.0",
            "request-id": "req_01",
        },
    )


Refuse = Callable[[dict[str, Any]], Refusal | None]


MARKER = re.compile(r"<<(bash|tool|text|fail|stall)\s+(.*?)>>", re.DOTALL)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block.get("text", "")
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def is_tool_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def plan(messages: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], int, str]:
    """The markers of the current turn, how many model calls it has had, and its prompt.

    The prompt is the newest text with markers in a user message (Claude may merge a failed
    turn's message with the next one into one user message of several blocks)."""
    start, prompt = 0, ""
    for index, message in enumerate(messages):
        if message.get("role") != "user" or is_tool_result(message):
            continue
        content = message.get("content")
        blocks = (
            [content]
            if isinstance(content, str)
            else [
                b.get("text", "")
                for b in content or []
                if isinstance(b, dict) and b.get("type") == "text"
            ]
        )
        marked = [b for b in blocks if MARKER.search(b)]
        if marked:
            start, prompt = index, marked[-1]
        elif index == 0:
            prompt = text_of(content)
    calls = sum(1 for m in messages[start:] if m.get("role") == "assistant")
    return MARKER.findall(prompt), calls, prompt


class State:
    def __init__(self, log: str | None, refuse: Refuse | None = None) -> None:
        self.log = log
        self.refuse = refuse
        self.lock = threading.Lock()
        self.failures: dict[str, int] = {}
        self.count = 0
        self.requests: list[dict[str, Any]] = []

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(entry)
            if self.log:
                with open(self.log, "a") as out:
                    out.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State = State(None)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.do_HEAD()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self.reply_json(404, {"type": "error", "error": {"type": "not_found_error"}})
            return
        messages = body.get("messages") or []
        markers, calls, prompt = plan(messages)
        with self.state.lock:
            self.state.count += 1
            number = self.state.count
        entry = {
            "n": number,
            "at": time.monotonic(),
            "api_key": self.headers.get("x-api-key"),
            "model": body.get("model"),
            "stream": body.get("stream", False),
            "calls": calls,
            "messages": len(messages),
            "prompt": prompt[-2000:],
            "user_texts": [
                text
                for m in messages
                if m.get("role") == "user" and not is_tool_result(m)
                for text in (
                    [m["content"]]
                    if isinstance(m.get("content"), str)
                    else [
                        b.get("text", "")
                        for b in m.get("content") or []
                        if isinstance(b, dict) and b.get("type") == "text"
                    ]
                )
            ],
            "tools": [t.get("name") for t in body.get("tools") or []],
            "tool_results": [
                text_of(b.get("content"))
                if not isinstance(b.get("content"), str)
                else b.get("content")
                for m in messages[-1:]
                for b in (m.get("content") if isinstance(m.get("content"), list) else [])
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ],
        }
        self.state.record(entry)
        refusal = self.state.refuse(entry) if self.state.refuse is not None else None
        if refusal is not None:
            self.reply_json(refusal.status, refusal.body, refusal.headers)
            return
        actions = [(k, a) for k, a in markers if k not in ("fail", "stall")]
        for kind, argument in markers:
            if kind == "fail":
                code, _, times = argument.partition(" ")
                key = f"{prompt}|{code}"
                with self.state.lock:
                    seen = self.state.failures.get(key, 0)
                    self.state.failures[key] = seen + 1
                if seen < int(times or "1"):
                    self.reply_json(
                        int(code),
                        {
                            "type": "error",
                            "error": {"type": "api_error", "message": f"fake {code}"},
                        },
                    )
                    return
        stall = next((float(a) for k, a in markers if k == "stall"), 0.0)
        kind, argument = actions[calls] if calls < len(actions) else ("text", "done")
        model = body.get("model") or "claude-sonnet-4-5"
        if kind == "bash":
            block = {
                "type": "tool_use",
                "id": f"toolu_{number}",
                "name": "Bash",
                "input": {"command": argument, "description": "scripted command"},
            }
        elif kind == "tool":
            name, _, arguments = argument.partition(" ")
            block = {
                "type": "tool_use",
                "id": f"toolu_{number}",
                "name": name,
                "input": json.loads(arguments or "{}"),
            }
        else:
            block = {"type": "text", "text": argument}
        stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
        message = {"id": f"msg_{number}", "type": "message", "role": "assistant", "model": model}
        if not body.get("stream"):
            self.reply_json(
                200,
                {
                    **message,
                    "content": [block],
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": USAGE,
                },
            )
            return
        self.stream(message, block, stop, stall)

    def reply_json(
        self, status: int, payload: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def stream(
        self, message: dict[str, Any], block: dict[str, Any], stop: str, stall: float
    ) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**USAGE, "output_tokens": 1},
        }
        self.event("message_start", {"type": "message_start", "message": start})
        if stall:
            self.wfile.flush()
            time.sleep(stall)
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        self.event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": opening},
        )
        self.event(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )
        self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": USAGE["output_tokens"]},
            },
        )
        self.event("message_stop", {"type": "message_stop"})
        self.wfile.flush()
        self.close_connection = True

    def event(self, name: str, data: dict[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())


class FakeAnthropic:
    """The fake on a free port of 127.0.0.1, served from a thread while the block runs."""

    def __init__(self, refuse: Refuse | None = None) -> None:
        self.state = State(None, refuse)
        handler = type("BoundHandler", (Handler,), {"state": self.state})
        self.server = QuietHTTPServer(("127.0.0.1", 0), handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # Polled every 50 ms rather than 500: shutdown waits for the next poll.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return list(self.state.requests)

    def __enter__(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    Handler.state = State(args.log)
    server = QuietHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"LISTENING {server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
