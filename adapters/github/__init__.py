"""The `github` tracker kind: repository issues with label states, or a Projects v2 board.

Profile (the full table is in SPEC.md, section "Adapter profile: `github`"):
- `tracker.provider`: exactly one of `repository: owner/name` (label scope) or
  `project: {owner, number, owner_type: organization|user}` (Projects v2 scope); `token`
  (default `$GITHUB_TOKEN`); `api_url` (default `https://api.github.com`; Enterprise Server
  `https://HOST/api/v3`); `graphql_url` (default derived: `<api_url>/graphql`, or
  `https://HOST/api/graphql` when `api_url` ends in `/api/v3`); label scope only:
  `state_labels` (state -> label, default `status:<kebab-case state>`), `state_label_prefix`
  (default `status:`), `closed_state` (default `Done`), `closed_page_limit` (default 10);
  both: `priority_labels` (label -> integer).
- Label scope: `id` is the issue number as text, `identifier` is `owner/name#number`; the state
  is `closed_state` for a closed issue, else the state whose label it carries; pull requests are
  skipped; an open `blocked_by` dependency makes an issue not dispatchable. Reads are conditional
  GETs, so an unchanged board costs no rate-limit quota.
- Projects v2 scope: `id` is the project item id; the state is the `Status` option name; only
  open issue items are dispatchable; pull requests, drafts and archived items are skipped.
- Daemon writes (both scopes): `move_issue` is the move tool's own code; comments are the
  issue's REST comments (`author` = `user.login`; edits only a comment of that issue, and
  nothing when the body is unchanged); `create_issue` opens the issue over REST (label scope:
  in the repository with its state label, closed for `closed_state`; project scope: in the
  parent's repository, then added to the project with its Status) and records `blocked_by`
  (`owner/name#n` or `#n`) with the issue dependencies API; every blocker is read first, so an
  unknown one is `tracker_rejected` before anything is created. `link_pull_request` is the
  link tool's comment `Linked pull request: <url>`, posted once per URL, and nothing for a
  pull request of the label scope's own repository (its `Closes` reference links it).
  `tracker_states()`: None in the label scope (any name can become a label), the Status
  options in the project scope; `ensure_states` creates the missing state labels (label
  scope) and nothing in a project.
- Tools: `github_move_issue` (marked `moves_ticket`), `github_add_comment`,
  `github_link_pull_request`, `github_graphql` (read-only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symphony.codehost.contract import CodeHostAdapter
from symphony.tracker.contract import TrackerAdapter

from .._support.label_scope import labelled_states
from .config import parse_config
from .pulls import GitHubPulls
from .tracker import GitHubTracker

if TYPE_CHECKING:
    from symphony.config.sections import TrackerSettings
    from symphony.tracker.contract import Tracker, TrackerContext

DEFAULT_ACTIVE_STATES: tuple[str, ...] = ("Todo", "In Progress")
DEFAULT_TERMINAL_STATES: tuple[str, ...] = ("Done",)
PROVIDER_KEYS: tuple[str, ...] = (
    "webhook_secret",
    "repository",
    "project",
    "token",
    "api_url",
    "graphql_url",
    "priority_labels",
    "state_labels",
    "state_label_prefix",
    "closed_state",
    "closed_page_limit",
)
"""Every `tracker.provider` key this adapter reads; others are reported as unknown."""

__all__ = [
    "ADAPTER",
    "CODE_HOST",
    "DEFAULT_ACTIVE_STATES",
    "DEFAULT_TERMINAL_STATES",
    "GitHubTracker",
    "create_tracker",
]


def create_tracker(settings: TrackerSettings, context: TrackerContext) -> Tracker:
    """A GitHub tracker; raises `invalid_tracker_config` / `missing_tracker_secret`."""
    config = parse_config(settings.provider, context.environ, *labelled_states(settings))
    return GitHubTracker(config)


ADAPTER = TrackerAdapter(
    kind="github",
    members="the repository's owner, members and collaborators (GitHub's author_association)",
    create_tracker=create_tracker,
    default_active_states=DEFAULT_ACTIVE_STATES,
    default_terminal_states=DEFAULT_TERMINAL_STATES,
    provider_keys=PROVIDER_KEYS,
)

CODE_HOST = CodeHostAdapter(
    kind="github",
    create=GitHubPulls,
    webhook_events={
        "x-github-event": frozenset(
            {
                "pull_request",
                "pull_request_review",
                "pull_request_review_comment",
                "pull_request_review_thread",
                "check_run",
                "check_suite",
                "status",
            }
        )
    },
)
"""The code host of `repository.kind: github` (`symphony.codehost.contract`)."""
