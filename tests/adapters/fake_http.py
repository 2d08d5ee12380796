"""Serving an in-memory fake tracker API over real HTTP on 127.0.0.1, for end-to-end tests.

A fake answers `handle(method, path, headers, body) -> (status, headers, json_or_None)` (or
bytes, sent as they are with the fake's own `Content-Type`); this module does the socket side
once for every tracker's fake, and records the traffic as the provider would see it (arrival
times, requests in flight at once) in `fake.traffic`, so a test can hold the daemon to a
provider's documented limits.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeVar


class FakeApi(Protocol):
    base: str

    def handle(
        self, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]: ...


F = TypeVar("F", bound=FakeApi)


@dataclass
class Traffic:
    """What arrived when: `(monotonic arrival time, method, path)`, and the most in flight."""

    arrivals: list[tuple[float, str, str]] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def most_in_window(self, window_s: float, weight: Callable[[str, str], int]) -> int:
        """The largest total `weight(method, path)` of arrivals in any `window_s` seconds."""
        arrivals = sorted(self.arrivals)
        most = total = 0
        first = 0
        for at, method, path in arrivals:
            total += weight(method, path)
            while arrivals[first][0] <= at - window_s:
                total -= weight(arrivals[first][1], arrivals[first][2])
                first += 1
            most = max(most, total)
        return most


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApi
    traffic: Traffic

    def _serve(self) -> None:
        traffic = self.traffic
        with traffic.lock:
            traffic.arrivals.append((time.monotonic(), self.command, self.path))
            traffic.in_flight += 1
            traffic.peak_in_flight = max(traffic.peak_in_flight, traffic.in_flight)
        try:
            self._answer()
        finally:
            with traffic.lock:
                traffic.in_flight -= 1

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out, answer = self.fake.handle(self.command, self.path, headers, body)
        # Bytes are sent as they are (a job log); anything else is JSON.
        raw_answer = isinstance(answer, bytes)
        data = answer if raw_answer else b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        for key, value in out.items():
            self.send_header(key, value)
        if data and not raw_answer:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet


@contextmanager
def serve(fake: F, prefix: str = "") -> Iterator[F]:
    """Run `fake` on 127.0.0.1 with an ephemeral port; `fake.base` becomes its URL + `prefix`."""
    traffic = Traffic()
    fake.traffic = traffic  # type: ignore[attr-defined]
    handler = type("Handler", (_Handler,), {"fake": fake, "traffic": traffic})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    fake.base = f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    # Polled every 50 ms rather than 500: shutdown waits for the next poll, on every test.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
