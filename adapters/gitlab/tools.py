"""The agent tools of the `gitlab` adapter: their declarations, and the checks GitLab adds.
`adapters.gitlab.writes` runs them, over the same operations as the daemon's own writes,
whose arguments are checked here too.
"""

from __future__ import annotations

import re
from typing import Any

from symphony.base.tools import ToolResult, ToolSpec, invalid_arguments
from symphony.tracker import tools as generic

MOVE_ISSUE = "gitlab_move_issue"
ADD_COMMENT = "gitlab_add_comment"
LINK_MERGE_REQUEST = "gitlab_link_merge_request"
NAMES = (MOVE_ISSUE, ADD_COMMENT, LINK_MERGE_REQUEST)

NOT_IN_SCOPE = "not_in_scope"

MAX_COMMENT_CHARS = 1_000_000  # GitLab's limit on a note body

ToolCall = generic.MoveIssue | generic.AddComment | generic.AddLink


def toolbox(project: str, states_note: str, base_url: str) -> generic.Toolbox:
    return generic.Toolbox(
        "GitLab",
        (
            generic.move_tool(
                MOVE_ISSUE,
                f"Move the GitLab issue you are working on (project {project}) to another "
                f"workflow state. {states_note}",
                state_help="The target state name, e.g. 'Human Review'.",
                make=_label_state,
            ),
            generic.comment_tool(
                ADD_COMMENT,
                "Add a Markdown comment (a note) to the GitLab issue you are working on.",
                max_chars=MAX_COMMENT_CHARS,
            ),
            generic.link_tool(
                LINK_MERGE_REQUEST,
                "Link a merge request of this GitLab instance to the issue you are working on. "
                "GitLab has no API that links an existing merge request to an issue, so this "
                "posts a note naming it, once per merge request (put 'Closes #<iid>' in the "
                "merge request description to have GitLab close the issue on merge).",
                url_help="<instance>/<group>/<project>/-/merge_requests/<iid>",
                make=lambda values: _merge_request(values["url"], base_url),
            ),
        ),
    )


def tool_specs(project: str, states_note: str) -> list[ToolSpec]:
    return toolbox(project, states_note, "").specs()


def parse_call(name: str, arguments: Any, base_url: str) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    call: ToolCall | ToolResult = toolbox("", "", base_url).parse(name, arguments)
    return call


def _label_state(values: dict[str, Any]) -> generic.MoveIssue | ToolResult:
    if "," in values["state"]:
        # Labels travel as a comma-separated list.
        return invalid_arguments("'state' must not contain a comma")
    return generic.MoveIssue(values["state"])


def merge_request_pattern(base_url: str) -> re.Pattern[str]:
    """An MR page of this instance: `<base_url>/<namespace>/<project>/-/merge_requests/<iid>`,
    optionally with a trailing slash or a tab (`/diffs`), query or fragment."""
    return re.compile(
        rf"^{re.escape(base_url)}/((?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)+[A-Za-z0-9_][A-Za-z0-9_.-]*)"
        r"/-/merge_requests/([1-9][0-9]*)(?:/[a-z]*)?/?(?:[?#][^\s]*)?$",
        flags=re.IGNORECASE,
    )


def _merge_request(url: str, base_url: str) -> ToolCall | ToolResult:
    if len(url) > generic.MAX_URL_CHARS or not merge_request_pattern(base_url).match(url):
        return invalid_arguments(
            f"'url' must be a merge request of this GitLab instance: "
            f"{base_url}/<group>/<project>/-/merge_requests/<iid>"
        )
    return generic.AddLink(url)
