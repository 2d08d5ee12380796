"""Receivers on 127.0.0.1 for the notification channels: an HTTP endpoint standing in for a
Slack incoming webhook or a team's webhook (it records every request and can fail or hang on
purpose), and a real SMTP server (aiosmtpd) that requires STARTTLS with a certificate from a
throwaway authority and a login."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

from tests.fakes.quiet_http import QuietHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HookReceiver:
    """Answers 200, or 500 for the next `fail` requests, or never answers while `hang`."""

    fail: int = 0
    hang: threading.Event | None = None
    received: list[Received] = field(default_factory=list)
    attempts: int = 0
    url: str = ""

    def taken(self) -> list[Received]:
        return list(self.received)


@contextmanager
def hook_receiver(**options: Any) -> Iterator[HookReceiver]:
    receiver = HookReceiver(**options)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                receiver.attempts += 1
                failing = receiver.fail > 0
                if failing:
                    receiver.fail -= 1
            if receiver.hang is not None:
                receiver.hang.wait(60)
                return
            if failing:
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"receiver down for maintenance")
                return
            with lock:
                receiver.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    # Polled every 50 ms rather than 500: shutdown waits for the next poll, on every test.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield receiver
    finally:
        if receiver.hang is not None:
            receiver.hang.set()
        server.shutdown()
        server.server_close()


@dataclass
class MailServer:
    host: str
    port: int
    ca_file: Path
    username: str
    password: str
    messages: list[Envelope] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    tls_sessions: int = 0


@contextmanager
def mail_server(
    tmp: Path, *, username: str = "bot", password: str = "mail-pass"
) -> Iterator[MailServer]:
    import trustme  # only the mail tests need it

    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    ca_file = tmp / "mail-ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate.configure_cert(context)
    with socket.socket() as probe:  # aiosmtpd's controller needs a port number up front
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    box = MailServer("127.0.0.1", port, ca_file, username, password)

    class Handler:
        async def handle_DATA(
            self, server: SMTPServer, session: Session, envelope: Envelope
        ) -> str:
            box.messages.append(envelope)
            return "250 OK"

        def handle_STARTTLS(  # aiosmtpd calls it without awaiting
            self, server: SMTPServer, session: Session, envelope: Envelope
        ) -> bool:
            box.tls_sessions += 1
            return True

    def authenticate(
        server: SMTPServer, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login.decode(), data.password.decode()) == (
            username,
            password,
        )
        if ok:
            box.logins.append(data.login.decode())
        return AuthResult(success=ok, handled=False)

    controller = Controller(
        Handler(), hostname="127.0.0.1", port=port, tls_context=context, require_starttls=True,
        authenticator=authenticate, auth_require_tls=True,
    )  # fmt: skip
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
