"""A real smart-HTTP git server on 127.0.0.1: git's own `git http-backend` run as a CGI for
each request, behind HTTP basic authentication with one accepted token, so a push through it
really needs the daemon's credential. It records the credentials every request carried."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


class GitHttpServer:
    def __init__(self, root: Path, username: str, token: str) -> None:
        self.root = root
        self.expected = "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode()
        self.seen: list[str | None] = []
        """The Authorization header of every request, as sent."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                server._serve(self)

            def do_POST(self) -> None:
                server._serve(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def url(self, repository: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/{repository}"

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        auth = request.headers.get("Authorization")
        self.seen.append(auth)
        if auth != self.expected:
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="git"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        parts = urlsplit(request.path)
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "symphony",
            "REQUEST_METHOD": request.command,
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": request.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
        }
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        request.send_response(status)
        for name, value in headers:
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)


@contextmanager
def git_http_server(root: Path, username: str, token: str) -> Iterator[GitHttpServer]:
    server = GitHttpServer(root, username, token)
    # Polled every 50 ms rather than 500: shutdown waits for the next poll.
    thread = threading.Thread(
        target=server.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
