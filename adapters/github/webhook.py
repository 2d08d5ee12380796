"""GitHub webhook deliveries: `X-Hub-Signature-256` (HMAC-SHA256 of the body with the secret,
`sha256=<hex>`), and the tickets an `issues`, `issue_comment`, `label` or `projects_v2_item`
event names, as this adapter's ids (the number in repository scope, the project item's node id
in project scope)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from symphony.tracker.webhooks import hmac_sha256_hex, same

from .config import GitHubConfig


class GitHubWebhook:
    def __init__(self, config: GitHubConfig, secret: str) -> None:
        self._config = config
        self._secret = secret

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> bool:
        expected = "sha256=" + hmac_sha256_hex(self._secret, body)
        return same(headers.get("x-hub-signature-256"), expected)

    def issue_ids(self, payload: Any) -> Sequence[str] | None:
        if not isinstance(payload, Mapping):
            return None
        if "zen" in payload and "hook_id" in payload:
            return []  # the ping GitHub sends when the webhook is created
        if self._config.project is not None:
            item = payload.get("projects_v2_item")
            node = item.get("node_id") if isinstance(item, Mapping) else None
            return [node] if isinstance(node, str) and node else None
        issue = payload.get("issue")
        repository = payload.get("repository")
        name = repository.get("full_name") if isinstance(repository, Mapping) else None
        number = issue.get("number") if isinstance(issue, Mapping) else None
        configured = (self._config.repository or "").lower()
        if isinstance(number, int) and isinstance(name, str) and name.lower() == configured:
            return [str(number)]
        return None
