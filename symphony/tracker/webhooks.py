"""Tracker webhooks: a delivery makes the daemon look at the tickets it names, at once.

A delivery never changes state by itself: the daemon reads the named tickets back from the
tracker (`Orchestrator.request_refresh(ids)`) and decides as after a poll; polling goes on at
its interval and catches any delivery that was lost. Each adapter that can receive webhooks
offers a `WebhookReceiver` (`ReceivesWebhooks.webhook()`) that checks the provider's signature
in constant time and says which ticket ids a payload names; the HTTP server
(`POST /api/v1/webhooks/<kind>`) bounds the body, answers 401 without detail to a bad
signature, and coalesces what arrives while a refresh is pending.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

MAX_DELIVERY_BYTES = 1024 * 1024
"""A larger body is refused (413) before it is read whole."""


class WebhookReceiver(Protocol):
    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> bool:
        """Whether the delivery is the provider's (its signature or token, and freshness
        where the provider dates deliveries); `headers` have lowercase names."""
        ...

    def issue_ids(self, payload: Any) -> Sequence[str] | None:
        """The ids (as the adapter's `Issue.id`) of the tickets a verified payload is about;
        empty for an event about none (a ping), None when it cannot tell (look at all)."""
        ...


@runtime_checkable
class ReceivesWebhooks(Protocol):
    def webhook(self) -> WebhookReceiver | None:
        """The receiver, or None when the workflow configured no webhook secret."""
        ...


def hmac_sha256_hex(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a header's value with what it must be."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
