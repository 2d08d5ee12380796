"""Which providers an agent's environment holds a key for, and the environment it gets instead.

A provider is reached with an API key from a variable (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`)
at a base URL (its `*_BASE_URL` variable, else the provider's own). `routes` finds the keys an
agent's environment holds; `through_gateway` gives the environment with each key replaced by
the run's token and each base URL by the gateway's. A subscription login (no key in the
environment) is no route: that agent calls its provider itself, as before.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

OPENAI = "openai"
ANTHROPIC = "anthropic"


@dataclass(frozen=True, slots=True)
class Provider:
    """A model provider the gateway carries calls to: where an agent's environment holds its key and
    base URL, and how the key goes upstream."""

    name: str
    key_names: tuple[str, ...]
    """The variables that hold its API key; the first one set is used."""
    base_name: str
    default_base: str
    """Where its API is unless `base_name` says otherwise (the paths an agent asks for follow)."""
    key_header: str
    """How the key goes upstream: `authorization` (a bearer token) or `x-api-key`."""


PROVIDERS: tuple[Provider, ...] = (
    Provider(OPENAI, ("OPENAI_API_KEY", "CODEX_API_KEY"), "OPENAI_BASE_URL",
             "https://api.openai.com/v1", "authorization"),
    Provider(ANTHROPIC, ("ANTHROPIC_API_KEY",), "ANTHROPIC_BASE_URL",
             "https://api.anthropic.com", "x-api-key"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Route:
    """One provider a run reaches through the gateway: where its calls go and with what key."""

    provider: Provider
    upstream: str
    """The provider's base URL, without a trailing slash."""
    key: str


def routes(env: Mapping[str, str]) -> tuple[Route, ...]:
    """The providers `env` holds an API key for, each with its upstream."""
    found = []
    for provider in PROVIDERS:
        key = next((env[n] for n in provider.key_names if env.get(n)), None)
        if key is None:
            continue
        upstream = (env.get(provider.base_name) or provider.default_base).rstrip("/")
        found.append(Route(provider, upstream, key))
    return tuple(found)


def through_gateway(
    env: Mapping[str, str], found: tuple[Route, ...], base_url: str, token: str
) -> dict[str, str]:
    """`env` with every routed key replaced by `token` and every routed base URL by the
    gateway's (`base_url/<provider>`)."""
    changed = dict(env)
    for route in found:
        provider = route.provider
        for name in provider.key_names:
            if name in changed:
                changed[name] = token
        changed[provider.base_name] = gateway_base(base_url, provider.name)
    return changed


def gateway_base(base_url: str, provider: str) -> str:
    """Where an agent reaches `provider` through the gateway at `base_url`."""
    return f"{base_url.rstrip('/')}/{provider}"


def new_token() -> str:
    return "sym-" + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """What a token is kept under: the time a lookup takes says nothing of any live token."""
    return hashlib.sha256(token.encode()).hexdigest()
