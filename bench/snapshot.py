"""Status-surface benchmark: `/api/v1/state` latency, and the tick with a dashboard open.

A real orchestrator on a local board of 100 tickets runs 100 sessions at once; each session is an
in-process agent that reports 10 events a second (1,000 events/s reach the orchestrator's queue,
as coalesced agent events would). The HTTP server runs in the daemon's event loop, as it does in
production; clients run in separate processes so they take no time from that loop.

Four windows of the same length; in the first three the daemon ticks every 200 ms (150 times
its default rate) so that tick durations (its own `last_tick_ms`) can be compared:
  1. baseline: no client;
  2. dashboard open: one client reading the server-sent snapshot stream, as the page does;
  3. API load: the stream plus a client sending `GET /api/v1/state` 50 times a second;
  4. the same load after WORKFLOW.md is edited back to the default 30 s poll.
Request latencies are round trips from the polling client (windows 3 and 4).
Run: `python bench/snapshot.py` (targets: p99 < 5 ms; the tick unchanged within the baseline's
spread while the dashboard is open).
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from symphony.agents import AgentError, AgentLaunch, TurnResult
from symphony.base.events import AgentEvent, TokenUsage
from symphony.cli import loop
from symphony.config.load import load_settings
from symphony.daemon.orchestrator import Orchestrator
from symphony.observability.logging import configure_logging
from symphony.observability.server import create_app, serve
from tests.harness import Board

SESSIONS = 100
EVENTS_PER_SESSION_S = 10
FAST_POLL_MS = 200
DEFAULT_POLL_MS = 30_000
WINDOW_S = 15.0
STATE_REQUESTS_PER_S = 50
P99_TARGET_MS = 5.0


class StreamingSession:
    """An agent that never finishes its turn and reports a steady stream of events."""

    counter = 0
    resumed = False

    def __init__(self, launch: AgentLaunch) -> None:
        self._emit = launch.on_event
        self._stopped = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return None

    async def start(self) -> None:
        self._emit(AgentEvent("session_started", thread_id="bench"))

    async def run_turn(self, prompt: str, *, title: str) -> TurnResult:
        self._emit(AgentEvent("turn_started", session_id="bench-turn", message=title))
        interval, tokens = 1 / EVENTS_PER_SESSION_S, 0
        while not self._stopped.is_set():
            await asyncio.sleep(interval)
            tokens += 40
            if tokens % 400 == 0:
                usage = TokenUsage(tokens // 2, tokens // 2, tokens)
                self._emit(AgentEvent("token_usage", usage=usage))
            else:
                self._emit(AgentEvent("notification", message=f"item/agentMessage/delta {tokens}"))
            StreamingSession.counter += 1
        raise AgentError("turn_failed", "stopped")

    async def stop(self) -> None:
        self._stopped.set()


@dataclass
class Window:
    ticks_ms: list[float]
    events_per_s: float
    latencies_ms: list[float] | None = None
    sse_snapshots: int | None = None


class TickSampler:
    """Collects each finished tick's duration, read from the daemon's health after a pass."""

    def __init__(self, orchestrator: Orchestrator) -> None:
        self.ticks_ms: list[float] = []
        self._health = orchestrator.health
        self._seen = self._health.last_tick_at
        orchestrator.view.add_listener(self._on_change)

    def _on_change(self) -> None:
        if self._health.last_tick_at != self._seen and self._health.last_tick_ms is not None:
            self._seen = self._health.last_tick_at
            self.ticks_ms.append(self._health.last_tick_ms)

    async def window(self, seconds: float) -> Window:
        ticks, events = len(self.ticks_ms), StreamingSession.counter
        await asyncio.sleep(seconds)
        return Window(self.ticks_ms[ticks:], (StreamingSession.counter - events) / seconds)


async def client(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, __file__, *args, stdout=subprocess.PIPE
    )


async def run() -> list[tuple[str, Window]]:
    with tempfile.TemporaryDirectory() as folder:
        board = Board(Path(folder))
        for n in range(SESSIONS):
            board.ticket(f"SNAP-{n}")
        board.write_workflow(agent={"max_concurrent_agents": SESSIONS}, polling_ms=FAST_POLL_MS)
        settings = load_settings(board.workflow, {})
        orchestrator = Orchestrator(
            settings, environ={}, session_factory=StreamingSession, watch=False
        )
        task = asyncio.create_task(orchestrator.run())
        http = await serve(create_app(orchestrator.view), "127.0.0.1", 0)
        sampler = TickSampler(orchestrator)
        windows: list[tuple[str, Window]] = []
        try:
            while sum(1 for e in orchestrator.state.running.values() if e.turn_count) < SESSIONS:
                if task.done():
                    task.result()
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # warm up: every session streaming, recent events full
            windows.append(("baseline, no client", await sampler.window(WINDOW_S)))

            stream = await client("--sse", http.url, str(WINDOW_S * 3 + 6))
            await asyncio.sleep(1.0)
            dashboard = await sampler.window(WINDOW_S)
            windows.append(("dashboard open (SSE)", dashboard))
            windows.append(("SSE + GET/s", await polled(sampler, http.url)))

            # The daemon's default poll interval, applied the way an operator would: by editing
            # WORKFLOW.md, which the next tick reloads.
            board.write_workflow(
                agent={"max_concurrent_agents": SESSIONS}, polling_ms=DEFAULT_POLL_MS
            )
            orchestrator.request_refresh()
            await asyncio.sleep(1.0)
            assert orchestrator.settings.polling.interval_ms == DEFAULT_POLL_MS
            windows.append(("SSE + GET/s, 30 s poll", await polled(sampler, http.url)))
            out, _ = await stream.communicate()
            dashboard.sse_snapshots = int(out)
        finally:
            await http.stop()
            orchestrator.stop()
            await task
    return windows


async def polled(sampler: TickSampler, url: str) -> Window:
    poller = await client("--poll", url, str(WINDOW_S))
    window = await sampler.window(WINDOW_S)
    out, _ = await poller.communicate()
    window.latencies_ms = json.loads(out)
    return window


def quantile(samples: list[float], q: float) -> float:
    if not samples:
        return math.nan
    ordered = sorted(samples)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def report(windows: list[tuple[str, Window]]) -> None:
    asked = SESSIONS * EVENTS_PER_SESSION_S
    print(f"{SESSIONS} sessions streaming, {asked:,} events/s asked")
    print(f"Tick duration, a tick every {FAST_POLL_MS} ms:")
    base = windows[0][1].ticks_ms
    spread = quantile(base, 0.75) - quantile(base, 0.25)
    for label, window in windows[:3]:
        delta = quantile(window.ticks_ms, 0.5) - quantile(base, 0.5)
        verdict = "" if window is windows[0][1] else f"  {delta:+.2f} ms"
        if verdict:
            verdict += ": unchanged" if abs(delta) <= spread else ": CHANGED"
        print(
            f"  {label:<22} p50 {quantile(window.ticks_ms, 0.5):6.2f} ms  "
            f"p90 {quantile(window.ticks_ms, 0.9):6.2f} ms  ({len(window.ticks_ms)} ticks, "
            f"{window.events_per_s:,.0f} events/s){verdict}"
        )
    print(f"  (unchanged = within the baseline's interquartile spread, {spread:.2f} ms)")
    sse = windows[1][1].sse_snapshots
    print(f"  snapshots the open dashboard received: {sse} in {WINDOW_S * 3 + 6:.0f} s")
    print(f"GET /api/v1/state at {STATE_REQUESTS_PER_S}/s, with the dashboard open:")
    for label, poll_ms in ((windows[2][0], FAST_POLL_MS), (windows[3][0], DEFAULT_POLL_MS)):
        latencies = dict(windows)[label].latencies_ms or []
        p99 = quantile(latencies, 0.99)
        verdict = "met" if p99 < P99_TARGET_MS else "MISSED"
        print(
            f"  a tick every {poll_ms / 1000:g} s: p50 {quantile(latencies, 0.5):.2f} ms  "
            f"p99 {p99:.2f} ms  max {max(latencies):.2f} ms  ({len(latencies)} requests; "
            f"target p99 < {P99_TARGET_MS:g} ms: {verdict})"
        )


# Client processes


def poll_state(url: str, seconds: float) -> None:
    """GET /api/v1/state over one kept-alive connection; prints the round trips in ms.

    A bare socket rather than an HTTP library, so the figures are the server's and the wire's,
    not the client's own parsing.
    """
    parts = urlsplit(url)
    request = f"GET /api/v1/state HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    latencies: list[float] = []
    with socket.create_connection((parts.hostname, parts.port)) as conn:
        reader = conn.makefile("rb")

        def get() -> bytes:
            conn.sendall(request)
            status = reader.readline()
            length = 0
            while (header := reader.readline()) != b"\r\n":
                name, _, value = header.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            body = reader.read(length)
            assert status.startswith(b"HTTP/1.1 200"), status
            return body

        get()  # connect and warm up outside the measurement
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            body = get()
            latencies.append((time.perf_counter() - started) * 1000)
            assert json.loads(body)["counts"]["running"] == SESSIONS
            time.sleep(max(1 / STATE_REQUESTS_PER_S - (time.perf_counter() - started), 0))
    print(json.dumps(latencies))


def read_stream(url: str, seconds: float) -> None:
    import httpx

    received, end = 0, time.monotonic() + seconds
    with (
        httpx.Client(base_url=url, timeout=5) as http,
        http.stream("GET", "/api/v1/events") as stream,
    ):
        for line in stream.iter_lines():
            if line.startswith("data: "):
                json.loads(line[6:])  # a page parses every snapshot too
                received += 1
            if time.monotonic() > end:
                break
    print(received)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--poll":
        poll_state(sys.argv[2], float(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "--sse":
        read_stream(sys.argv[2], float(sys.argv[3]))
    else:
        configure_logging(level="warning", stream=io.StringIO())
        report(loop.run(run()))


if __name__ == "__main__":
    main()
