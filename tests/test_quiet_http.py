"""The fakes' HTTP server: a client gone mid-answer prints nothing, any other error still does."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from tests.fakes.quiet_http import QuietHTTPServer

handled = threading.Event()


class Streaming(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        try:
            if self.path == "/broken":
                raise ValueError("a fake's own bug")
            self.send_response(200)
            self.end_headers()
            for _ in range(2000):  # streams on after the client has gone
                self.wfile.write(b"data: x" * 1024 + b"\n")
                time.sleep(0.001)
        finally:
            handled.set()


@contextmanager
def serving() -> Iterator[int]:
    server = QuietHTTPServer(("127.0.0.1", 0), Streaming)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def ask(port: int, path: str) -> None:
    handled.clear()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        client.recv(1024)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    assert handled.wait(10)
    time.sleep(0.05)  # handle_error runs after the handler returns


def test_a_client_gone_mid_answer_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with serving() as port:
        ask(port, "/stream")
    assert capsys.readouterr().err == ""


def test_any_other_error_is_still_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with serving() as port:
        ask(port, "/broken")
    assert "ValueError: a fake's own bug" in capsys.readouterr().err
