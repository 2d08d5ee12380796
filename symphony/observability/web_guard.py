"""What the HTTP server accepts before any route sees a request: the names it answers to, where
a state-changing request may come from, and the headers every answer carries.

A page on another site can make a person's browser talk to this server: by a DNS name that
resolves to 127.0.0.1 (DNS rebinding), by framing a page to trick a click, or by posting a
form. So the server answers only its own host names (on loopback: `localhost`, `127.*`,
`[::1]`, unless `server.allowed_hosts` says more), refuses a POST whose `Origin` or
`Sec-Fetch-Site` names another site (webhooks excepted: the SaaS posts them, signed), and
forbids framing of every answer. The login's `next` goes only to a path of this server's.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from symphony.base.hosts import is_loopback
from symphony.observability.auth import same_origin

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("localhost", "*.localhost", "127.0.0.1", "::1")
SECURITY_HEADERS = (
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SIGNED_PATHS = ("/api/v1/webhooks/",)


def accepted_hosts(bound: str, allowed: Sequence[str]) -> tuple[str, ...] | None:
    """The host names a server bound to `bound` answers to; None: any (bound beyond loopback
    with no `server.allowed_hosts`: the name a proxy or a cluster gives it is not known)."""
    if allowed:
        return (*allowed, *LOOPBACK_NAMES) if is_loopback(bound) else tuple(allowed)
    return LOOPBACK_NAMES if is_loopback(bound) else None


def host_name(header: str) -> str:
    """The name of a `Host` header without its port (`[::1]:8080` -> `::1`), lower-cased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str, accepted: Sequence[str] | None) -> bool:
    if accepted is None:
        return True
    name = host_name(header)
    if not name:
        return False
    for pattern in accepted:
        if pattern.startswith("*.") and (name.endswith(pattern[1:]) or name == pattern[2:]):
            return True
        if name == pattern:
            return True
    if "127.0.0.1" in accepted:
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False
    return False


def safe_next(target: str, root: str) -> str:
    """Where a login may send the browser: a path of this server's, else `root`. Never another
    site (`//host`, `/\\host`, a scheme) and never a header break (CR, LF)."""
    if (
        not target.startswith("/")
        or target.startswith(("//", "/\\"))
        or any(ord(ch) < 0x20 or ch in "\\\x7f" for ch in target)
        or urlsplit(target).netloc
    ):
        return root
    return target


def cross_site(headers: dict[str, str], scheme: str, host: str) -> str | None:
    """Where a request comes from when that is another site, or None: its `Origin` when that
    is not this server's, else a browser's `Sec-Fetch-Site: cross-site`."""
    origin = headers.get("origin")
    if origin == "null":
        return "an opaque origin"
    if origin is not None:
        return None if same_origin(origin, f"{scheme}://{host}") else origin
    if headers.get("sec-fetch-site") == "cross-site":
        return "another site"
    return None


class WebGuard:
    """ASGI middleware holding the rules above around an app."""

    def __init__(self, app: App, accepted: Sequence[str] | None) -> None:
        self.app = app
        self.accepted = tuple(accepted) if accepted is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if not host_allowed(host, self.accepted):
            await _refuse(send, 421, "unknown_host",
                          f"this server does not answer to {host_name(host) or 'no name'}: "
                          "add it to server.allowed_hosts")  # fmt: skip
            return
        path = str(scope.get("path", ""))
        if scope["method"] not in _SAFE_METHODS and not path.startswith(_SIGNED_PATHS):
            source = cross_site(headers, str(scope.get("scheme", "http")), host)
            if source is not None:
                await _refuse(send, 403, "cross_origin", f"a request from {source} is not taken")
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})
