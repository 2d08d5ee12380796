"""Reading `tracker.provider` for the `gitlab` kind into a validated, frozen `GitLabConfig`.

The scope is one project on one GitLab instance. The workflow state of an open issue is a label
(by default the scoped label `workflow::<state lower-cased>`); a closed issue is in
`closed_state`. Every error is `invalid_tracker_config` (or `missing_tracker_secret` for the
token) and names the key, never the token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from symphony.base.issue import normalize_state
from symphony.tracker.contract import INVALID_TRACKER_CONFIG, TrackerError

from .._support import label_scope as labels
from .._support.label_scope import LabelStates
from .._support.normalize import as_int
from .._support.provider import Secret, optional_secret, provider_secret, provider_str

DEFAULT_BASE_URL = "https://gitlab.com"
DEFAULT_TOKEN_ENV = "GITLAB_TOKEN"
DEFAULT_CLOSED_STATE = "Done"
DEFAULT_LABEL_PREFIX = "workflow::"
LABEL_SEPARATOR = " "  # GitLab label titles may hold spaces, and its own examples use them
MAX_LABEL_CHARS = 255  # GitLab's limit on a label title
LABEL_RULES = labels.LabelRules(
    DEFAULT_LABEL_PREFIX, LABEL_SEPARATOR, MAX_LABEL_CHARS, DEFAULT_CLOSED_STATE
)

# A full project path: namespaces and the project, each GitLab path segment
# (letters, digits, `_`, `-`, `.`; not starting with `-` or `.`).
_PATH_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
_PROJECT_PATH = re.compile(rf"^{_PATH_SEGMENT}(?:/{_PATH_SEGMENT})+$")


def is_project(text: str) -> bool:
    """Whether `text` names a project: a positive numeric id or a `group/project` path."""
    return (text.isascii() and text.isdigit() and int(text) > 0) or bool(_PROJECT_PATH.match(text))


def default_label(state: str, prefix: str = DEFAULT_LABEL_PREFIX) -> str:
    """The label a state gets when none is configured."""
    return LABEL_RULES.default_label(state, prefix)


@dataclass(frozen=True, slots=True)
class GitLabConfig:
    """The validated `tracker.provider` of a GitLab workflow: one project's issues."""

    base_url: str
    """The instance's web root, e.g. https://gitlab.com (the API is `<base_url>/api/v4`)."""
    token: Secret
    project: str
    """Numeric id or `group/sub/project` path, as configured."""
    label_states: LabelStates
    terminal_states: frozenset[str]
    """normalized names: a blocker in one of these (or closed) no longer blocks."""
    priority_labels: Mapping[str, int]
    closed_page_limit: int
    blockers: bool
    webhook_secret: Secret | None = None
    """`provider.webhook_secret`: signed deliveries are accepted (symphony.tracker.webhooks)."""

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v4"

    @property
    def project_ref(self) -> str:
        """The project as one URL path segment: `group%2Fsub%2Fproject` or the id."""
        return quote(self.project, safe="")

    @property
    def web_host(self) -> str:
        return urlsplit(self.base_url).netloc


def parse_config(
    provider: Mapping[str, Any],
    environ: Mapping[str, str],
    active_states: Sequence[str],
    terminal_states: Sequence[str],
) -> GitLabConfig:
    """Validate `tracker.provider`; raises `TrackerError` with the offending key named."""
    base_url = (provider_str(provider, "base_url", default=DEFAULT_BASE_URL) or "").rstrip("/")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise _invalid(
            "tracker.provider.base_url must be an http(s) URL such as " + DEFAULT_BASE_URL
        )
    if base_url.endswith("/api/v4"):
        raise _invalid("tracker.provider.base_url is the instance root, without /api/v4")

    project = provider_str(provider, "project", required=True)
    assert project is not None
    project = project.strip("/")
    if not is_project(project):
        raise _invalid(
            "tracker.provider.project must be a numeric project id or a path such as "
            f"group/project, got {project!r}"
        )

    scope = labels.parse_label_states(
        provider, LABEL_RULES, active=active_states, terminal=terminal_states
    )
    limit = as_int(provider.get("closed_page_limit", 10))
    if limit is None or limit < 1:
        raise _invalid("tracker.provider.closed_page_limit must be a positive integer")
    blockers = provider.get("blockers", True)
    if not isinstance(blockers, bool):
        raise _invalid("tracker.provider.blockers must be true or false")
    return GitLabConfig(
        base_url=base_url,
        token=provider_secret(provider, "token", DEFAULT_TOKEN_ENV, environ),
        project=project,
        label_states=scope,
        terminal_states=frozenset(
            normalize_state(s) for s in [*terminal_states, scope.closed_state]
        ),
        priority_labels=labels.priority_labels(provider.get("priority_labels"), "priority::1"),
        closed_page_limit=limit,
        blockers=blockers,
        webhook_secret=optional_secret(provider, "webhook_secret", environ),
    )


def _invalid(message: str) -> TrackerError:
    return TrackerError(INVALID_TRACKER_CONFIG, message)
