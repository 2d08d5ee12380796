"""The changes the Linear adapter makes, shared by the daemon's writes and the agent tools.

Moves, comments, links and new tickets resolve names the way Linear scopes them: workflow states
belong to a team, so a state name is looked up (case-insensitively) among the states of the
issue's team; a blocker named by identifier is resolved to its id with `issue(id:)`, which
takes either. Every function raises `TrackerError`: a write Linear cannot do as asked raises
`Rejected` (category `tracker_rejected`, plus the failure code the agent tools report), and a
Linear that cannot be used raises the request categories of `LinearApi`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from symphony.base.issue import Issue, normalize_state
from symphony.base.tools import is_inline
from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_RESPONSE,
    Comment,
    NewTicket,
    TrackerError,
)

from .._support.errors import Rejected as Rejected
from .._support.normalize import parse_timestamp
from . import queries
from .api import Answer, LinearApi
from .config import LinearConfig

# Failure codes, as the agent tools report them.
ISSUE_NOT_FOUND = "issue_not_found"
UNKNOWN_STATE = "unknown_state"
MUTATION_FAILED = "mutation_failed"
COMMENT_NOT_FOUND = "comment_not_found"
COMMENT_NOT_OWN = "comment_not_own"
UNKNOWN_BLOCKER = "unknown_blocker"
OUT_OF_SCOPE = "out_of_scope"
INVALID_TICKET = "invalid_ticket"

MAX_COMMENT_PAGES = 100
"""A comment listing longer than this many pages (10,000 comments) is treated as a paging fault."""

# A Linear identifier: the team's key, a dash, the issue's number (`ENG-12`).
_IDENTIFIER = re.compile(r"^[A-Za-z0-9]+-[0-9]+$")
_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class State:
    """A workflow state of a Linear team: its name, and the id a move or a new issue is given."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Team:
    """A team and its workflow states, as one answer gave them."""

    id: str | None
    key: str | None
    states: tuple[State, ...]

    def state_named(self, name: str) -> State:
        """The state called `name` (case-insensitively), or `Rejected` listing the others."""
        wanted = normalize_state(name)
        found = next((s for s in self.states if normalize_state(s.name) == wanted), None)
        if found is None:
            names = ", ".join(s.name for s in self.states) or "none found"
            raise Rejected(
                f"{name!r} is not a workflow state of team {self.key or '?'}; "
                f"valid states: {names}",
                UNKNOWN_STATE,
            )
        return found


@dataclass(frozen=True, slots=True)
class Moved:
    """What a move did: the issue's state now and before, and whether it changed."""

    identifier: str
    state: str
    previous_state: str | None
    changed: bool


@dataclass(frozen=True, slots=True)
class Posted:
    """A comment Linear stored on an issue, with the URL it is seen at."""

    comment: Comment
    url: str | None


@dataclass(frozen=True, slots=True)
class Attached:
    """The attachment that links a URL to an issue, as Linear keeps it (one per URL and issue)."""

    id: str | None
    url: str
    title: str | None


@dataclass(frozen=True, slots=True)
class Home:
    """Where a new ticket goes: a team, and the configured project when the scope is one."""

    team: Team
    project_id: str | None


@dataclass(frozen=True, slots=True)
class Created:
    """A new Linear issue: its id, its identifier, and the blockers recorded on it."""

    id: str
    identifier: str
    blocked_by: tuple[str, ...]


# Moves and comments: what the daemon and the agent tools both do


async def move_issue(api: LinearApi, issue: Issue, state: str) -> Moved:
    """Put `issue` in the state of its team called `state`; no mutation when it is there."""
    # States belong to teams, and the issue may have changed team since it was read: the
    # states are looked up from the issue's current team, in the same request as its state.
    data = await api.data(queries.ISSUE_TEAM_STATES, {"id": issue.id})
    node = _object(data.get("issue"))
    if not node:
        raise Rejected(
            f"issue {issue.identifier} is not visible to the API key any more", ISSUE_NOT_FOUND
        )
    target = team_from_node(node.get("team")).state_named(state)
    current = _object(node.get("state"))
    moved = Moved(
        identifier=_text(node.get("identifier")) or issue.identifier,
        state=target.name,
        previous_state=_text(current.get("name")),
        changed=current.get("id") != target.id,
    )
    if moved.changed:
        data = await api.data(queries.MOVE_ISSUE, {"id": issue.id, "stateId": target.id})
        _succeeded(data, "issueUpdate", f"the move of {issue.identifier}")
    return moved


async def add_comment(api: LinearApi, issue: Issue, body: str) -> Posted:
    """Post `body` on `issue`; the comment comes back as Linear stored it."""
    data = await api.data(queries.ADD_COMMENT, {"issueId": issue.id, "body": body})
    payload = _succeeded(data, "commentCreate", f"the comment on {issue.identifier}")
    node = _object(payload.get("comment"))
    return Posted(comment_from_node(node), _text(node.get("url")))


async def edit_comment(
    api: LinearApi, issue: Issue, comment_id: str, body: str, *, author_id: str
) -> Comment:
    """Replace the body of a comment on `issue` written by `author_id` (the daemon's user)."""
    if not comment_id.strip():
        raise Rejected("a comment id is needed to edit a comment", COMMENT_NOT_FOUND)
    node = _found(api, await api.send(queries.COMMENT_OWNER, {"id": comment_id}), "comment")
    if node is None or _object(node.get("issue")).get("id") != issue.id:
        raise Rejected(
            f"comment {comment_id} is not a comment on {issue.identifier}", COMMENT_NOT_FOUND
        )
    # Only the daemon's own comments are edited; Linear would refuse others' as "forbidden",
    # which reads like a problem with the key.
    if _object(node.get("user")).get("id") != author_id:
        raise Rejected(
            f"comment {comment_id} on {issue.identifier} was not written by the API key's user",
            COMMENT_NOT_OWN,
        )
    data = await api.data(queries.EDIT_COMMENT, {"id": comment_id, "body": body})
    payload = _succeeded(data, "commentUpdate", f"the edit of comment {comment_id}")
    return comment_from_node(_object(payload.get("comment")))


async def list_comments(api: LinearApi, issue: Issue) -> list[Comment]:
    """Every comment on `issue`, oldest first (ties keep Linear's order)."""
    found: dict[str, Comment] = {}
    cursor: str | None = None
    for _ in range(MAX_COMMENT_PAGES):
        variables = {"id": issue.id, "first": queries.COMMENTS_PER_PAGE, "after": cursor}
        data = await api.data(queries.ISSUE_COMMENTS, variables)
        connection = _object(_object(data.get("issue")).get("comments"))
        nodes = connection.get("nodes")
        if not isinstance(nodes, list):
            raise TrackerError(TRACKER_RESPONSE, "Linear's answer has no issue.comments.nodes list")
        for node in nodes:
            comment = comment_from_node(node)
            found.setdefault(comment.id, comment)
        page = _object(connection.get("pageInfo"))
        if page.get("hasNextPage") is not True:
            break
        following = page.get("endCursor")
        if not isinstance(following, str) or not following or following == cursor:
            raise TrackerError(
                TRACKER_PAGINATION,
                f"Linear said more comments follow on {issue.identifier} but gave no new cursor",
            )
        cursor = following
    else:
        raise TrackerError(
            TRACKER_PAGINATION,
            f"the comments of {issue.identifier} did not end within {MAX_COMMENT_PAGES} pages",
        )
    return sorted(found.values(), key=lambda c: c.created_at or _NEVER)


def comment_from_node(node: Any) -> Comment:
    """A Comment from a `SymphonyComment` node; the author is the user's display name, else
    their name (None for comments without a user, such as integrations')."""
    comment = _object(node)
    comment_id = _text(comment.get("id"))
    body = comment.get("body")
    if comment_id is None or not isinstance(body, str):
        raise TrackerError(TRACKER_RESPONSE, "Linear answered a comment without an id or body")
    user = _object(comment.get("user"))
    created = parse_timestamp(comment.get("createdAt"))
    return Comment(
        id=comment_id,
        body=body,
        author=_text(user.get("displayName")) or _text(user.get("name")),
        created_at=created.astimezone(UTC) if created is not None else None,
        # A comment with a user is a workspace member's; a guest sees only some teams, and a
        # comment without one came through an integration (an email, a bot).
        author_member=bool(user) and user.get("guest") is not True,
    )


async def attach_url(api: LinearApi, issue: Issue, url: str, title: str | None) -> Attached:
    """Link `url` to `issue` as an attachment. Linear keeps one attachment per URL and issue
    (`attachmentLinkURL` updates the one it has), so linking the same URL again adds nothing;
    a URL of an integration the workspace has (a GitHub pull request) becomes its rich link."""
    data = await api.data(queries.ATTACH_URL, {"issueId": issue.id, "url": url, "title": title})
    payload = _succeeded(data, "attachmentLinkURL", f"the link on {issue.identifier}")
    attachment = _object(payload.get("attachment"))
    return Attached(
        id=_text(attachment.get("id")),
        url=_text(attachment.get("url")) or url,
        title=_text(attachment.get("title")) or title,
    )


# Teams, scope and new tickets


def team_from_node(node: Any) -> Team:
    team = _object(node)
    states = _object(team.get("states")).get("nodes")
    return Team(
        id=_text(team.get("id")),
        key=_text(team.get("key")),
        states=tuple(
            State(state["id"], state["name"])
            for state in (states if isinstance(states, list) else [])
            if isinstance(state, dict)
            and isinstance(state.get("id"), str)
            and isinstance(state.get("name"), str)
        ),
    )


async def scope_teams(api: LinearApi, config: LinearConfig) -> tuple[list[Team], str | None]:
    """The teams of the configured scope with their states, and the project's id when the
    scope is a project. A scope the key cannot see is `Rejected`."""
    if config.project_slug is None:
        data = await api.data(queries.TEAM_BY_KEY, {"key": config.team_key})
        nodes = _object(data.get("teams")).get("nodes")
        if not isinstance(nodes, list) or not nodes:
            raise Rejected(f"Linear has no {config.scope} the API key can see", OUT_OF_SCOPE)
        return [team_from_node(nodes[0])], None
    data = await api.data(queries.PROJECT_TEAMS, {"slug": config.project_slug})
    nodes = _object(data.get("projects")).get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise Rejected(f"Linear has no {config.scope} the API key can see", OUT_OF_SCOPE)
    project = _object(nodes[0])
    teams = _object(project.get("teams"))
    if _object(teams.get("pageInfo")).get("hasNextPage") is True:
        raise TrackerError(
            TRACKER_PAGINATION,
            f"{config.scope} spans more than {queries.TEAMS_PER_PROJECT} teams",
        )
    team_nodes = teams.get("nodes")
    return [
        team_from_node(team) for team in (team_nodes if isinstance(team_nodes, list) else [])
    ], _text(project.get("id"))


async def home_of(api: LinearApi, config: LinearConfig, parent: Issue | None) -> Home:
    """Where a ticket split from `parent` goes: the parent's current team (which must be in
    the configured scope), else the configured team, or the project's only team."""
    if parent is None:
        teams, project_id = await scope_teams(api, config)
        if len(teams) != 1:
            keys = ", ".join(t.key or "?" for t in teams) or "none"
            raise Rejected(
                f"{config.scope} spans teams {keys}: a new issue needs a parent to pick one",
                OUT_OF_SCOPE,
            )
        return Home(teams[0], project_id)
    node = _found(api, await api.send(queries.ISSUE_SCOPE, {"id": parent.id}), "issue")
    if node is None:
        raise Rejected(
            f"parent {parent.identifier} is not visible to the API key any more", ISSUE_NOT_FOUND
        )
    team = team_from_node(node.get("team"))
    project = _object(node.get("project"))
    if config.project_slug is not None:
        in_scope = project.get("slugId") == config.project_slug
    else:
        in_scope = team.key == config.team_key
    if not in_scope:
        raise Rejected(f"parent {parent.identifier} is not in {config.scope}", OUT_OF_SCOPE)
    return Home(team, _text(project.get("id")) if config.project_slug is not None else None)


async def resolve_blockers(api: LinearApi, identifiers: Sequence[str]) -> list[tuple[str, str]]:
    """(identifier, id) of each blocker, once each; an identifier Linear cannot resolve is
    `Rejected`. One request per blocker."""
    resolved: dict[str, str] = {}
    for given in identifiers:
        name = given.strip().upper()
        if name in resolved:
            continue
        if not _IDENTIFIER.match(name):
            raise Rejected(
                f"blocker {given!r} is not a Linear identifier such as ENG-12", UNKNOWN_BLOCKER
            )
        node = _found(api, await api.send(queries.ISSUE_REF, {"id": name}), "issue")
        issue_id = _text(node.get("id")) if node is not None else None
        if issue_id is None:
            raise Rejected(f"blocker {name} is not an issue the API key can see", UNKNOWN_BLOCKER)
        resolved[name] = issue_id
    return list(resolved.items())


async def create_ticket(api: LinearApi, config: LinearConfig, ticket: NewTicket) -> Created:
    """Create `ticket` in its home team in `ticket.state`, then record its blockers. Every name
    is resolved before anything is created; a blocker Linear refuses once the issue exists
    raises an error naming the created issue."""
    title = ticket.title.strip()
    if not title or not is_inline(title):
        raise Rejected("a new Linear issue needs a one-line title", INVALID_TICKET)
    home = await home_of(api, config, ticket.parent)
    if home.team.id is None:
        raise TrackerError(TRACKER_RESPONSE, "Linear answered a team without an id")
    state = home.team.state_named(ticket.state)
    blockers = await resolve_blockers(api, ticket.blocked_by)
    variables = {
        "teamId": home.team.id,
        "title": title,
        "description": ticket.description.strip() or None,
        "stateId": state.id,
        "projectId": home.project_id,
    }
    data = await api.data(queries.CREATE_ISSUE, variables)
    node = _object(_succeeded(data, "issueCreate", f"the new issue {title!r}").get("issue"))
    issue_id, identifier = _text(node.get("id")), _text(node.get("identifier"))
    if issue_id is None or identifier is None:
        raise TrackerError(TRACKER_RESPONSE, "Linear created an issue but did not say which")
    for blocker, blocker_id in blockers:
        what = f"{identifier} was created, but recording {blocker} as its blocker failed"
        try:
            data = await api.data(
                queries.ADD_BLOCKER, {"blockerId": blocker_id, "issueId": issue_id}
            )
        except TrackerError as exc:
            raise TrackerError(
                exc.category, f"{what}: {exc.message}", retry_after_s=exc.retry_after_s
            ) from None
        _succeeded(data, "issueRelationCreate", what)
    return Created(issue_id, identifier, tuple(name for name, _ in blockers))


# Answers


def _succeeded(data: Mapping[str, Any], field: str, what: str) -> dict[str, Any]:
    """A mutation's payload, or `Rejected` when Linear answered `success: false`."""
    payload = _object(data.get(field))
    if payload.get("success") is not True:
        raise Rejected(f"Linear did not accept {what} (success: false)", MUTATION_FAILED)
    return payload


def _found(api: LinearApi, answer: Answer, field: str) -> dict[str, Any] | None:
    """The object Linear answered for a lookup by id, or None when it does not exist. Linear
    reports an unknown id as an error ("Entity not found", type "invalid input"); any other
    error is a `tracker_response` failure."""
    if answer.errors and not all(_is_not_found(e) for e in answer.errors):
        raise TrackerError(
            TRACKER_RESPONSE, api.scrub(f"Linear GraphQL error: {answer.first_error()}")
        )
    node = _object((answer.data or {}).get(field))
    return node or None


def _is_not_found(error: Mapping[str, Any]) -> bool:
    extensions = _object(error.get("extensions"))
    kind = extensions.get("type")
    message = error.get("message")
    return (isinstance(kind, str) and kind.lower() == "invalid input") or (
        isinstance(message, str) and "not found" in message.lower()
    )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
