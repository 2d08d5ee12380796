"""The agent tools of the Linear adapter: their specs, argument checks, and the calls they make.

The typed tools (`linear_move_issue`, `linear_add_comment`, `linear_attach_url`) act only on the
issue of the session that calls them, addressed by its Linear id. `linear_graphql` runs any
query or mutation with the daemon's API key, so it reaches whatever that key reaches; it exists
for the long tail (reading comments, sub-issues, linking a PR) that typed tools would only
flatten.

`parse_call` turns a raw call into a validated call or a failure the agent can act on; `run`
performs a validated call and may raise `TrackerError`, which the tracker turns into a failure.
The move and the comment are the daemon's own writes (`adapters.linear.writes`) with the
agent's result shapes; the move tool is marked `moves_ticket`, so stage mode can withhold it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from symphony.base.issue import Issue
from symphony.base.tools import INVALID_ARGUMENTS as INVALID_ARGUMENTS
from symphony.base.tools import (
    ToolResult,
    ToolSpec,
    invalid_arguments,
    object_schema,
    string_schema,
)

from . import queries, writes
from .api import LinearApi
from .writes import ISSUE_NOT_FOUND as ISSUE_NOT_FOUND
from .writes import MUTATION_FAILED, Rejected
from .writes import UNKNOWN_STATE as UNKNOWN_STATE

MOVE_ISSUE = "linear_move_issue"
ADD_COMMENT = "linear_add_comment"
ATTACH_URL = "linear_attach_url"
GRAPHQL = "linear_graphql"
TOOL_NAMES = (MOVE_ISSUE, ADD_COMMENT, ATTACH_URL, GRAPHQL)

UNKNOWN_TOOL = "unknown_tool"
GRAPHQL_ERROR = "graphql_error"

MAX_STATE_CHARS = 100
MAX_COMMENT_CHARS = 65_536
MAX_URL_CHARS = 2_048
MAX_TITLE_CHARS = 250
MAX_QUERY_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class MoveIssue:
    state: str


@dataclass(frozen=True, slots=True)
class AddComment:
    body: str


@dataclass(frozen=True, slots=True)
class AttachUrl:
    url: str
    title: str | None


@dataclass(frozen=True, slots=True)
class RunGraphql:
    query: str
    variables: Mapping[str, Any]


ToolCall = MoveIssue | AddComment | AttachUrl | RunGraphql


def tool_specs() -> list[ToolSpec]:
    return [
        ToolSpec(
            name=MOVE_ISSUE,
            description=(
                "Move the Linear issue you are working on to another workflow state of its "
                "team, by name (case-insensitive), e.g. 'In Progress' or 'Human Review'. An "
                "unknown name fails and lists the team's states."
            ),
            input_schema=object_schema(
                {"state": string_schema(MAX_STATE_CHARS, "The target workflow state's name.")},
                ["state"],
            ),
            moves_ticket=True,
        ),
        ToolSpec(
            name=ADD_COMMENT,
            description="Add a Markdown comment to the Linear issue you are working on.",
            input_schema=object_schema(
                {"body": string_schema(MAX_COMMENT_CHARS, "The comment text, in Markdown.")},
                ["body"],
            ),
        ),
        ToolSpec(
            name=ATTACH_URL,
            description=(
                "Attach a link (for example your pull request) to the Linear issue you are "
                "working on. Linking the same URL again updates the existing attachment."
            ),
            input_schema=object_schema(
                {
                    "url": {**string_schema(MAX_URL_CHARS, "An http(s) URL."), "format": "uri"},
                    "title": string_schema(MAX_TITLE_CHARS, "The attachment's title (optional)."),
                },
                ["url"],
            ),
        ),
        ToolSpec(
            # It runs mutations too, so it can change a ticket's state: stage mode, where
            # moves are the daemon's, withholds it like the move tool.
            moves_ticket=True,
            name=GRAPHQL,
            description=(
                "Run one GraphQL query or mutation against Linear's API with the daemon's "
                "credentials (it can read and change anything that key can reach: use it for "
                "what the other linear_ tools do not cover). Returns {data} or the GraphQL "
                "errors with any partial data."
            ),
            input_schema=object_schema(
                {
                    "query": string_schema(
                        MAX_QUERY_CHARS, "A GraphQL document with one operation."
                    ),
                    "variables": {"type": "object", "description": "Variables, if any."},
                },
                ["query"],
            ),
        ),
    ]


def parse_call(name: str, arguments: Any) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    if name not in TOOL_NAMES:
        return ToolResult.failure(
            UNKNOWN_TOOL, f"{name!r} is not a Linear tool; available: {', '.join(TOOL_NAMES)}"
        )
    # Some agent protocols deliver arguments as a JSON string rather than an object.
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    if not isinstance(arguments, Mapping):
        return invalid_arguments(f"{name} takes a JSON object of arguments")
    if name == MOVE_ISSUE:
        fields = _fields(name, arguments, {"state": MAX_STATE_CHARS}, required=("state",))
        return fields if isinstance(fields, ToolResult) else MoveIssue(fields["state"].strip())
    if name == ADD_COMMENT:
        fields = _fields(name, arguments, {"body": MAX_COMMENT_CHARS}, required=("body",))
        return fields if isinstance(fields, ToolResult) else AddComment(fields["body"])
    if name == ATTACH_URL:
        fields = _fields(
            name, arguments, {"url": MAX_URL_CHARS, "title": MAX_TITLE_CHARS}, required=("url",)
        )
        if isinstance(fields, ToolResult):
            return fields
        url = fields["url"].strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return invalid_arguments(f"'url' must be an http(s) URL, got {url[:100]!r}")
        title = fields.get("title")
        return AttachUrl(url, title.strip() if title is not None else None)
    variables = arguments.get("variables")
    rest = {key: value for key, value in arguments.items() if key != "variables"}
    fields = _fields(name, rest, {"query": MAX_QUERY_CHARS}, required=("query",))
    if isinstance(fields, ToolResult):
        return fields
    if variables is not None and not isinstance(variables, Mapping):
        return invalid_arguments(f"'variables' must be an object, got {type(variables).__name__}")
    return RunGraphql(fields["query"], dict(variables or {}))


async def run(api: LinearApi, call: ToolCall, issue: Issue) -> ToolResult:
    """Perform a validated call for `issue`; raises `TrackerError` when Linear cannot be used."""
    if isinstance(call, MoveIssue):
        return await _move(api, call, issue)
    if isinstance(call, AddComment):
        try:
            posted = await writes.add_comment(api, issue, call.body)
        except Rejected as refused:
            return ToolResult.failure(refused.code, refused.message)
        return ToolResult(
            True,
            {"identifier": issue.identifier, "comment_id": posted.comment.id, "url": posted.url},
        )
    if isinstance(call, AttachUrl):
        data = await api.data(
            queries.ATTACH_URL, {"issueId": issue.id, "url": call.url, "title": call.title}
        )
        payload = _payload(data, "attachmentLinkURL")
        if not payload.get("success"):
            return _rejected(ATTACH_URL, issue)
        attachment = _payload(payload, "attachment")
        return ToolResult(
            True,
            {
                "identifier": issue.identifier,
                "attachment_id": attachment.get("id"),
                "url": attachment.get("url", call.url),
                "title": attachment.get("title", call.title),
            },
        )
    answer = await api.send(call.query, call.variables)
    if answer.errors:
        return ToolResult(
            False,
            api.scrub(
                {
                    "error": GRAPHQL_ERROR,
                    "message": answer.first_error(),
                    "errors": answer.errors,
                    "data": answer.data,
                }
            ),
        )
    return ToolResult(True, api.scrub({"data": answer.data}))


async def _move(api: LinearApi, call: MoveIssue, issue: Issue) -> ToolResult:
    try:
        moved = await writes.move_issue(api, issue, call.state)
    except Rejected as refused:
        return ToolResult.failure(refused.code, refused.message)
    return ToolResult(
        True,
        {
            "identifier": moved.identifier,
            "state": moved.state,
            "previous_state": moved.previous_state,
            "changed": moved.changed,
        },
    )


def _fields(
    name: str, arguments: Mapping[str, Any], limits: Mapping[str, int], *, required: tuple[str, ...]
) -> dict[str, str] | ToolResult:
    """The string arguments of a call, each checked for type, blankness and length."""
    extra = sorted(str(key) for key in arguments if key not in limits)
    if extra:
        allowed = ", ".join(repr(key) for key in limits)
        return invalid_arguments(
            f"unexpected argument(s) {', '.join(extra)}; {name} takes {allowed}"
        )
    values: dict[str, str] = {}
    for key, limit in limits.items():
        value = arguments.get(key)
        if value is None:
            if key in required:
                return invalid_arguments(f"missing required argument {key!r}")
            continue
        if not isinstance(value, str):
            return invalid_arguments(f"{key!r} must be a string, got {type(value).__name__}")
        if not value.strip():
            return invalid_arguments(f"{key!r} must not be empty")
        if len(value) > limit:
            return invalid_arguments(f"{key!r} is longer than {limit} characters")
        values[key] = value
    return values


def _payload(data: Mapping[str, Any], field: str) -> dict[str, Any]:
    value = data.get(field)
    return value if isinstance(value, dict) else {}


def _rejected(tool: str, issue: Issue) -> ToolResult:
    return ToolResult.failure(
        MUTATION_FAILED, f"Linear did not accept {tool} for {issue.identifier} (success: false)"
    )
