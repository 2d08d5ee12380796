"""The agent tools of the Linear adapter: their specs, argument checks, and the calls they make.

The typed tools (`linear_move_issue`, `linear_add_comment`, `linear_attach_url`) act only on the
issue of the session that calls them, addressed by its Linear id. `linear_graphql` runs any
query or mutation with the daemon's API key, so it reaches whatever that key reaches; it exists
for the long tail (reading comments, sub-issues, linking a PR) that typed tools would only
flatten.

`parse_call` turns a raw call into a validated call or a failure the agent can act on; `run`
performs a validated call and may raise `TrackerError`, which the tracker turns into a failure.
The move, the comment and the link are the daemon's own writes (`adapters.linear.writes`) with
the agent's result shapes; the move tool is marked `moves_ticket`, so stage mode can withhold it.
"""

from __future__ import annotations

from typing import Any

from symphony.base.issue import Issue
from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker import tools as generic

from . import writes
from .api import LinearApi
from .writes import ISSUE_NOT_FOUND as ISSUE_NOT_FOUND
from .writes import UNKNOWN_STATE as UNKNOWN_STATE
from .writes import Rejected

MOVE_ISSUE = "linear_move_issue"
ADD_COMMENT = "linear_add_comment"
ATTACH_URL = "linear_attach_url"
GRAPHQL = "linear_graphql"
TOOL_NAMES = (MOVE_ISSUE, ADD_COMMENT, ATTACH_URL, GRAPHQL)

GRAPHQL_ERROR = "graphql_error"

MAX_COMMENT_CHARS = 65_536
MAX_TITLE_CHARS = 250
MAX_QUERY_CHARS = 100_000


ToolCall = generic.MoveIssue | generic.AddComment | generic.AddLink | generic.GraphqlQuery

QUERY = generic.Arg("query", MAX_QUERY_CHARS, "A GraphQL document with one operation.", strip=False)

TOOLBOX = generic.Toolbox(
    "Linear",
    (
        generic.move_tool(
            MOVE_ISSUE,
            "Move the Linear issue you are working on to another workflow state of its "
            "team, by name (case-insensitive), e.g. 'In Progress' or 'Human Review'. An "
            "unknown name fails and lists the team's states.",
            state_help="The target workflow state's name.",
        ),
        generic.comment_tool(
            ADD_COMMENT,
            "Add a Markdown comment to the Linear issue you are working on.",
            max_chars=MAX_COMMENT_CHARS,
        ),
        generic.link_tool(
            ATTACH_URL,
            "Attach a link (for example your pull request) to the Linear issue you are "
            "working on. Linking the same URL again updates the existing attachment.",
            url_help="An http(s) URL.",
            label=generic.Arg(
                "title", MAX_TITLE_CHARS, "The attachment's title (optional).", required=False
            ),
            make=lambda values: generic.http_link(values, "title"),
        ),
        generic.Tool(
            GRAPHQL,
            "Run one GraphQL query or mutation against Linear's API with the daemon's "
            "credentials (it can read and change anything that key can reach: use it for "
            "what the other linear_ tools do not cover). Returns {data} or the GraphQL "
            "errors with any partial data.",
            (
                generic.Arg(
                    "query", MAX_QUERY_CHARS, "A GraphQL document with one operation.", strip=False
                ),
            ),
            lambda values: generic.GraphqlQuery(values["query"], values.get("variables", {})),
            # It runs mutations too, so it can change a ticket's state: stage mode, where
            # moves are the daemon's, withholds it like the move tool.
            moves_ticket=True,
            objects=(generic.ObjectArg("variables", "Variables, if any."),),
        ),
    ),
)


def tool_specs() -> list[ToolSpec]:
    return TOOLBOX.specs()


def parse_call(name: str, arguments: Any) -> ToolCall | ToolResult:
    """A validated call, or the failure result to hand back to the agent."""
    call: ToolCall | ToolResult = TOOLBOX.parse(name, arguments)
    return call


async def run(api: LinearApi, call: ToolCall, issue: Issue) -> ToolResult:
    """Perform a validated call for `issue`; raises `TrackerError` when Linear cannot be used."""
    if isinstance(call, generic.MoveIssue):
        return await _move(api, call, issue)
    if isinstance(call, generic.AddComment):
        try:
            posted = await writes.add_comment(api, issue, call.body)
        except Rejected as refused:
            return ToolResult.failure(refused.code, refused.message)
        return ToolResult(
            True,
            {"identifier": issue.identifier, "comment_id": posted.comment.id, "url": posted.url},
        )
    if isinstance(call, generic.AddLink):
        try:
            attached = await writes.attach_url(api, issue, call.url, call.label)
        except Rejected as refused:
            return ToolResult.failure(refused.code, refused.message)
        return ToolResult(
            True,
            {
                "identifier": issue.identifier,
                "attachment_id": attached.id,
                "url": attached.url,
                "title": attached.title,
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


async def _move(api: LinearApi, call: generic.MoveIssue, issue: Issue) -> ToolResult:
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
