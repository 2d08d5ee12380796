"""`server:`: the HTTP server extension (spec §13.7), off unless a port is given.

Most of this section is about who may act through it: a server reachable from other machines
needs a token long enough not to be guessed, the names a request's `Host` may carry, and the
reverse proxies whose `X-Forwarded-For` is believed. `symphony.observability` serves it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from symphony.base.hosts import is_loopback
from symphony.config.fields import INVALID_CONFIG, ConfigError, integer, resolve_secret, str_list

SERVER_KEYS = ("port", "host", "auth_token", "allowed_hosts", "trusted_proxies")

MIN_TOKEN_CHARS = 16
"""A shorter `server.auth_token` is refused: it would fall to guessing within the login rate."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The HTTP server extension (spec §13.7): off while `port` is None; 0 = any free port."""

    port: int | None = None
    host: str = "127.0.0.1"
    auth_token: str | None = field(default=None, repr=False)
    """What a person's actions need (`server.auth_token`); None: actions are refused."""
    allowed_hosts: tuple[str, ...] = ()
    """The names a request's `Host` may carry (`server.allowed_hosts`; `*.domain` for its
    subdomains). Empty: the loopback names when bound to loopback, any name otherwise."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses of reverse proxies whose `X-Forwarded-For` names the client
    (`server.trusted_proxies`); empty: the connection's own address, always."""


def parse_server(raw: Mapping[str, Any], environ: Mapping[str, str]) -> ServerSettings:
    """The `server:` section; a `$VAR` token is resolved from `environ`."""
    port: int | None = None
    if raw.get("port") is not None:
        port = integer(raw, "server.port", 0, 0)
        if port > 65535:
            raise ConfigError(INVALID_CONFIG, f"server.port must be at most 65535, got {port}")
    host = raw.get("host", ServerSettings().host)
    if not isinstance(host, str) or not host.strip():
        raise ConfigError(INVALID_CONFIG, "server.host must be a non-empty host name or address")
    token = raw.get("auth_token")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ConfigError(INVALID_CONFIG, "server.auth_token must be a token or $VARIABLE")
    auth_token = resolve_secret(token, environ)
    if auth_token is not None and len(auth_token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            INVALID_CONFIG, f"server.auth_token must be at least {MIN_TOKEN_CHARS} characters"
        )
    if not is_loopback(host.strip()) and auth_token is None:
        raise ConfigError(
            INVALID_CONFIG,
            f"server.host {host.strip()} is reachable from other machines, so a person's "
            "actions there need a token: set server.auth_token (for example $SYMPHONY_TOKEN), "
            "or bind 127.0.0.1",
        )
    allowed = tuple(h.strip().lower() for h in str_list(raw, "server", "allowed_hosts", ()))
    if any(not h or "/" in h or (h.startswith("*") and not h.startswith("*.")) for h in allowed):
        raise ConfigError(
            INVALID_CONFIG,
            "server.allowed_hosts takes host names (dash.example.com, *.example.com), "
            "without a scheme or a path",
        )
    proxies = str_list(raw, "server", "trusted_proxies", ())
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ConfigError(
                INVALID_CONFIG,
                f"server.trusted_proxies takes addresses or networks (10.0.0.1, 10.0.0.0/8), "
                f"got {proxy!r}",
            ) from None
    return ServerSettings(
        port=port, host=host.strip(), auth_token=auth_token, allowed_hosts=allowed,
        trusted_proxies=tuple(p.strip() for p in proxies),
    )  # fmt: skip
