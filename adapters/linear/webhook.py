"""Linear webhook deliveries: `Linear-Signature` (HMAC-SHA256 of the body with the signing
secret, hex), dated by the payload's `webhookTimestamp` (ms), which must be within
REPLAY_WINDOW_S of now so a captured delivery cannot be replayed later; and the issue an
`Issue` or `Comment` event names (its id)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from symphony.tracker.webhooks import hmac_sha256_hex, same

REPLAY_WINDOW_S = 60.0


class LinearWebhook:
    def __init__(self, secret: str) -> None:
        self._secret = secret

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> bool:
        if not same(headers.get("linear-signature"), hmac_sha256_hex(self._secret, body)):
            return False
        try:
            sent = json.loads(body).get("webhookTimestamp")
        except (ValueError, AttributeError):
            return False
        return isinstance(sent, int | float) and abs(now - sent / 1000) <= REPLAY_WINDOW_S

    def issue_ids(self, payload: Any) -> Sequence[str] | None:
        if not isinstance(payload, Mapping):
            return None
        data = payload.get("data")
        if not isinstance(data, Mapping):
            return None
        kind = payload.get("type")
        found = data.get("id") if kind == "Issue" else data.get("issueId")
        if kind in ("Issue", "Comment") and isinstance(found, str) and found:
            return [found]
        return None
