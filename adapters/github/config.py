"""Reading `tracker.provider` for the `github` kind into a validated, frozen `GitHubConfig`.

Two scopes: repository issues whose workflow state is a label (`repository`), or the items of a
Projects v2 board whose state is its `Status` field (`project`). Exactly one must be given.
Every error is `invalid_tracker_config` (or `missing_tracker_secret` for the token) and names
the key, never the token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from symphony.tracker.contract import INVALID_TRACKER_CONFIG, TrackerError

from .._support import label_scope as labels
from .._support.label_scope import LabelStates
from .._support.normalize import as_int
from .._support.provider import Secret, optional_secret, provider_secret, provider_str

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_TOKEN_ENV = "GITHUB_TOKEN"
DEFAULT_CLOSED_STATE = "Done"
DEFAULT_LABEL_PREFIX = "status:"
LABEL_SEPARATOR = "-"  # `In Progress` -> `status:in-progress`, the common GitHub spelling
MAX_LABEL_CHARS = 50  # GitHub refuses longer label names
LABEL_RULES = labels.LabelRules(
    DEFAULT_LABEL_PREFIX, LABEL_SEPARATOR, MAX_LABEL_CHARS, DEFAULT_CLOSED_STATE
)
STATUS_FIELD = "Status"

_REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")


def default_label(state: str, prefix: str = DEFAULT_LABEL_PREFIX) -> str:
    """The label a state gets when none is configured."""
    return LABEL_RULES.default_label(state, prefix)


def graphql_url_for(api_url: str) -> str:
    """GitHub.com serves GraphQL at `<api>/graphql`; Enterprise Server serves REST at
    `https://host/api/v3` and GraphQL at `https://host/api/graphql`."""
    base = api_url.rstrip("/")
    if base.endswith("/api/v3"):
        return base[: -len("/v3")] + "/graphql"
    return base + "/graphql"


@dataclass(frozen=True, slots=True)
class ProjectRef:
    """The Projects (v2) board `tracker.provider.project` names: owner, number and owner type."""

    owner: str
    number: int
    owner_type: Literal["organization", "user"]


@dataclass(frozen=True, slots=True)
class GitHubConfig:
    """The validated `tracker.provider` of a GitHub workflow: one repository's issues (`repository`)
    or one project's items (`project`)."""

    api_url: str
    graphql_url: str
    token: Secret
    repository: str | None
    project: ProjectRef | None
    label_states: LabelStates
    priority_labels: Mapping[str, int]
    closed_page_limit: int
    webhook_secret: Secret | None = None
    """`provider.webhook_secret`: signed deliveries are accepted (symphony.tracker.webhooks)."""

    @property
    def web_host(self) -> str:
        """Host of issue and pull-request pages: github.com, or the Enterprise host itself."""
        host = urlsplit(self.api_url).hostname or "github.com"
        return "github.com" if host == "api.github.com" else host


def parse_config(
    provider: Mapping[str, Any],
    environ: Mapping[str, str],
    active_states: Sequence[str],
    terminal_states: Sequence[str],
) -> GitHubConfig:
    """Validate `tracker.provider`; raises `TrackerError` with the offending key named."""
    api_url = (provider_str(provider, "api_url", default=DEFAULT_API_URL) or "").rstrip("/")
    parts = urlsplit(api_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid("tracker.provider.api_url must be an http(s) URL such as " + DEFAULT_API_URL)
    graphql_url = provider_str(provider, "graphql_url") or graphql_url_for(api_url)

    repository = provider_str(provider, "repository")
    project = _project(provider.get("project"))
    if (repository is None) == (project is None):
        raise _invalid(
            "tracker.provider needs exactly one scope: `repository: owner/name` (label states) "
            "or `project: {owner, number, owner_type}` (Projects v2 Status field)"
        )
    if repository is not None and not _REPOSITORY.match(repository):
        raise _invalid(f"tracker.provider.repository must look like owner/name, got {repository!r}")

    scope = labels.parse_label_states(
        provider, LABEL_RULES, active=active_states, terminal=terminal_states
    )
    limit = as_int(provider.get("closed_page_limit", 10))
    if limit is None or limit < 1:
        raise _invalid("tracker.provider.closed_page_limit must be a positive integer")
    return GitHubConfig(
        api_url=api_url,
        graphql_url=graphql_url,
        token=provider_secret(provider, "token", DEFAULT_TOKEN_ENV, environ),
        repository=repository,
        project=project,
        label_states=scope,
        priority_labels=labels.priority_labels(provider.get("priority_labels"), "p1"),
        closed_page_limit=limit,
        webhook_secret=optional_secret(provider, "webhook_secret", environ),
    )


def _project(value: Any) -> ProjectRef | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _invalid("tracker.provider.project must be a map {owner, number, owner_type}")
    owner = value.get("owner")
    if not isinstance(owner, str) or not _LOGIN.match(owner.strip()):
        raise _invalid("tracker.provider.project.owner must be a user or organization login")
    number = as_int(value.get("number"))
    if isinstance(value.get("number"), str) and value["number"].strip().isdigit():
        number = int(value["number"])
    if number is None or number < 1:
        raise _invalid("tracker.provider.project.number must be a positive integer")
    owner_type = value.get("owner_type", "organization")
    if owner_type not in ("organization", "user"):
        raise _invalid("tracker.provider.project.owner_type must be `organization` or `user`")
    return ProjectRef(owner.strip(), number, owner_type)


def _invalid(message: str) -> TrackerError:
    return TrackerError(INVALID_TRACKER_CONFIG, message)
