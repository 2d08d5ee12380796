"""GitLab webhook deliveries: `X-Gitlab-Token` (the secret itself, compared in constant time),
and the issue an `issue` or `note` event names, as this adapter's id (its iid in the project)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from symphony.tracker.webhooks import same

from .config import GitLabConfig


class GitLabWebhook:
    def __init__(self, config: GitLabConfig, secret: str) -> None:
        self._config = config
        self._secret = secret

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> bool:
        return same(headers.get("x-gitlab-token"), self._secret)

    def issue_ids(self, payload: Any) -> Sequence[str] | None:
        if not isinstance(payload, Mapping):
            return None
        project = payload.get("project")
        if not isinstance(project, Mapping) or not self._ours(project):
            return None
        kind = payload.get("object_kind")
        holder = payload.get("object_attributes") if kind == "issue" else payload.get("issue")
        iid = holder.get("iid") if isinstance(holder, Mapping) else None
        return [str(iid)] if isinstance(iid, int) else None

    def _ours(self, project: Mapping[str, Any]) -> bool:
        configured = self._config.project
        if configured.isdigit():
            return str(project.get("id")) == configured
        path = project.get("path_with_namespace")
        return isinstance(path, str) and path.lower() == configured.lower()
