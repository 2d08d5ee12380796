"""Serving an in-memory fake tracker API over real HTTP on 127.0.0.1, for end-to-end tests.

A fake answers `handle(method, path, headers, body) -> (status, headers, json_or_None)`; this
module does the socket side once for every tracker's fake.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeVar


class FakeApi(Protocol):
    base: str

    def handle(
        self, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]: ...


F = TypeVar("F", bound=FakeApi)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApi

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out, answer = self.fake.handle(self.command, self.path, headers, body)
        data = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        for key, value in out.items():
            self.send_header(key, value)
        if data:
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
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    fake.base = f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
