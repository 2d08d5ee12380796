"""The `gitlab` tracker kind: the issues of one GitLab project, whose workflow state is a label.

Profile (the full table is in SPEC.md, section "Adapter profile: `gitlab`"):
- `tracker.provider`: `project` (required: numeric id or `group/sub/project` path); `token`
  (default `$GITLAB_TOKEN`, sent as `PRIVATE-TOKEN`); `base_url` (default `https://gitlab.com`;
  the API is `<base_url>/api/v4`); `state_labels` (state -> label, default
  `workflow::<state lower-cased>`), `state_label_prefix` (default `workflow::`), `closed_state`
  (default `Done`), `closed_page_limit` (default 10), `priority_labels` (label -> integer),
  `blockers` (default true: read issue links).
- `id` is the issue iid as text, `identifier` is `<project path>#<iid>` (GitLab's full
  reference); `native_ref` is `{project, iid, id}`. A closed issue is `closed_state`; an opened
  one takes the state of its state label; an opened issue without one is outside the scope.
- Blockers: issue links with `link_type == "is_blocked_by"` (a paid feature: elsewhere there
  are none); a blocker not in a terminal state makes the issue not dispatchable.
- Tools: `gitlab_move_issue` (marked `moves_ticket`), `gitlab_add_comment`,
  `gitlab_link_merge_request`.
- Daemon writes: `move_issue` is the move tool's one `PUT`; comments are issue notes (system
  notes are not listed; `author` is the username); `create_issue` posts the issue with its
  state label (then closes it for `closed_state`) and links each blocker (`<path>#<iid>` or
  `#<iid>`, checked to exist first) as `is_blocked_by`; `tracker_states()` is None and
  `ensure_states` creates the missing state labels. A write refused before it reaches GitLab,
  or one GitLab refuses for good, is `tracker_rejected`.
- Code host (`repository.kind: gitlab`, `CODE_HOST`): the daemon's merge requests in the project
  `repository.slug`, see `merge_requests.GitLabMergeRequests`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symphony.codehost.contract import CodeHostAdapter
from symphony.tracker.contract import TrackerAdapter

from .._support.label_scope import labelled_states
from .config import parse_config
from .merge_requests import GitLabMergeRequests
from .tracker import GitLabTracker

if TYPE_CHECKING:
    from symphony.config.sections import TrackerSettings
    from symphony.tracker.contract import Tracker, TrackerContext

DEFAULT_ACTIVE_STATES: tuple[str, ...] = ("Todo", "In Progress")
DEFAULT_TERMINAL_STATES: tuple[str, ...] = ("Done",)
PROVIDER_KEYS: tuple[str, ...] = (
    "webhook_secret",
    "project",
    "base_url",
    "token",
    "state_labels",
    "state_label_prefix",
    "closed_state",
    "closed_page_limit",
    "priority_labels",
    "blockers",
)
"""Every `tracker.provider` key this adapter reads; others are reported as unknown."""

__all__ = [
    "ADAPTER",
    "CODE_HOST",
    "DEFAULT_ACTIVE_STATES",
    "DEFAULT_TERMINAL_STATES",
    "GitLabMergeRequests",
    "GitLabTracker",
    "create_tracker",
]


def create_tracker(settings: TrackerSettings, context: TrackerContext) -> Tracker:
    """A GitLab tracker; raises `invalid_tracker_config` / `missing_tracker_secret`."""
    config = parse_config(settings.provider, context.environ, *labelled_states(settings))
    return GitLabTracker(config)


ADAPTER = TrackerAdapter(
    kind="gitlab",
    members="nobody: GitLab notes do not say who is a project member; name them in trust.authors",
    create_tracker=create_tracker,
    default_active_states=DEFAULT_ACTIVE_STATES,
    default_terminal_states=DEFAULT_TERMINAL_STATES,
    provider_keys=PROVIDER_KEYS,
)

CODE_HOST = CodeHostAdapter(
    kind="gitlab",
    create=GitLabMergeRequests,
    webhook_events={
        "x-gitlab-event": frozenset(
            {"Merge Request Hook", "Pipeline Hook", "Job Hook", "Note Hook"}
        )
    },
)
"""The code host of `repository.kind: gitlab` (`symphony.codehost.contract`)."""
