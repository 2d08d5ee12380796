"""A scripted stand-in for `codex app-server` that tests drive over stdio (stdlib only).

It speaks the wire format of codex app-server 0.171: one JSON object per line, no `"jsonrpc"`
member in what it sends, `emittedAtMs` on notifications, its own request ids counting from 0,
every turn ending in `turn/completed` with status `completed`, `failed` or `interrupted`.
Closing its stdin makes it exit 0.

Run it as `python3 fake_app_server.py`. The environment picks the behaviour:

- `FAKE_AGENT_SCENARIO`: the scenario of each turn, comma-separated; the last one repeats
  (`tool,complete` runs `tool` on turn 1 and `complete` afterwards). Default `complete`.
  Scenarios: complete, tool, approval, legacy_approval, fail (an ordinary failed turn),
  interrupted, input, hang, busy (a started turn with token usage that never ends), crash,
  malformed, unknown_request, write_file, slow, stream, spend (usage reports at a steady pace,
  see `scenario_spend`), probe (a hostile agent, see `scenario_probe`), and turns the provider
  refused, as codex 0.171 reports them: usage_limit (the account's window used up, resetting
  `FAKE_AGENT_RESET_S` seconds ahead, default 5), rate_limited (HTTP 429), overloaded, outage
  (HTTP 500).
- `FAKE_AGENT_RECORD`: a file; the fake appends one JSON line describing itself (pid, cwd,
  argv, env names, `FAKE_AGENT_RECORD_ENV` values) and then every message it receives.
- `FAKE_AGENT_RECORD_ENV`: comma-separated names whose values go into that first line.
- `FAKE_AGENT_TOOL`, `FAKE_AGENT_TOOL_ARGS` (JSON): the dynamic tool the `tool` scenario calls.
- `FAKE_AGENT_FILE`: the file `write_file` writes in its cwd (default `agent-output.txt`).
- `FAKE_AGENT_DURATION_MS`: how long `slow` streams (default 500; a turn/interrupt ends it
  early), and `stream` when paced.
- `FAKE_AGENT_STREAM_RATE`: lines per second `stream` writes, one write per line;
  0 (the default) writes `FAKE_AGENT_STREAM_LINES` (default 10000) as fast as the pipe takes
  them. Either way the lines are built before the turn starts, so writing costs the fake little.
- `FAKE_AGENT_STREAM_TICK_MS`: when paced, write at most once per this many ms, batching the
  lines that fell due meanwhile (default 0: one write per line).
- `FAKE_AGENT_STREAM_DELTAS`: how many streaming deltas `stream` writes between each model
  call's bookkeeping (a command's start and end, token usage, rate limits; default 16, so a
  fifth of the lines are bookkeeping).
- `FAKE_AGENT_MODEL`: the model `thread/start` names (default `fake-model`).
- `FAKE_AGENT_SPEND`, `FAKE_AGENT_SPEND_REPORTS`, `FAKE_AGENT_SPEND_MS`: see `scenario_spend`.
- `FAKE_AGENT_STDERR_JSON=1`: `complete` also prints a protocol-looking failure to stderr.
- `FAKE_AGENT_CHECK_OVERLAP=1`: at start, record `{"_fake": "overlap", ...}` when another fake
  agent is already alive in the same working directory.
- `thread/resume` of the fake's thread succeeds (as if codex kept it on disk), unless
  `FAKE_AGENT_RESUME=fail`, which answers that no such thread exists.
- `FAKE_AGENT_IGNORE_EOF=1`, `FAKE_AGENT_IGNORE_SIGTERM=1`, `FAKE_AGENT_SPAWN_CHILD=1`: make
  `hang` as stubborn as a wedged agent (keeps running after stdin closes, ignores SIGTERM,
  owns a child process whose pid is recorded).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, NoReturn

Message = dict[str, Any]


def _through_proxy(target: str) -> str:
    """The status line `HTTPS_PROXY` answers a CONNECT to `target` with."""
    proxy = os.environ.get("HTTPS_PROXY", "").removeprefix("http://").rstrip("/")
    if not proxy:
        return "no proxy"
    host, port = proxy.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            return conn.recv(200).split(b"\r\n", 1)[0].decode()
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def _nonempty(data: bytes) -> None:
    """A masked file reads as nothing at all: that is not a successful read of it."""
    if not data:
        raise OSError("empty: nothing to read")


def _attempt(action: Any) -> str:
    """`ok`, or the error an attempt met."""
    try:
        action()
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return "ok"


THREAD_ID = "thr-fake-0001"
THREAD_USAGE_FILE = ".fake-thread-usage.json"
"""In the agent's working directory: the thread's token totals, as codex keeps its rollouts."""
HUGE_LINE_BYTES = 11 * 1024 * 1024


def now_ms() -> int:
    return int(time.time() * 1000)


class Protocol:
    """Line I/O with the client, and the record file."""

    def __init__(self) -> None:
        self.record_path = os.environ.get("FAKE_AGENT_RECORD")
        self.next_request_id = 0  # server request ids start at 0, as codex's do
        self.held: deque[Message] = deque()  # read while waiting for something else

    def record(self, entry: Message) -> None:
        if self.record_path:
            with open(self.record_path, "a", encoding="utf-8") as file:
                file.write(json.dumps(entry) + "\n")

    def write_line(self, text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def send(self, message: Message) -> None:
        self.write_line(json.dumps(message))

    def notify(self, method: str, params: Message) -> None:
        self.send({"method": method, "params": params, "emittedAtMs": now_ms()})

    def respond(self, request_id: Any, result: Any) -> None:
        self.send({"id": request_id, "result": result})

    def respond_error(self, request_id: Any, message: str, code: int = -32600) -> None:
        self.send({"id": request_id, "error": {"code": code, "message": message}})

    def read(self) -> Message | None:
        """The next client message (held ones first), or None at EOF."""
        if self.held:
            return self.held.popleft()
        while True:
            line = sys.stdin.readline()
            if not line:
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                print(f"fake: ignoring a line that is no message: {line[:80]!r}", file=sys.stderr)
                continue
            self.record(message)
            return message

    def request(self, method: str, params: Message) -> Message:
        """Send a server request and block until the client answers it."""
        request_id = self.next_request_id
        self.next_request_id += 1
        self.send({"id": request_id, "method": method, "params": params})
        deferred: list[Message] = []
        try:
            while True:
                message = self.read()
                if message is None:
                    at_eof()
                if message.get("id") == request_id and "method" not in message:
                    self.notify(
                        "serverRequest/resolved", {"threadId": THREAD_ID, "requestId": request_id}
                    )
                    return message
                deferred.append(message)
        finally:
            self.held.extend(deferred)

    def wait_for(self, method: str) -> Message:
        """Block until the client sends `method`, keeping other messages for later."""
        deferred: list[Message] = []
        try:
            while True:
                message = self.read()
                if message is None:
                    at_eof()
                if message.get("method") == method:
                    return message
                deferred.append(message)
        finally:
            self.held.extend(deferred)


def agents_in(cwd: str) -> list[int]:
    """Other live fake agents working in `cwd` (my own parent shell aside): two agents in one
    workspace at once is what a restart must never cause."""
    mine = {os.getpid(), os.getppid()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            if os.readlink(f"/proc/{entry}/cwd") != cwd:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                command = file.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as file:
                if file.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue  # dead, not yet reaped
        except OSError:
            continue
        # The python running this script, not a shell that launched one.
        if len(command) > 1 and command[1].endswith(b"fake_app_server.py"):
            found.append(int(entry))
    return found


def at_eof() -> NoReturn:
    if os.environ.get("FAKE_AGENT_IGNORE_EOF") == "1":
        while True:
            time.sleep(3600)
    sys.exit(0)


class Turn:
    """One turn: helpers that emit what codex emits, and the scenarios built from them."""

    def __init__(self, server: FakeAppServer, turn_id: str, prompt: str) -> None:
        self.server = server
        self.io = server.io
        self.turn_id = turn_id
        self.prompt = prompt
        self.items = 0

    # -- building blocks -------------------------------------------------------------------

    def ids(self) -> Message:
        return {"threadId": THREAD_ID, "turnId": self.turn_id}

    def next_item_id(self) -> str:
        self.items += 1
        return f"item-{self.turn_id}-{self.items}"

    def started(self) -> None:
        self.io.notify(
            "thread/status/changed",
            {"threadId": THREAD_ID, "status": {"type": "active", "activeFlags": []}},
        )
        self.io.notify("turn/started", {"threadId": THREAD_ID, "turn": self.turn_object()})
        item: Message = {"type": "userMessage", "id": self.next_item_id(), "content": []}
        self.io.notify("item/started", {**self.ids(), "item": item})
        item["content"] = [{"type": "text", "text": self.prompt, "text_elements": []}]
        self.io.notify("item/completed", {**self.ids(), "item": item})

    def turn_object(self, status: str = "inProgress", error: Message | None = None) -> Message:
        return {"id": self.turn_id, "status": status, "error": error, "items": []}

    def item(self, item: Message, *, completed: Message | None = None) -> None:
        self.io.notify("item/started", {**self.ids(), "item": item})
        self.io.notify("item/completed", {**self.ids(), "item": {**item, **(completed or {})}})

    def command(self, command: str) -> Message:
        item = {
            "type": "commandExecution",
            "id": self.next_item_id(),
            "command": command,
            "commandActions": [],
            "cwd": os.getcwd(),
            "status": "inProgress",
        }
        self.io.notify("item/started", {**self.ids(), "item": item})
        return item

    def agent_message(self, text: str) -> None:
        item_id = self.next_item_id()
        self.io.notify(
            "item/started",
            {**self.ids(), "item": {"type": "agentMessage", "id": item_id, "text": ""}},
        )
        self.io.notify("item/agentMessage/delta", {**self.ids(), "itemId": item_id, "delta": text})
        self.io.notify(
            "item/completed",
            {**self.ids(), "item": {"type": "agentMessage", "id": item_id, "text": text}},
        )

    def usage(self, input_tokens: int, output_tokens: int) -> None:
        last = self.server.add_usage(input_tokens, output_tokens)
        self.io.notify(
            "thread/tokenUsage/updated",
            {
                **self.ids(),
                "tokenUsage": {
                    "total": self.server.totals(),
                    "last": last,
                    "modelContextWindow": 272000,
                },
            },
        )

    def rate_limits(self) -> None:
        used = min(100, self.server.total_tokens // 10)
        self.io.notify(
            "account/rateLimits/updated",
            {
                "rateLimits": {
                    "limitId": "codex",
                    "primary": {"usedPercent": used, "windowDurationMins": 300, "resetsAt": None},
                    "secondary": None,
                    "credits": None,
                    "planType": None,
                }
            },
        )

    def finish(
        self, status: str = "completed", error_message: str | None = None, info: Any = None
    ) -> None:
        error = None
        if error_message is not None:
            error = {"message": error_message, "codexErrorInfo": info, "additionalDetails": None}
        self.io.notify("thread/status/changed", {"threadId": THREAD_ID, "status": {"type": "idle"}})
        turn = self.turn_object(status, error)
        turn["durationMs"] = 5
        self.io.notify("turn/completed", {"threadId": THREAD_ID, "turn": turn})

    # -- scenarios -------------------------------------------------------------------------

    def scenario_complete(self) -> None:
        self.started()
        self.usage(120, 30)
        self.rate_limits()
        if os.environ.get("FAKE_AGENT_STDERR_JSON") == "1":
            bogus = {
                "method": "turn/completed",
                "params": {
                    "threadId": THREAD_ID,
                    "turn": {**self.turn_object("failed"), "error": {"message": "from stderr"}},
                },
            }
            print(json.dumps(bogus), file=sys.stderr, flush=True)
        self.agent_message(f"done: {self.prompt[:60]}")
        self.usage(200, 45)
        self.rate_limits()
        self.finish()

    def scenario_tool(self) -> None:
        self.started()
        name = os.environ.get("FAKE_AGENT_TOOL", "echo_tool")
        arguments = json.loads(os.environ.get("FAKE_AGENT_TOOL_ARGS") or "{}")
        item = {
            "type": "dynamicToolCall",
            "id": self.next_item_id(),
            "tool": name,
            "arguments": arguments,
            "status": "inProgress",
        }
        self.io.notify("item/started", {**self.ids(), "item": item})
        reply = self.io.request(
            "item/tool/call",
            {
                **self.ids(),
                "callId": item["id"],
                "tool": name,
                "arguments": arguments,
                "namespace": None,
            },
        )
        result = reply.get("result")
        if not isinstance(result, dict):
            result = {}
        items = result.get("contentItems")
        if not isinstance(items, list) or not items or "text" not in items[0]:
            # What codex does with a reply lacking contentItems: the call fails, the turn goes on.
            self.io.notify("item/completed", {**self.ids(), "item": {**item, "status": "failed"}})
            self.agent_message("dynamic tool response was invalid")
        else:
            success = bool(result.get("success"))
            status = "completed" if success else "failed"
            self.io.notify("item/completed", {**self.ids(), "item": {**item, "status": status}})
            self.agent_message(f"tool {name} replied success={success}: {items[0]['text']}")
        self.usage(90, 20)
        self.finish()

    def scenario_approval(self) -> None:
        self.started()
        item = self.command("/bin/bash -lc 'echo hi > hello.txt'")
        reply = self.io.request(
            "item/commandExecution/requestApproval",
            {
                **self.ids(),
                "itemId": item["id"],
                "command": item["command"],
                "cwd": os.getcwd(),
                "reason": "needs to write outside the sandbox",
                "startedAtMs": now_ms(),
            },
        )
        decision = (reply.get("result") or {}).get("decision")
        if decision != "accept":
            self.io.notify("item/completed", {**self.ids(), "item": {**item, "status": "failed"}})
            self.finish("failed", f"command approval was not granted: {decision!r}")
            return
        self.io.notify(
            "item/completed", {**self.ids(), "item": {**item, "status": "completed", "exitCode": 0}}
        )
        patch = {
            "type": "fileChange",
            "id": self.next_item_id(),
            "changes": [],
            "status": "inProgress",
        }
        self.io.notify("item/started", {**self.ids(), "item": patch})
        reply = self.io.request(
            "item/fileChange/requestApproval",
            {**self.ids(), "itemId": patch["id"], "reason": None, "startedAtMs": now_ms()},
        )
        decision = (reply.get("result") or {}).get("decision")
        if decision != "accept":
            self.finish("failed", f"file change approval was not granted: {decision!r}")
            return
        self.io.notify("item/completed", {**self.ids(), "item": {**patch, "status": "completed"}})
        self.agent_message("approved and done")
        self.finish()

    def scenario_legacy_approval(self) -> None:
        self.started()
        reply = self.io.request(
            "execCommandApproval",
            {
                "conversationId": THREAD_ID,
                "callId": "call-legacy-1",
                "command": ["bash", "-lc", "make test"],
                "cwd": os.getcwd(),
                "parsedCmd": [],
            },
        )
        exec_decision = (reply.get("result") or {}).get("decision")
        reply = self.io.request(
            "applyPatchApproval",
            {"conversationId": THREAD_ID, "callId": "call-legacy-2", "fileChanges": {}},
        )
        patch_decision = (reply.get("result") or {}).get("decision")
        if exec_decision == patch_decision == "approved":
            self.agent_message("legacy approvals granted")
            self.finish()
        else:
            self.finish("failed", f"legacy approvals: {exec_decision!r}, {patch_decision!r}")

    def failed(self, message: str, info: Any) -> None:
        """A turn codex gave up on: the `error` notification, then the failed turn."""
        error = {"message": message, "codexErrorInfo": info, "additionalDetails": None}
        self.io.notify("error", {**self.ids(), "error": error, "willRetry": False})
        self.finish("failed", message, info)

    def scenario_fail(self) -> None:
        self.started()
        self.failed(
            "Codex ran out of room in the model's context window. Start a new thread or clear "
            "earlier history before retrying.",
            "contextWindowExceeded",
        )

    def scenario_usage_limit(self) -> None:
        self.started()
        now = int(time.time())
        reset = now + int(os.environ.get("FAKE_AGENT_RESET_S", "5"))
        self.io.notify(
            "account/rateLimits/updated",
            {
                "rateLimits": {
                    "limitId": "codex",
                    "primary": {"usedPercent": 100, "windowDurationMins": 300, "resetsAt": reset},
                    "secondary": {
                        "usedPercent": 40,
                        "windowDurationMins": 10080,
                        "resetsAt": now + 3 * 86400,
                    },
                    "credits": None,
                    "planType": "plus",
                    "rateLimitReachedType": "rate_limit_reached",
                }
            },
        )
        # Updates are sparse: this one leaves the used-up primary window standing.
        self.io.notify(
            "account/rateLimits/updated",
            {"rateLimits": {"limitId": "codex", "primary": None, "secondary": None}},
        )
        self.failed(
            "You've hit your usage limit. Upgrade to Pro or try again at 5:02 AM.",
            "usageLimitExceeded",
        )

    def scenario_rate_limited(self) -> None:
        self.started()
        self.failed(
            "exceeded retry limit, last status: 429 Too Many Requests",
            {"responseTooManyFailedAttempts": {"httpStatusCode": 429}},
        )

    def scenario_overloaded(self) -> None:
        self.started()
        self.failed(
            "Selected model is at capacity. Please try a different model.", "serverOverloaded"
        )

    def scenario_outage(self) -> None:
        self.started()
        self.failed(
            "We're currently experiencing high demand, which may cause temporary errors.",
            "internalServerError",
        )

    def scenario_interrupted(self) -> None:
        self.started()
        self.finish("interrupted")

    def scenario_input(self) -> None:
        self.started()
        self.io.request(
            "item/tool/requestUserInput",
            {
                **self.ids(),
                "itemId": self.next_item_id(),
                "isBlocking": True,
                "questions": [
                    {
                        "id": "q1",
                        "header": "Confirm",
                        "question": "Should I drop the production table?",
                        "isOther": False,
                        "isSecret": False,
                        "options": [{"label": "yes", "description": "go ahead"}],
                    }
                ],
            },
        )
        interrupt = self.io.wait_for("turn/interrupt")
        self.io.respond(interrupt["id"], {})
        self.finish("interrupted")

    def scenario_hang(self) -> None:
        spawn = os.environ.get("FAKE_AGENT_SPAWN_CHILD")
        if spawn in ("1", "setsid"):
            # `setsid`: a child that leaves the agent's process group, as daemonizing tools do.
            child = subprocess.Popen(["sleep", "600"], start_new_session=spawn == "setsid")
            self.io.record({"_fake": "child", "pid": child.pid})
        while self.io.read() is not None:
            pass  # heard, never answered
        at_eof()

    def scenario_busy(self) -> None:
        """Start a turn, use some tokens, say something, then work on without ever finishing."""
        self.started()
        self.usage(120, 30)
        self.agent_message("still working on it")
        self.scenario_hang()

    def scenario_crash(self) -> None:
        self.started()
        self.command("cargo build")
        print("thread 'main' panicked at core/src/codex.rs:42: simulated crash", file=sys.stderr)
        print("note: run with `RUST_BACKTRACE=1` for a backtrace", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(3)

    def scenario_malformed(self) -> None:
        self.started()
        self.io.write_line("this line is not JSON {")
        # Valid JSON, but longer than any client should buffer.
        filler = "x" * HUGE_LINE_BYTES
        self.io.write_line(
            '{"method":"item/agentMessage/delta","params":{"delta":"' + filler + '"}}'
        )
        self.agent_message("survived the noise")
        self.finish()

    def scenario_unknown_request(self) -> None:
        self.started()
        reply = self.io.request("item/somethingNew/request", {**self.ids(), "detail": "new"})
        if "error" in reply:
            self.agent_message(f"client declined: {reply['error'].get('message')}")
            self.finish()
        else:
            self.finish("failed", "expected an error reply to an unknown request")

    def scenario_write_file(self) -> None:
        self.started()
        name = os.environ.get("FAKE_AGENT_FILE", "agent-output.txt")
        item = self.command(f"/bin/bash -lc 'cat > {name}'")
        Path(name).write_text(self.prompt, encoding="utf-8")
        self.io.notify(
            "item/completed", {**self.ids(), "item": {**item, "status": "completed", "exitCode": 0}}
        )
        self.agent_message(f"wrote {name}")
        self.usage(60, 10)
        self.finish()

    def scenario_probe(self) -> None:
        """A hostile agent: try each probe of `FAKE_AGENT_PROBES` (JSON: `read`, `write`,
        `connect` lists of paths and `host:port`s; `shell` commands run in the workspace;
        `leave` a marker for a process left running) and write what each attempt got into
        `report` (default `probe.json` in the workspace)."""
        self.started()
        probes = json.loads(os.environ.get("FAKE_AGENT_PROBES", "{}"))
        results: dict[str, str] = {}
        for path in probes.get("read", []):
            results[f"read {path}"] = _attempt(lambda p=path: _nonempty(Path(p).read_bytes()))
        for path in probes.get("write", []):
            results[f"write {path}"] = _attempt(lambda p=path: Path(p).write_text("pwned"))
        for target in probes.get("connect", []):
            host, port = target.rsplit(":", 1)
            results[f"connect {target}"] = _attempt(
                lambda h=host, p=int(port): socket.create_connection((h, p), timeout=2).close()
            )
        for target in probes.get("proxy", []):
            results[f"proxy {target}"] = _through_proxy(target)
        for command in probes.get("shell", []):
            done = subprocess.run(["sh", "-c", command], capture_output=True, check=False)
            results[f"shell {command}"] = "ok" if done.returncode == 0 else "refused"
        results["environ"] = " ".join(sorted(os.environ))
        if probes.get("leave"):
            sleep = shutil.which("sleep") or "/bin/sleep"
            subprocess.Popen([probes["leave"], "300"], executable=sleep, start_new_session=True)
        report = Path(os.path.expandvars(probes.get("report", "probe.json")))
        report.write_text(json.dumps(results), encoding="utf-8")
        self.agent_message("probed")
        self.usage(60, 10)
        self.finish()

    def scenario_slow(self) -> None:
        self.started()
        duration_s = int(os.environ.get("FAKE_AGENT_DURATION_MS", "500")) / 1000
        item = self.command("sleep-ish")
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            # Listening meanwhile, as codex does: a stop interrupts the turn at once rather than
            # waiting out its grace periods.
            if self.interrupted_within(0.05):
                self.finish("interrupted")
                return
            self.io.notify(
                "item/commandExecution/outputDelta",
                {**self.ids(), "itemId": item["id"], "delta": "."},
            )
        self.io.notify("item/completed", {**self.ids(), "item": {**item, "status": "completed"}})
        self.agent_message("slow and steady")
        self.finish()

    def scenario_stream(self) -> None:
        rate = float(os.environ.get("FAKE_AGENT_STREAM_RATE", "0"))
        if rate > 0:
            duration_s = int(os.environ.get("FAKE_AGENT_DURATION_MS", "500")) / 1000
            count = max(1, round(rate * duration_s))
        else:
            count = int(os.environ.get("FAKE_AGENT_STREAM_LINES", "10000"))
        item_id = f"item-{self.turn_id}-stream"
        cycle = self.stream_cycle(item_id)
        blob = b"".join(cycle[n % len(cycle)] for n in range(count))
        self.started()
        self.io.notify(
            "item/started",
            {
                **self.ids(),
                "item": {"type": "commandExecution", "id": item_id, "command": "pytest -q"},
            },
        )
        if rate <= 0:
            sys.stdout.buffer.write(blob)
            sys.stdout.buffer.flush()
        else:
            ends = list(itertools.accumulate(len(cycle[n % len(cycle)]) for n in range(count)))
            if not self.paced_write(blob, ends, rate):
                self.finish("interrupted")
                return
        self.agent_message("streamed")
        self.usage(300, 80)
        self.finish()

    def paced_write(self, blob: bytes, ends: list[int], rate: float) -> bool:
        """Write the lines of `blob` (line n ends at `ends[n]`) at `rate` per second; False when
        the client interrupted the turn meanwhile (answered here, as codex does)."""
        tick_s = int(os.environ.get("FAKE_AGENT_STREAM_TICK_MS", "0")) / 1000
        out = sys.stdout.buffer
        began = time.monotonic()
        sent = 0
        while sent < len(ends):
            wrote_at = time.monotonic()
            due = min(len(ends), int((wrote_at - began) * rate) + 1)
            if due > sent:
                out.write(blob[ends[sent - 1] if sent else 0 : ends[due - 1]])
                out.flush()
                sent = due
            wake = max(began + sent / rate, wrote_at + tick_s)
            if self.interrupted_within(wake - time.monotonic()):
                return False
        return True

    def interrupted_within(self, seconds: float) -> bool:
        """Wait on stdin (not a sleep: the turn stays interruptible); True when the client
        interrupted the turn meanwhile (answered here, as codex does)."""
        readable, _, _ = select.select([sys.stdin], [], [], max(0.0, seconds))
        if not readable:
            return False
        held, self.io.held = self.io.held, deque()  # what is readable is new input
        message = self.io.read()
        self.io.held = held
        if message is None:
            at_eof()
        if message.get("method") == "turn/interrupt":
            self.io.respond(message.get("id"), {})
            return True
        self.io.held.append(message)
        return False

    def scenario_spend(self) -> None:
        """Report usage every FAKE_AGENT_SPEND_MS (default 50): FAKE_AGENT_SPEND more input and
        output tokens each time (default `100000,10000`), FAKE_AGENT_SPEND_REPORTS times
        (default 0: until interrupted), recording each report's totals; then complete."""
        self.started()
        per_input, per_output = (
            int(n) for n in os.environ.get("FAKE_AGENT_SPEND", "100000,10000").split(",")
        )
        reports = int(os.environ.get("FAKE_AGENT_SPEND_REPORTS", "0"))
        interval_s = int(os.environ.get("FAKE_AGENT_SPEND_MS", "50")) / 1000
        sent = 0
        while reports == 0 or sent < reports:
            self.usage(per_input, per_output)
            sent += 1
            totals = [self.server.input_tokens, self.server.output_tokens]
            self.io.record({"_fake": "usage", "report": sent, "totals": totals})
            if self.interrupted_within(interval_s):
                self.io.record({"_fake": "interrupted", "after_report": sent})
                self.finish("interrupted")
                return
        self.agent_message(f"spent {sent} reports' worth")
        self.finish()

    def stream_cycle(self, item_id: str) -> list[bytes]:
        """A repeating mix of what a busy codex turn streams: message, reasoning and command
        output deltas (`FAKE_AGENT_STREAM_DELTAS` of them), then item boundaries, token usage
        and rate limits."""
        words = "Running the focused tests again after narrowing the fix to the parser"
        message_id = f"item-{self.turn_id}-message"
        deltas: list[Message] = []
        for n in range(8):
            delta = " ".join(words.split()[n : n + 3]) + " "
            deltas.append(
                {
                    "method": "item/agentMessage/delta",
                    "params": {**self.ids(), "itemId": message_id, "delta": delta},
                }
            )
        for n in range(6):
            output = f"tests/test_parser.py::test_case_{n} PASSED [{n * 16:3d}%]\n"
            deltas.append(
                {
                    "method": "item/commandExecution/outputDelta",
                    "params": {**self.ids(), "itemId": item_id, "delta": output},
                }
            )
        for delta in ("**Checking edge cases**", " around empty input"):
            deltas.append(
                {
                    "method": "item/reasoning/summaryTextDelta",
                    "params": {
                        **self.ids(),
                        "itemId": f"item-{self.turn_id}-reasoning",
                        "delta": delta,
                        "summaryIndex": 0,
                    },
                }
            )
        count = int(os.environ.get("FAKE_AGENT_STREAM_DELTAS", "16"))
        lines = [deltas[n % len(deltas)] for n in range(count)]
        probe: Message = {
            "type": "commandExecution",
            "id": f"item-{self.turn_id}-probe",
            "command": "/bin/bash -lc 'git status --short'",
            "commandActions": [],
            "cwd": os.getcwd(),
            "status": "inProgress",
        }
        lines.append({"method": "item/started", "params": {**self.ids(), "item": probe}})
        done = {**probe, "status": "completed", "exitCode": 0, "aggregatedOutput": " M a.py\n"}
        lines.append({"method": "item/completed", "params": {**self.ids(), "item": done}})
        lines.append(
            {
                "method": "thread/tokenUsage/updated",
                "params": {
                    **self.ids(),
                    "tokenUsage": {
                        "total": self.server.breakdown(48_000, 2_400),
                        "last": self.server.breakdown(1_200, 60),
                        "modelContextWindow": 272000,
                    },
                },
            }
        )
        limits = {"usedPercent": 12, "windowDurationMins": 300, "resetsAt": None}
        lines.append(
            {
                "method": "account/rateLimits/updated",
                "params": {
                    "rateLimits": {
                        "limitId": "codex",
                        "primary": limits,
                        "secondary": None,
                        "credits": None,
                        "planType": None,
                    }
                },
            }
        )
        stamp = now_ms()
        return [(json.dumps({**line, "emittedAtMs": stamp}) + "\n").encode() for line in lines]


class FakeAppServer:
    def __init__(self) -> None:
        self.io = Protocol()
        self.scenarios = [
            name.strip()
            for name in os.environ.get("FAKE_AGENT_SCENARIO", "complete").split(",")
            if name.strip()
        ] or ["complete"]
        self.initialized = False
        self.experimental = False
        self.thread_started = False
        self.turns = 0
        self.input_tokens = 0
        self.output_tokens = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add_usage(self, input_tokens: int, output_tokens: int) -> Message:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        # Codex keeps a thread's totals on disk: a resumed thread reports them cumulatively.
        with open(THREAD_USAGE_FILE, "w", encoding="utf-8") as file:
            json.dump([self.input_tokens, self.output_tokens], file)
        return self.breakdown(input_tokens, output_tokens)

    def totals(self) -> Message:
        return self.breakdown(self.input_tokens, self.output_tokens)

    @staticmethod
    def breakdown(input_tokens: int, output_tokens: int) -> Message:
        return {
            "inputTokens": input_tokens,
            "cachedInputTokens": input_tokens // 4,
            "cacheWriteInputTokens": 0,
            "outputTokens": output_tokens,
            "reasoningOutputTokens": output_tokens // 3,
            "totalTokens": input_tokens + output_tokens,
        }

    def run(self) -> NoReturn:
        if os.environ.get("FAKE_AGENT_IGNORE_SIGTERM") == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        names = [n for n in os.environ.get("FAKE_AGENT_RECORD_ENV", "").split(",") if n]
        self.io.record(
            {
                "_fake": "started",
                "pid": os.getpid(),
                "cwd": os.getcwd(),
                "argv": sys.argv,
                "env_names": sorted(os.environ),
                "env": {name: os.environ.get(name) for name in names},
            }
        )
        if os.environ.get("FAKE_AGENT_CHECK_OVERLAP") == "1":
            others = agents_in(os.getcwd())
            if others:
                self.io.record({"_fake": "overlap", "pid": os.getpid(), "others": others})
        print("fake-app-server: starting (logs go to stderr)", file=sys.stderr, flush=True)
        while True:
            message = self.io.read()
            if message is None:
                at_eof()
            self.handle(message)

    def handle(self, message: Message) -> None:
        method = message.get("method")
        request_id = message.get("id")
        if method is None:
            return  # a reply nobody waits for
        if request_id is None:
            if method == "initialized":
                self.io.notify(
                    "configWarning",
                    {"summary": "fake app-server: no model behind this agent", "details": None},
                )
            return
        params = message.get("params") or {}
        if method == "initialize":
            self.initialize(request_id, params)
        elif not self.initialized:
            self.io.respond_error(request_id, "Not initialized")
        elif method == "thread/start":
            self.thread_start(request_id, params)
        elif method == "thread/resume":
            self.thread_resume(request_id, params)
        elif method == "turn/start":
            self.turn_start(request_id, params)
        elif method == "turn/interrupt":
            self.io.respond(request_id, {})  # nothing is running between turns
        else:
            self.io.respond_error(request_id, f"Invalid request: unknown variant `{method}`")

    def initialize(self, request_id: Any, params: Message) -> None:
        if self.initialized:
            self.io.respond_error(request_id, "Already initialized")
            return
        self.initialized = True
        self.experimental = bool((params.get("capabilities") or {}).get("experimentalApi"))
        self.io.respond(
            request_id,
            {
                "userAgent": "fake_app_server/0.171.0",
                "codexHome": os.path.join(os.getcwd(), ".codex"),
                "platformFamily": "unix",
                "platformOs": "linux",
            },
        )

    def thread_start(self, request_id: Any, params: Message) -> None:
        if params.get("dynamicTools") is not None and not self.experimental:
            self.io.respond_error(
                request_id, "thread/start.dynamicTools requires experimentalApi capability"
            )
            return
        cwd = params.get("cwd") or os.getcwd()
        thread: Message = {
            "id": THREAD_ID,
            "sessionId": THREAD_ID,
            "path": None,
            "cwd": cwd,
            "ephemeral": False,
            "preview": "",
            "status": {"type": "idle"},
            "turns": [],
        }
        self.thread_started = True
        self.io.respond(
            request_id,
            {
                "thread": thread,
                "model": os.environ.get("FAKE_AGENT_MODEL", "fake-model"),
                "modelProvider": "fake",
                "cwd": cwd,
                "approvalPolicy": params.get("approvalPolicy", "never"),
                "approvalsReviewer": "user",
                "sandbox": {
                    "type": "workspaceWrite",
                    "writableRoots": [cwd],
                    "networkAccess": False,
                },
            },
        )
        self.io.notify("thread/started", {"thread": thread})

    def thread_resume(self, request_id: Any, params: Message) -> None:
        # The fake's one thread, kept "on disk" across processes, unless told it is gone.
        if params.get("threadId") != THREAD_ID or os.environ.get("FAKE_AGENT_RESUME") == "fail":
            self.io.respond_error(
                request_id, f"no rollout found for thread {params.get('threadId')}"
            )
            return
        with (
            contextlib.suppress(OSError, ValueError),
            open(THREAD_USAGE_FILE, encoding="utf-8") as file,
        ):
            self.input_tokens, self.output_tokens = json.load(file)
        self.thread_start(request_id, {k: v for k, v in params.items() if k != "threadId"})

    def turn_start(self, request_id: Any, params: Message) -> None:
        if not self.thread_started or params.get("threadId") != THREAD_ID:
            self.io.respond_error(request_id, f"thread not found: {params.get('threadId')}")
            return
        self.turns += 1
        turn_id = f"turn-{self.turns:04d}"
        prompt = "".join(
            part.get("text", "")
            for part in params.get("input") or []
            if isinstance(part, dict) and part.get("type") == "text"
        )
        turn = Turn(self, turn_id, prompt)
        self.io.respond(request_id, {"turn": turn.turn_object()})
        scenario = self.scenarios[min(self.turns, len(self.scenarios)) - 1]
        run = getattr(turn, f"scenario_{scenario}", None)
        if run is None:
            print(f"fake: unknown scenario {scenario!r}", file=sys.stderr, flush=True)
            sys.exit(2)
        run()


if __name__ == "__main__":
    FakeAppServer().run()
