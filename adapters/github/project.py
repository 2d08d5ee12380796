"""Projects v2 scope: the issue items of one project, whose workflow state is the single-select
`Status` field.

GraphQL only. The schema version we target has no server-side filter on item field values, so a
state read pages through every item (100 per request) and filters by Status here. Pull requests,
draft issues and archived items are not in scope. Refresh by id is one `nodes(ids:)` request per
100 ids. GraphQL has no conditional requests: every call costs at least one point of the
separate GraphQL budget.

Writes: a move sets the item's Status option (`updateProjectV2ItemFieldValue`); a new issue is
opened over REST in its parent's repository, added to the project (`addProjectV2ItemById`) and
given its Status the same way. The project's states are its Status options, so nothing needs
creating for a workflow's states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from symphony.base.issue import Issue, normalize_state
from symphony.tracker.contract import TRACKER_PAGINATION, TRACKER_RESPONSE, NewTicket, TrackerError

from .._support.graphql import graphql
from .._support.http import HttpClient
from .._support.skipped import SkippedRecords
from . import queries
from .config import STATUS_FIELD, GitHubConfig
from .normalize import Malformed, graphql_issue, identifier, is_repository
from .tools import NOT_IN_SCOPE, UNKNOWN_STATE
from .writes import (
    Rejected,
    after_creation,
    checked_state,
    checked_title,
    open_issue,
    record_blockers,
    resolve_blockers,
)

log = structlog.get_logger(__name__)

MAX_PAGES = 500
"""50,000 items: GitHub's own cap on a project's size."""
IDS_PER_REQUEST = 100  # GitHub's limit on `nodes(ids:)`


def is_rate_limited(error: Mapping[str, Any]) -> bool:
    """GitHub reports an exhausted GraphQL budget as HTTP 200 with this error type."""
    return error.get("type") == "RATE_LIMITED"


@dataclass(frozen=True, slots=True)
class Board:
    """The project's id, its Status field's id and the field's options: what moving an item needs,
    looked up once (again when a state is not among them)."""

    project_id: str
    field_id: str
    options: Mapping[str, tuple[str, str]]
    """normalized option name -> (option id, spelling)."""


class ProjectScope:
    def __init__(self, http: HttpClient, config: GitHubConfig) -> None:
        assert config.project is not None
        self.http = http
        self.config = config
        self.project = config.project
        self._board: Board | None = None
        self._skipped = SkippedRecords(log, "project item", "item")

    async def _query(self, document: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        return await graphql(
            self.http,
            document,
            variables,
            path=self.config.graphql_url,
            is_rate_limited=is_rate_limited,
        )

    async def board(self, *, fresh: bool = False) -> Board:
        """The project id and its Status options, looked up once (again when `fresh`)."""
        if self._board is not None and not fresh:
            return self._board
        document = (
            queries.PROJECT_USER
            if self.project.owner_type == "user"
            else queries.PROJECT_ORGANIZATION
        )
        data = await self._query(
            document,
            {
                "owner": self.project.owner,
                "number": self.project.number,
                "statusField": STATUS_FIELD,
            },
        )
        owner = data.get("owner")
        project = owner.get("projectV2") if isinstance(owner, Mapping) else None
        name = f"{self.project.owner_type} {self.project.owner} project {self.project.number}"
        if not isinstance(project, Mapping) or not isinstance(project.get("id"), str):
            raise TrackerError(TRACKER_RESPONSE, f"GitHub: {name} not found or not visible")
        field = project.get("field")
        if not isinstance(field, Mapping) or not isinstance(field.get("options"), list):
            raise TrackerError(
                TRACKER_RESPONSE, f"GitHub: {name} has no single-select {STATUS_FIELD} field"
            )
        options = {
            normalize_state(o["name"]): (o["id"], o["name"])
            for o in field["options"]
            if isinstance(o, Mapping)
            and isinstance(o.get("name"), str)
            and isinstance(o.get("id"), str)
        }
        self._board = Board(project["id"], str(field.get("id")), options)
        return self._board

    # Reads

    async def by_states(self, states: Sequence[str]) -> list[Issue]:
        wanted = {normalize_state(s) for s in states}
        board = await self.board()
        found: dict[str, Issue] = {}
        skipped: dict[str, str] = {}
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            data = await self._query(
                queries.PROJECT_ITEMS,
                {"projectId": board.project_id, "after": cursor, "statusField": STATUS_FIELD},
            )
            items = (data.get("node") or {}).get("items")
            if not isinstance(items, Mapping) or not isinstance(items.get("nodes"), list):
                raise TrackerError(TRACKER_RESPONSE, "GitHub project items answer has no nodes")
            for node in items["nodes"]:
                try:
                    issue = self._issue(node, board.project_id)
                except Malformed as exc:
                    skipped[str(node.get("id") if isinstance(node, Mapping) else node)] = str(exc)
                    continue
                if issue is not None and normalize_state(issue.state) in wanted:
                    found.setdefault(issue.id, issue)
            page = items.get("pageInfo") or {}
            if not page.get("hasNextPage"):
                break
            following = page.get("endCursor")
            if not isinstance(following, str) or following == cursor:
                raise TrackerError(TRACKER_PAGINATION, "GitHub project items: bad page cursor")
            cursor = following
        self._skipped.update(skipped)
        return list(found.values())

    async def by_ids(self, ids: Sequence[str]) -> list[Issue]:
        unique = list(dict.fromkeys(ids))
        board = await self.board()
        result: list[Issue] = []
        for start in range(0, len(unique), IDS_PER_REQUEST):
            chunk = unique[start : start + IDS_PER_REQUEST]
            data = await self._query(
                queries.ITEMS_BY_ID, {"ids": chunk, "statusField": STATUS_FIELD}
            )
            nodes = data.get("nodes")
            if not isinstance(nodes, list):
                raise TrackerError(TRACKER_RESPONSE, "GitHub nodes(ids:) answer is not a list")
            for node in nodes:
                try:
                    issue = self._issue(node, board.project_id)
                except Malformed as exc:
                    raise TrackerError(TRACKER_RESPONSE, f"GitHub {exc}") from None
                if issue is not None and issue.id in chunk:
                    result.append(issue)
        return result

    def _issue(self, node: Any, project_id: str) -> Issue | None:
        """The Issue of one item; None when the item is outside the scope."""
        if (
            not isinstance(node, Mapping)
            or node.get("__typename", "ProjectV2Item") != "ProjectV2Item"
        ):
            return None  # an id that no longer resolves, or names something else
        item_id = node.get("id")
        if not isinstance(item_id, str) or not item_id:
            raise Malformed("project item without an id")
        project = node.get("project")
        if isinstance(project, Mapping) and project.get("id") != project_id:
            return None
        content = node.get("content")
        if node.get("isArchived") or not isinstance(content, Mapping):
            return None
        if content.get("__typename") != "Issue":
            return None  # pull requests and draft issues are not worked on
        status = node.get("status")
        state = status.get("name") if isinstance(status, Mapping) else None
        if not isinstance(state, str) or not state.strip():
            return None  # no Status: on no column of the board
        return graphql_issue(content, self.config, item_id=item_id, state=state)

    # Writes

    async def option_for(self, state: str) -> tuple[Board, tuple[str, str]]:
        """The board and the Status option (id, spelling) named `state`, case-insensitively;
        `Rejected` (listing the options) when there is none."""
        board = await self.board()
        option = board.options.get(normalize_state(state))
        if option is None:
            # Options may have been added since we looked: look once more before refusing.
            board = await self.board(fresh=True)
            option = board.options.get(normalize_state(state))
        if option is None:
            names = ", ".join(spelling for _, spelling in board.options.values())
            raise Rejected(
                f"{state!r} is not a {STATUS_FIELD} option; options: {names}", UNKNOWN_STATE
            )
        return board, option

    async def states(self) -> list[str]:
        """Every Status option, as GitHub spells it (read afresh)."""
        board = await self.board(fresh=True)
        return [spelling for _, spelling in board.options.values()]

    async def move(self, issue: Issue, state: str) -> dict[str, Any]:
        """Set the item's Status to `state`; the move tool's result. No write when it is there."""
        item_id = (issue.native_ref or {}).get("project_item_id") or issue.id
        board, option = await self.option_for(state)
        current = await self.by_ids([str(item_id)])
        if not current:
            raise Rejected(f"{issue.identifier} is not on the project", NOT_IN_SCOPE)
        previous = current[0].state
        changed = normalize_state(previous) != normalize_state(option[1])
        if changed:
            await self._set_status(board, str(item_id), option[0])
        log.info("issue moved", issue_identifier=issue.identifier, state=option[1], changed=changed)
        return {
            "identifier": issue.identifier,
            "state": option[1],
            "previous_state": previous,
            "changed": changed,
        }

    async def _set_status(self, board: Board, item_id: str, option_id: str) -> None:
        await self._query(
            queries.SET_STATUS,
            {
                "projectId": board.project_id,
                "itemId": item_id,
                "fieldId": board.field_id,
                "optionId": option_id,
            },
        )

    async def create(self, ticket: NewTicket) -> Issue:
        """Open an issue in the parent's repository, add it to the project with the Status
        `ticket.state`, record its blockers; returns it as a refresh reads it."""
        title = checked_title(ticket.title)
        state = checked_state(ticket.state)
        parent = ticket.parent
        repository = (parent.native_ref or {}).get("repository") if parent is not None else None
        if not isinstance(repository, str) or not is_repository(repository):
            # A project spans repositories; only a parent says which one the issue belongs in.
            raise Rejected(
                "a new project issue needs a parent issue whose repository it shares",
                NOT_IN_SCOPE,
            )
        board, option = await self.option_for(state)
        blockers = await resolve_blockers(self.http, ticket.blocked_by, repository)
        created = await open_issue(self.http, repository, title, ticket.description, [])
        number = int(created["number"])
        name = identifier(repository, number)
        with after_creation(name):
            node_id = created.get("node_id")
            if not isinstance(node_id, str) or not node_id:
                raise TrackerError(TRACKER_RESPONSE, "the new issue has no node_id")
            data = await self._query(
                queries.ADD_TO_PROJECT, {"projectId": board.project_id, "contentId": node_id}
            )
            added = (data.get("addProjectV2ItemById") or {}).get("item")
            item_id = added.get("id") if isinstance(added, Mapping) else None
            if not isinstance(item_id, str) or not item_id:
                raise TrackerError(TRACKER_RESPONSE, "adding it to the project gave no item id")
            await self._set_status(board, item_id, option[0])
            await record_blockers(self.http, repository, number, blockers)
            found = await self.by_ids([item_id])
        if not found:
            raise TrackerError(
                TRACKER_RESPONSE, f"GitHub created {name} on the project but cannot read it back"
            )
        log.info(
            "issue created",
            issue_identifier=name,
            state=option[1],
            blocked_by=[b.identifier for b in blockers] or None,
        )
        return found[0]
