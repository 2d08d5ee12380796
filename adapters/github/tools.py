"""The agent tools of the `github` adapter: their declarations, and the checks GitHub adds.

Executing them is the daemon's write code (`GitHubTracker.move_issue` and `add_comment` run the
same steps): moving is the scope's business (labels or a project field); commenting, linking
and the read-only GraphQL tool are shared by both scopes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse

from symphony.base.tools import ToolResult, ToolSpec, invalid_arguments
from symphony.tracker import tools as generic

MOVE_ISSUE = "github_move_issue"
ADD_COMMENT = "github_add_comment"
LINK_PULL_REQUEST = "github_link_pull_request"
GRAPHQL = "github_graphql"
NAMES = (MOVE_ISSUE, ADD_COMMENT, LINK_PULL_REQUEST, GRAPHQL)

UNKNOWN_STATE = "unknown_state"
NOT_IN_SCOPE = "not_in_scope"
GRAPHQL_ERROR = "graphql_error"

MAX_COMMENT_CHARS = 65_536  # GitHub's limit on an issue comment body
MAX_QUERY_CHARS = 20_000


ToolCall = generic.MoveIssue | generic.AddComment | generic.AddLink | generic.GraphqlQuery


def toolbox(scope_note: str, states_note: str, web_host: str) -> generic.Toolbox:
    return generic.Toolbox(
        "GitHub",
        (
            generic.move_tool(
                MOVE_ISSUE,
                "Move the GitHub issue you are working on to another workflow state "
                f"({scope_note}). {states_note}",
                state_help="The target state name, e.g. 'Human Review'.",
            ),
            generic.comment_tool(
                ADD_COMMENT,
                "Add a Markdown comment to the GitHub issue you are working on.",
                max_chars=MAX_COMMENT_CHARS,
            ),
            generic.link_tool(
                LINK_PULL_REQUEST,
                "Link a pull request to the issue you are working on. GitHub has no API to link "
                "an existing pull request to an issue, so this posts a comment naming it, once "
                "per pull request (put 'Closes #<number>' in the pull request body to have "
                "GitHub close the issue on merge).",
                url_help="https://<host>/<owner>/<repo>/pull/<number>",
                make=lambda values: _pull_request(values["url"], web_host),
            ),
            generic.Tool(
                GRAPHQL,
                "Run a read-only GitHub GraphQL query with the daemon's credential (mutations "
                "and subscriptions are refused). Returns the query's `data`.",
                (generic.Arg("query", MAX_QUERY_CHARS, "A GraphQL document.", strip=False),),
                lambda values: _read_query(values["query"], values.get("variables", {})),
                objects=(generic.ObjectArg("variables", "Variables, if any."),),
            ),
        ),
    )


def tool_specs(scope_note: str, states_note: str) -> list[ToolSpec]:
    return toolbox(scope_note, states_note, "").specs()


def parse_call(name: str, arguments: Any, web_host: str) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    call: ToolCall | ToolResult = toolbox("", "", web_host).parse(name, arguments)
    return call


def pull_request_repository(url: str, web_host: str) -> str | None:
    """`owner/name` of a pull request page of `web_host`, or None for any other URL."""
    pattern = rf"^https://{re.escape(web_host)}/([A-Za-z0-9-]+/[A-Za-z0-9._-]+)/pull/[1-9][0-9]*/?$"
    found = re.match(pattern, url, flags=re.IGNORECASE)
    return found.group(1) if found else None


def _pull_request(url: str, web_host: str) -> ToolCall | ToolResult:
    if pull_request_repository(url, web_host) is None:
        return invalid_arguments(
            f"'url' must be a pull request URL: https://{web_host}/<owner>/<repo>/pull/<number>"
        )
    return generic.AddLink(url.rstrip("/"))


def _read_query(query: str, variables: Mapping[str, Any]) -> ToolCall | ToolResult:
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
    return generic.GraphqlQuery(query, dict(variables))
