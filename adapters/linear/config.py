"""The `tracker.provider` block of a Linear workflow, validated into a frozen `LinearConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from symphony.tracker.contract import INVALID_TRACKER_CONFIG, TrackerError

from .._support.provider import Secret, optional_secret, provider_secret, provider_str

DEFAULT_ENDPOINT = "https://api.linear.app/graphql"
DEFAULT_API_KEY_ENV = "LINEAR_API_KEY"
ASSIGNEE_ME = "me"


@dataclass(frozen=True, slots=True)
class LinearConfig:
    """The validated `tracker.provider` of a Linear workflow: a project's or a team's issues."""

    endpoint: str
    api_key: Secret
    project_slug: str | None
    """A project's `slugId`: the last part of its URL. Exactly one of this and `team_key`."""
    team_key: str | None
    """A team's key, the prefix of its identifiers (`ENG` in `ENG-123`)."""
    assignee: str | None
    """`me` (the key's owner) or a user id; issues assigned to anyone else are not dispatchable."""
    webhook_secret: Secret | None = None
    """`provider.webhook_secret`: signed deliveries are accepted (symphony.tracker.webhooks)."""

    @property
    def scope(self) -> str:
        """The scope in words, for messages."""
        if self.project_slug is not None:
            return f"project {self.project_slug}"
        return f"team {self.team_key}"


def parse_config(provider: Mapping[str, Any], environ: Mapping[str, str]) -> LinearConfig:
    """Validate `tracker.provider`; raises `TrackerError` naming the offending key."""
    endpoint = provider_str(provider, "endpoint", default=DEFAULT_ENDPOINT)
    assert endpoint is not None
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid(
            f"tracker.provider.endpoint must be an http(s) URL such as {DEFAULT_ENDPOINT}"
        )
    project_slug = provider_str(provider, "project_slug")
    team_key = provider_str(provider, "team_key")
    if (project_slug is None) == (team_key is None):
        raise _invalid(
            "tracker.provider needs exactly one scope: `project_slug` (the project's slugId, "
            "the last part of its URL) or `team_key` (the prefix of the team's identifiers, "
            "e.g. ENG)"
        )
    assignee = provider_str(provider, "assignee")
    if assignee is not None and assignee.lower() == ASSIGNEE_ME:
        assignee = ASSIGNEE_ME
    # The key is read last: a config with a broken scope is reported as such even when the
    # variable is also missing, and the check never needs the secret itself.
    api_key = provider_secret(provider, "api_key", DEFAULT_API_KEY_ENV, environ)
    return LinearConfig(
        endpoint=endpoint,
        api_key=api_key,
        project_slug=project_slug,
        team_key=team_key,
        assignee=assignee,
        webhook_secret=optional_secret(provider, "webhook_secret", environ),
    )


def _invalid(message: str) -> TrackerError:
    return TrackerError(INVALID_TRACKER_CONFIG, message)
