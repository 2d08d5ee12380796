"""The agent tools of the `gitlab` adapter: their specs, and turning a raw call into a
validated request or a failure the agent can act on. `adapters.gitlab.tracker` executes them,
over the same operations as the daemon's own writes, whose arguments are checked here too.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symphony.base.tools import INVALID_ARGUMENTS as INVALID_ARGUMENTS
from symphony.base.tools import (
    ToolResult,
    ToolSpec,
    invalid_arguments,
    is_inline,
)

MOVE_ISSUE = "gitlab_move_issue"
ADD_COMMENT = "gitlab_add_comment"
LINK_MERGE_REQUEST = "gitlab_link_merge_request"
NAMES = (MOVE_ISSUE, ADD_COMMENT, LINK_MERGE_REQUEST)

UNKNOWN_TOOL = "unknown_tool"
NOT_IN_SCOPE = "not_in_scope"

MAX_STATE_CHARS = 100
MAX_COMMENT_CHARS = 1_000_000  # GitLab's limit on a note body
MAX_URL_CHARS = 2048


@dataclass(frozen=True, slots=True)
class MoveIssue:
    state: str


@dataclass(frozen=True, slots=True)
class AddComment:
    body: str


@dataclass(frozen=True, slots=True)
class LinkMergeRequest:
    url: str


ToolCall = MoveIssue | AddComment | LinkMergeRequest


def tool_specs(project: str, states_note: str) -> list[ToolSpec]:
    def strings(**props: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": dict(props),
            "required": list(props),
            "additionalProperties": False,
        }

    return [
        ToolSpec(
            name=MOVE_ISSUE,
            description=(
                f"Move the GitLab issue you are working on (project {project}) to another "
                f"workflow state. {states_note}"
            ),
            input_schema=strings(
                state={
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_STATE_CHARS,
                    "description": "The target state name, e.g. 'Human Review'.",
                }
            ),
            moves_ticket=True,
        ),
        ToolSpec(
            name=ADD_COMMENT,
            description="Add a Markdown comment (a note) to the GitLab issue you are working on.",
            input_schema=strings(
                body={"type": "string", "minLength": 1, "maxLength": MAX_COMMENT_CHARS}
            ),
        ),
        ToolSpec(
            name=LINK_MERGE_REQUEST,
            description=(
                "Link a merge request of this GitLab instance to the issue you are working on. "
                "GitLab has no API that links an existing merge request to an issue, so this "
                "posts a note naming it (put 'Closes #<iid>' in the merge request description "
                "to have GitLab close the issue on merge)."
            ),
            input_schema=strings(
                url={
                    "type": "string",
                    "maxLength": MAX_URL_CHARS,
                    "description": "<instance>/<group>/<project>/-/merge_requests/<iid>",
                }
            ),
        ),
    ]


_FIELDS: dict[str, set[str]] = {
    MOVE_ISSUE: {"state"},
    ADD_COMMENT: {"body"},
    LINK_MERGE_REQUEST: {"url"},
}


def parse_call(name: str, arguments: Any, base_url: str) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    if name not in _FIELDS:
        return ToolResult.failure(
            UNKNOWN_TOOL, f"{name!r} is not a GitLab tool; use one of {', '.join(NAMES)}"
        )
    # Some agent protocols deliver arguments as a JSON string rather than an object.
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    fields = _FIELDS[name]
    if not isinstance(arguments, Mapping):
        return invalid_arguments(f"{name} takes an object with {', '.join(sorted(fields))}")
    extra = sorted(str(key) for key in arguments if key not in fields)
    if extra:
        return invalid_arguments(f"unexpected argument(s) {', '.join(extra)} for {name}")
    for key in sorted(fields):
        value = arguments.get(key)
        if not isinstance(value, str) or not value.strip():
            return invalid_arguments(f"{key!r} must be a non-empty string")
    if name == MOVE_ISSUE:
        state = str(arguments["state"]).strip()
        if len(state) > MAX_STATE_CHARS or not is_inline(state):
            return invalid_arguments(
                f"'state' must be one line of at most {MAX_STATE_CHARS} characters"
            )
        if "," in state:
            # Labels travel as a comma-separated list.
            return invalid_arguments("'state' must not contain a comma")
        return MoveIssue(state)
    if name == ADD_COMMENT:
        body = str(arguments["body"])
        if len(body) > MAX_COMMENT_CHARS:
            return invalid_arguments(f"'body' is longer than {MAX_COMMENT_CHARS} characters")
        return AddComment(body)
    return _merge_request(str(arguments["url"]).strip(), base_url)


def merge_request_pattern(base_url: str) -> re.Pattern[str]:
    """An MR page of this instance: `<base_url>/<namespace>/<project>/-/merge_requests/<iid>`,
    optionally with a trailing slash or a tab (`/diffs`), query or fragment."""
    return re.compile(
        rf"^{re.escape(base_url)}/((?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)+[A-Za-z0-9_][A-Za-z0-9_.-]*)"
        r"/-/merge_requests/([1-9][0-9]*)(?:/[a-z]*)?/?(?:[?#][^\s]*)?$",
        flags=re.IGNORECASE,
    )


def _merge_request(url: str, base_url: str) -> ToolCall | ToolResult:
    if len(url) > MAX_URL_CHARS or not merge_request_pattern(base_url).match(url):
        return invalid_arguments(
            f"'url' must be a merge request of this GitLab instance: "
            f"{base_url}/<group>/<project>/-/merge_requests/<iid>"
        )
    return LinkMergeRequest(url)
