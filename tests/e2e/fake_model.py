"""A fake OpenAI Responses API that the real `codex app-server` talks to offline (stdlib only).

`FakeModel` serves `POST /v1/responses` on 127.0.0.1 (a free port) from a thread and answers
each request with server-sent events, following a per-test *script*: a list of steps, or a
function of the request returning one, so that a single server can serve several conversations
(for example two tickets whose prompts name different identifiers) at once.

The server keeps no conversation state. Codex sends the whole history with every request, and
the step to play is the number of tool outputs (`function_call_output`,
`custom_tool_call_output`) after the last user message: 0 for the first call of a turn, 1 after
the first tool round-trip, and so on. A conversation that runs past its script gets a final
"done" message.

Steps:

- `Shell(command)`: a call of whichever shell tool the request offers (`exec_command` with
  `login: false`, else `shell_command`, else `shell`);
- `CallTool(name, arguments)`: a call of a named function tool (e.g. a dynamic tool);
- `Say(text)`: a final assistant message;
- `Fail(status)`: an HTTP error instead of a stream (`body` and `headers` replace the default
  error body and add response headers, e.g. a usage-limit error and its rate-limit headers);
- `Stall()`: `response.created`, then only SSE keep-alive comments until the client goes away
  or the server stops;
- `Together(name, parties, then)`: hold the reply until `parties` requests reached this step
  (across conversations), then play `then`; proves that conversations overlap in time.
- `Hold(until, then)`: hold the reply until `until()` is true (the test's view of the world,
  e.g. that the daemon has seen a move), then play `then`.

Every request is recorded (`FakeModel.requests`) with its body, and every `response.completed`
adds its usage to `FakeModel.reported_total_tokens`, so tests can compare the daemon's token
accounting with what the model really reported.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from tests.fakes.quiet_http import QuietHTTPServer

RESPONSES_PATH = "/v1/responses"
TOOL_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
SHELL_TOOLS = ("exec_command", "shell_command", "shell")


@dataclass(frozen=True, slots=True)
class Shell:
    """Ask codex to run `command` with the shell tool the request offers."""

    command: str


@dataclass(frozen=True, slots=True)
class CallTool:
    """Ask codex to call the function tool `name` with `arguments`."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Say:
    """End the turn with an assistant message."""

    text: str


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer with an HTTP error instead of a stream."""

    status: int = 500
    message: str = "the fake model failed on purpose"
    body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Stall:
    """Open the stream, then send nothing but keep-alive comments."""

    keepalive_s: float = 0.2


@dataclass(frozen=True, slots=True)
class Together:
    """Play `then` once `parties` requests have reached a step called `name`.

    If the others do not come within `timeout_s`, `then` is played anyway and the name is
    listed in `FakeModel.broken_rendezvous`.
    """

    name: str
    parties: int
    then: Step
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Hold:
    """Play `then` once `until()` holds (polled from the server's thread); after `timeout_s`
    it is played anyway and listed in `FakeModel.broken_rendezvous` as `hold`."""

    until: Callable[[], bool]
    then: Step
    timeout_s: float = 30.0


Step = Shell | CallTool | Say | Fail | Stall | Together | Hold


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request codex made, as the fake read it."""

    body: Mapping[str, Any]
    at: float  # time.monotonic() when it arrived
    headers: Mapping[str, str] = field(default_factory=dict)
    """Its headers, names in lower case."""

    @property
    def items(self) -> list[Mapping[str, Any]]:
        items = self.body.get("input")
        return (
            [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []
        )

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered, namespaced tools included."""
        return [str(tool["name"]) for tool in _walk_tools(self.body.get("tools")) if "name" in tool]

    @property
    def user_texts(self) -> list[str]:
        return [_text(item) for item in self.items if _is_user_message(item)]

    @property
    def prompt(self) -> str:
        """The text of the last user message (the turn's input)."""
        texts = self.user_texts
        return texts[-1] if texts else ""

    @property
    def step(self) -> int:
        """How many tool outputs follow the last user message."""
        items = self.items
        last_user = max((i for i, item in enumerate(items) if _is_user_message(item)), default=-1)
        return sum(1 for item in items[last_user + 1 :] if item.get("type") in TOOL_OUTPUT_TYPES)

    def tool_outputs(self) -> list[str]:
        """The outputs codex sent back for the tool calls of this turn, in order."""
        return [
            str(item.get("output")) for item in self.items if item.get("type") in TOOL_OUTPUT_TYPES
        ]


Script = Sequence[Step] | Callable[[ModelRequest], Sequence[Step]]
Event = tuple[str, dict[str, Any]]  # an SSE event: its type and its data


class FakeModel:
    """The fake Responses API server; use it as a context manager."""

    def __init__(self, script: Script, *, host: str = "127.0.0.1") -> None:
        """`host`: the address it listens on (`0.0.0.0` for clients in containers, which reach
        this machine by another address); `base_url` names 127.0.0.1 either way."""
        self.script = script
        self._lock = threading.Lock()
        self._requests: list[ModelRequest] = []
        self._reported_total = 0
        self._reported = [0, 0, 0]  # input (cached included), cached input, output
        self._unexpected: list[str] = []
        self._errors: list[str] = []
        self._stopping = threading.Event()
        self._call_ids = itertools.count(1)
        self._barriers: dict[str, threading.Barrier] = {}
        self._broken: list[str] = []
        self._server = _Server((host, 0), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None

    # -- public surface ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[ModelRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def reported_total_tokens(self) -> int:
        """Sum of `usage.total_tokens` over every `response.completed` sent."""
        with self._lock:
            return self._reported_total

    @property
    def reported_usage(self) -> tuple[int, int, int]:
        """(input, cached input, output) tokens summed over every `response.completed` sent;
        input includes the cached part, as the Responses API reports it."""
        with self._lock:
            return (self._reported[0], self._reported[1], self._reported[2])

    @property
    def unexpected_requests(self) -> list[str]:
        """`METHOD path` of requests to anything but `POST /v1/responses`."""
        with self._lock:
            return list(self._unexpected)

    @property
    def script_errors(self) -> list[str]:
        """Requests the script could not answer (each got an HTTP 400)."""
        with self._lock:
            return list(self._errors)

    @property
    def broken_rendezvous(self) -> list[str]:
        """Names of `Together` steps whose parties did not all arrive in time."""
        with self._lock:
            return list(self._broken)

    def start(self) -> FakeModel:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-model",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; stalled streams end at their next keep-alive tick."""
        self._stopping.set()
        with self._lock:
            barriers = list(self._barriers.values())
        for barrier in barriers:
            barrier.abort()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- used by the handler -------------------------------------------------------------------

    def _record(self, request: ModelRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _record_error(self, what: str) -> None:
        with self._lock:
            self._errors.append(what)

    def _record_unexpected(self, what: str) -> None:
        with self._lock:
            self._unexpected.append(what)

    def _add_reported(self, usage: dict[str, Any]) -> None:
        with self._lock:
            self._reported_total += int(usage["total_tokens"])
            self._reported[0] += int(usage["input_tokens"])
            self._reported[1] += int(usage["input_tokens_details"]["cached_tokens"])
            self._reported[2] += int(usage["output_tokens"])

    def _reply_for(self, request: ModelRequest) -> Fail | Stall | list[Event]:
        """What to answer: an HTTP failure, a stall, or the events of a stream."""
        steps = self.script(request) if callable(self.script) else self.script
        step = steps[request.step] if request.step < len(steps) else Say("done")
        while isinstance(step, Together | Hold):
            if isinstance(step, Together):
                self._rendezvous(step)
            else:
                self._hold(step)
            step = step.then
        if isinstance(step, Fail | Stall):
            return step
        return list(_events(step, request, self._next_call_id()))

    def _rendezvous(self, together: Together) -> None:
        with self._lock:
            barrier = self._barriers.setdefault(together.name, threading.Barrier(together.parties))
        try:
            barrier.wait(timeout=together.timeout_s)
        except threading.BrokenBarrierError:
            with self._lock:
                if together.name not in self._broken:
                    self._broken.append(together.name)

    def _hold(self, hold: Hold) -> None:
        deadline = time.monotonic() + hold.timeout_s
        while not hold.until():
            if time.monotonic() > deadline or self._stopping.is_set():
                with self._lock:
                    self._broken.append("hold")
                return
            time.sleep(0.01)

    def _next_call_id(self) -> str:
        with self._lock:
            return f"call_{next(self._call_ids)}"


class _Server(QuietHTTPServer):
    fake: FakeModel


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 30  # a connection that never sends its request is dropped eventually

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean; the requests are recorded instead

    def do_GET(self) -> None:
        self.server.fake._record_unexpected(f"GET {self.path}")
        self._send_json(404, {"error": {"message": f"no such path {self.path}"}})

    def do_POST(self) -> None:
        fake = self.server.fake
        if self.path.split("?", 1)[0] != RESPONSES_PATH:
            fake._record_unexpected(f"POST {self.path}")
            self._send_json(404, {"error": {"message": f"no such path {self.path}"}})
            return
        try:
            body = json.loads(self._read_body())
        except ValueError as exc:
            self._send_json(400, {"error": {"message": f"unreadable request body: {exc}"}})
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = ModelRequest(body=body, at=time.monotonic(), headers=headers)
        fake._record(request)
        try:
            reply = fake._reply_for(request)
        except Exception as exc:
            # A script that cannot answer is a broken test: say so to codex and to the test.
            fake._record_error(f"{type(exc).__name__}: {exc}")
            self._send_json(400, {"error": {"message": f"fake model script failed: {exc}"}})
            return
        if isinstance(reply, Fail):
            body = reply.body or {"error": {"message": reply.message, "type": "server_error"}}
            self._send_json(reply.status, body, reply.headers)
        elif isinstance(reply, Stall):
            self._stall(reply)
        else:
            self._send_events(reply)

    # -- bodies ----------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = bytearray()
            while size := int(self.rfile.readline().strip().split(b";")[0] or b"0", 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            data = bytes(raw)
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            data = gzip.decompress(data)
        return data

    def _send_json(
        self, status: int, payload: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_events(self, events: list[Event]) -> None:
        data = b"".join(_sse(kind, payload) for kind, payload in events)
        # Counted before it is sent: a client that read the answer finds it counted.
        for kind, payload in events:
            if kind == "response.completed":
                self.server.fake._add_reported(payload["response"]["usage"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stall(self, step: Stall) -> None:
        stopping = self.server.fake._stopping
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.close_connection = True
        try:
            self.wfile.write(_sse("response.created", _created("resp_stalled")))
            self.wfile.flush()
            while not stopping.wait(step.keepalive_s):
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
        except OSError:
            pass  # the client went away: that is how a stall ends


# -- event building ------------------------------------------------------------------------------


def _events(step: Step, request: ModelRequest, call_id: str) -> Iterator[Event]:
    response_id = f"resp_{call_id}"
    yield "response.created", _created(response_id)
    if isinstance(step, Say):
        message_id = f"msg_{call_id}"
        added = {"type": "message", "role": "assistant", "id": message_id, "content": []}
        yield "response.output_item.added", _item_event("added", added)
        yield (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": message_id,
                "output_index": 0,
                "content_index": 0,
                "delta": step.text,
            },
        )
        done = {
            **added,
            "content": [{"type": "output_text", "text": step.text, "annotations": []}],
        }
        yield "response.output_item.done", _item_event("done", done)
    else:
        name, arguments = _function_call(step, request)
        item = {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        yield "response.output_item.added", _item_event("added", item)
        done = {**item, "arguments": json.dumps(arguments), "status": "completed"}
        yield "response.output_item.done", _item_event("done", done)
    yield "response.completed", _completed(response_id, request.step)


def _function_call(step: Step, request: ModelRequest) -> tuple[str, dict[str, Any]]:
    if isinstance(step, CallTool):
        return step.name, dict(step.arguments)
    if not isinstance(step, Shell):
        raise TypeError(f"not a tool-call step: {step!r}")
    tools = {
        str(tool["name"]): tool for tool in _walk_tools(request.body.get("tools")) if "name" in tool
    }
    offered = next((name for name in SHELL_TOOLS if name in tools), None)
    if offered is None:
        raise LookupError(f"no shell tool among {sorted(tools)}")
    if offered == "shell":
        arguments: dict[str, Any] = {"command": ["bash", "-c", step.command]}
    else:
        key = "cmd" if offered == "exec_command" else "command"
        arguments = {key: step.command}
    accepted = _parameter_names(tools[offered])
    # A login shell would source the machine's profile into every command's output.
    if "login" in accepted:
        arguments["login"] = False
    if "yield_time_ms" in accepted:
        arguments["yield_time_ms"] = 10_000
    return offered, arguments


def _usage(step: int) -> dict[str, Any]:
    """Deterministic, step-dependent usage so that a double count cannot hide."""
    input_tokens, output_tokens = 100 + 10 * step, 20 + step
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 10},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": input_tokens + output_tokens,
    }


def _created(response_id: str) -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": response_id}}


def _completed(response_id: str, step: int) -> dict[str, Any]:
    return {
        "type": "response.completed",
        "response": {"id": response_id, "usage": _usage(step)},
    }


def _item_event(phase: str, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": f"response.output_item.{phase}", "output_index": 0, "item": item}


def _sse(kind: str, payload: Mapping[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()


# -- request reading -----------------------------------------------------------------------------


def _walk_tools(tools: Any) -> Iterator[Mapping[str, Any]]:
    if not isinstance(tools, list):
        return
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        yield tool
        yield from _walk_tools(tool.get("tools"))


def _parameter_names(tool: Mapping[str, Any]) -> set[str]:
    parameters = tool.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return set(properties) if isinstance(properties, Mapping) else set()


def _is_user_message(item: Mapping[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


def _text(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, Mapping) and part.get("type") in ("input_text", "text")
    )
