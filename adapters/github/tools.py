"""The agent tools of the `github` adapter: their specs, and turning a raw call into a
validated request or a failure the agent can act on.

Executing them is the daemon's write code (`GitHubTracker.move_issue` and `add_comment` run the
same steps): moving is the scope's business (labels or a project field); commenting and the
read-only GraphQL tool are shared by both scopes.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse

from symphony.base.tools import INVALID_ARGUMENTS as INVALID_ARGUMENTS
from symphony.base.tools import (
    ToolResult,
    ToolSpec,
    invalid_arguments,
    is_inline,
)

MOVE_ISSUE = "github_move_issue"
ADD_COMMENT = "github_add_comment"
LINK_PULL_REQUEST = "github_link_pull_request"
GRAPHQL = "github_graphql"
NAMES = (MOVE_ISSUE, ADD_COMMENT, LINK_PULL_REQUEST, GRAPHQL)

UNKNOWN_TOOL = "unknown_tool"
UNKNOWN_STATE = "unknown_state"
NOT_IN_SCOPE = "not_in_scope"
GRAPHQL_ERROR = "graphql_error"

MAX_STATE_CHARS = 100
MAX_COMMENT_CHARS = 65_536  # GitHub's limit on an issue comment body
MAX_QUERY_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class MoveIssue:
    state: str


@dataclass(frozen=True, slots=True)
class AddComment:
    body: str


@dataclass(frozen=True, slots=True)
class LinkPullRequest:
    url: str


@dataclass(frozen=True, slots=True)
class ReadQuery:
    query: str
    variables: Mapping[str, Any]


ToolCall = MoveIssue | AddComment | LinkPullRequest | ReadQuery


def tool_specs(scope_note: str, states_note: str) -> list[ToolSpec]:
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
                "Move the GitHub issue you are working on to another workflow state "
                f"({scope_note}). {states_note}"
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
            description="Add a Markdown comment to the GitHub issue you are working on.",
            input_schema=strings(
                body={"type": "string", "minLength": 1, "maxLength": MAX_COMMENT_CHARS}
            ),
        ),
        ToolSpec(
            name=LINK_PULL_REQUEST,
            description=(
                "Link a pull request to the issue you are working on. GitHub has no API to link "
                "an existing pull request to an issue, so this posts a comment naming it (put "
                "'Closes #<number>' in the pull request body to have GitHub close the issue on "
                "merge)."
            ),
            input_schema=strings(
                url={
                    "type": "string",
                    "description": "https://<host>/<owner>/<repo>/pull/<number>",
                }
            ),
        ),
        ToolSpec(
            name=GRAPHQL,
            description=(
                "Run a read-only GitHub GraphQL query with the daemon's credential (mutations "
                "and subscriptions are refused). Returns the query's `data`."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
                    "variables": {"type": "object"},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        ),
    ]


_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    MOVE_ISSUE: ({"state"}, {"state"}),
    ADD_COMMENT: ({"body"}, {"body"}),
    LINK_PULL_REQUEST: ({"url"}, {"url"}),
    GRAPHQL: ({"query"}, {"query", "variables"}),
}


def parse_call(name: str, arguments: Any, web_host: str) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    if name not in _FIELDS:
        return ToolResult.failure(
            UNKNOWN_TOOL, f"{name!r} is not a GitHub tool; use one of {', '.join(NAMES)}"
        )
    # Some agent protocols deliver arguments as a JSON string rather than an object.
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    required, allowed = _FIELDS[name]
    if not isinstance(arguments, Mapping):
        return invalid_arguments(f"{name} takes an object with {', '.join(sorted(allowed))}")
    extra = sorted(str(key) for key in arguments if key not in allowed)
    if extra:
        return invalid_arguments(f"unexpected argument(s) {', '.join(extra)} for {name}")
    for key in sorted(required):
        value = arguments.get(key)
        if not isinstance(value, str) or not value.strip():
            return invalid_arguments(f"{key!r} must be a non-empty string")
    if name == MOVE_ISSUE:
        state = str(arguments["state"]).strip()
        if len(state) > MAX_STATE_CHARS or not is_inline(state):
            return invalid_arguments(
                f"'state' must be one line of at most {MAX_STATE_CHARS} characters"
            )
        return MoveIssue(state)
    if name == ADD_COMMENT:
        body = str(arguments["body"])
        if len(body) > MAX_COMMENT_CHARS:
            return invalid_arguments(f"'body' is longer than {MAX_COMMENT_CHARS} characters")
        return AddComment(body)
    if name == LINK_PULL_REQUEST:
        return _pull_request(str(arguments["url"]).strip(), web_host)
    return _read_query(arguments)


def _pull_request(url: str, web_host: str) -> ToolCall | ToolResult:
    pattern = rf"^https://{re.escape(web_host)}/[A-Za-z0-9-]+/[A-Za-z0-9._-]+/pull/[1-9][0-9]*/?$"
    if not re.match(pattern, url, flags=re.IGNORECASE):
        return invalid_arguments(
            f"'url' must be a pull request URL: https://{web_host}/<owner>/<repo>/pull/<number>"
        )
    return LinkPullRequest(url.rstrip("/"))


def _read_query(arguments: Mapping[str, Any]) -> ToolCall | ToolResult:
    query = str(arguments["query"])
    if len(query) > MAX_QUERY_CHARS:
        return invalid_arguments(f"'query' is longer than {MAX_QUERY_CHARS} characters")
    variables = arguments.get("variables", {})
    if variables is None:
        variables = {}
    if not isinstance(variables, Mapping):
        return invalid_arguments("'variables' must be an object")
    try:
        document = parse(query)
    except GraphQLError as exc:
        return invalid_arguments(f"'query' is not valid GraphQL: {exc.message}")
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if not operations:
        return invalid_arguments("'query' contains no operation")
    # Checked on the parsed document, so no spelling (aliases, comments, several operations
    # with an operationName chosen later) can smuggle a write past the check.
    writes = [op for op in operations if op.operation is not OperationType.QUERY]
    if writes:
        return ToolResult.failure(
            "read_only",
            f"{GRAPHQL} is read-only: {writes[0].operation.value} operations are refused; use "
            f"{MOVE_ISSUE}, {ADD_COMMENT} or {LINK_PULL_REQUEST} to change the issue",
        )
    return ReadQuery(query, dict(variables))
