"""The `linear` tracker: issues of one Linear project or team, read and written over GraphQL.

Profile (SPEC.md has the full table):
- `tracker.provider`: exactly one of `project_slug` (a project's `slugId`) or `team_key`;
  `api_key` (default `$LINEAR_API_KEY`, sent as `Authorization: <key>`); `endpoint` (default
  `https://api.linear.app/graphql`); optional `assignee` (`me` or a user id).
- Candidate reads filter by scope and exact state names server-side, page with Linear's cursors
  (`PAGE_SIZE` per page, at most `MAX_PAGES`), keep the server's order (oldest first) and keep
  the first sighting of an id. A refresh asks for up to `PAGE_SIZE` ids per request and omits
  ids Linear no longer returns or that left the configured project/team.
- `id` is Linear's issue UUID; `native_ref` holds team, state and project ids (no secrets).
  Priority 0 ("no priority") becomes null; labels are lower-cased.
- `dispatchable` is false while an issue is blocked (an inverse `blocks` relation) by an issue
  that is neither in a configured terminal state nor of a finished Linear state type, and, when
  `assignee` is set, unless the issue is assigned to that user.
- State reads skip nodes lacking id, identifier, title or state name and log each once per
  problem; a refresh fails with `tracker_response` instead, since omission means "gone".
- Tools are in `adapters.linear.tools`; they never raise and never show the key.
- The daemon's writes (`adapters.linear.writes`, shared with the tools): `move_issue` is the
  move tool's lookup and `issueUpdate`; `add_comment` is its `commentCreate`; `edit_comment`
  first checks that the comment is on the issue and was written by the key's user, then sends
  `commentUpdate`; `list_comments` pages `issue.comments` (`COMMENTS_PER_PAGE`, at most
  `MAX_COMMENT_PAGES`) and sorts them oldest first, the author being the user's display name,
  else their name. `create_issue` resolves the home team (the parent's, which must be in
  scope, else the configured team or the project's only team), the state by name in that team
  and each blocker identifier with `issue(id:)`, rejecting any that fails before anything is
  created; then `issueCreate`, one `issueRelationCreate` (`blocks`) per blocker, and a
  read-back. `link_pull_request` is the link tool's `attachmentLinkURL` (one attachment per
  URL and issue). `tracker_states()` lists the scope's workflow state names; `ensure_states`
  creates nothing (Linear states are team settings). `success: false` and unknown names are
  `tracker_rejected`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from symphony.base.issue import Issue, normalize_state
from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker import tools as generic
from symphony.tracker.contract import (
    TRACKER_PAGINATION,
    TRACKER_REJECTED,
    TRACKER_RESPONSE,
    Comment,
    NewTicket,
    TrackerError,
)

from .._support.creation import CreationGate
from .._support.skipped import SkippedRecords
from . import queries, tools, writes
from .api import LinearApi
from .config import ASSIGNEE_ME, LinearConfig
from .normalize import Malformed, issue_from_node
from .webhook import LinearWebhook

log = structlog.get_logger(__name__)

MAX_PAGES = 100
"""A listing longer than this many pages (5,000 issues) is treated as a paging fault."""


class LinearTracker:
    """A `Tracker` over one Linear project or team."""

    def __init__(
        self, config: LinearConfig, api: LinearApi, terminal_states: Sequence[str]
    ) -> None:
        self.config = config
        self._gate = CreationGate()
        """A ticket is created, then its blockers recorded: reads wait for that."""
        self.api = api
        self._terminal = frozenset(normalize_state(s) for s in terminal_states)
        self._viewer_id: str | None = None
        # Malformed nodes already reported, with the reason: logged when they appear or their
        # problem changes, not on every poll.
        self._skipped = SkippedRecords(log, "linear issue", "issue_id")

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        async with self._gate.reading():
            return await self._by_states(states)

    async def _by_states(self, states: Sequence[str]) -> list[Issue]:
        if not states:
            return []
        assignee = await self._assignee()
        scope: dict[str, Any]
        if self.config.project_slug is not None:
            query, scope = queries.PROJECT_ISSUES, {"slug": self.config.project_slug}
        else:
            query, scope = queries.TEAM_ISSUES, {"teamKey": self.config.team_key}
        found: dict[str, Issue] = {}
        problems: dict[str, str] = {}
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            variables = {**scope, "states": list(states), "first": queries.PAGE_SIZE}
            data = await self.api.data(query, {**variables, "after": cursor})
            connection = _connection(data)
            for node in connection["nodes"]:
                try:
                    issue = self._issue(node, assignee)
                except Malformed as bad:
                    problems[bad.key or "?"] = bad.reason
                    continue
                # A page boundary can shift while we read; the first sighting keeps its place.
                found.setdefault(issue.id, issue)
            page = connection.get("pageInfo")
            if not isinstance(page, Mapping) or page.get("hasNextPage") is not True:
                break
            following = page.get("endCursor")
            if not isinstance(following, str) or not following or following == cursor:
                raise TrackerError(
                    TRACKER_PAGINATION,
                    f"Linear said more issues follow in {self.config.scope} but gave no new cursor",
                )
            cursor = following
        else:
            raise TrackerError(
                TRACKER_PAGINATION,
                f"Linear listing of {self.config.scope} did not end within {MAX_PAGES} pages",
            )
        self._skipped.update(problems)
        return list(found.values())

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        async with self._gate.reading():
            return await self._by_ids(ids)

    async def _by_ids(self, ids: Sequence[str]) -> list[Issue]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        assignee = await self._assignee()
        issues: dict[str, Issue] = {}
        for start in range(0, len(wanted), queries.PAGE_SIZE):
            chunk = wanted[start : start + queries.PAGE_SIZE]
            data = await self.api.data(queries.ISSUES_BY_ID, {"ids": chunk, "first": len(chunk)})
            for node in _connection(data)["nodes"]:
                try:
                    issue = self._issue(node, assignee)
                except Malformed as bad:
                    raise TrackerError(
                        TRACKER_RESPONSE, f"Linear issue {bad.key} cannot be read: {bad.reason}"
                    ) from None
                if issue.id in chunk and self._in_scope(issue):
                    issues.setdefault(issue.id, issue)
        return list(issues.values())

    def agent_tools(self) -> list[ToolSpec]:
        return tools.tool_specs()

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = tools.parse_call(name, arguments)
        if isinstance(call, ToolResult):
            return call
        try:
            result = await tools.run(self.api, call, issue)
        except TrackerError as exc:
            output: dict[str, Any] = {"error": exc.category, "message": exc.message}
            if exc.retry_after_s is not None:
                output["retry_after_s"] = round(exc.retry_after_s, 1)
            return ToolResult(False, output)
        except Exception as exc:
            # A tool call must never take the agent session down with it.
            log.error(
                "linear tool failed", tool=name, issue_identifier=issue.identifier, error=repr(exc)
            )
            return ToolResult.failure(
                "tool_failed", self.api.scrub(f"{name} failed unexpectedly: {type(exc).__name__}")
            )
        if result.success:
            log.info("linear tool succeeded", tool=name, issue_identifier=issue.identifier)
        return result

    def secret_env_names(self) -> list[str]:
        secrets = (self.config.api_key, self.config.webhook_secret)
        return [s.env_name for s in secrets if s is not None and s.env_name]

    def webhook(self) -> LinearWebhook | None:
        """Deliveries are accepted only with `provider.webhook_secret` set."""
        secret = self.config.webhook_secret
        return LinearWebhook(secret.value) if secret is not None else None

    async def aclose(self) -> None:
        await self.api.aclose()

    # The daemon's writes (the `Tracker` write contract)

    async def move_issue(self, issue: Issue, state: str) -> None:
        if not state.strip():
            raise TrackerError(TRACKER_REJECTED, "a move needs a state name")
        moved = await writes.move_issue(self.api, issue, state.strip())
        if moved.changed:
            log.info(
                "linear issue moved",
                issue_identifier=moved.identifier,
                state=moved.state,
                previous_state=moved.previous_state,
            )

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        if not body.strip():
            raise TrackerError(TRACKER_REJECTED, "a comment needs a body")
        posted = await writes.add_comment(self.api, issue, body)
        log.info("linear comment added", issue_identifier=issue.identifier)
        return posted.comment

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        if not body.strip():
            raise TrackerError(TRACKER_REJECTED, "a comment needs a body")
        author = await self._viewer()
        return await writes.edit_comment(self.api, issue, comment_id, body, author_id=author)

    async def list_comments(self, issue: Issue) -> list[Comment]:
        return await writes.list_comments(self.api, issue)

    async def create_issue(self, ticket: NewTicket) -> Issue:
        async with self._gate.creating():  # created, then one relation per blocker
            created = await writes.create_ticket(self.api, self.config, ticket)
        log.info(
            "linear issue created",
            issue_identifier=created.identifier,
            blocked_by=list(created.blocked_by) or None,
        )
        found = await self.fetch_issues_by_ids([created.id])
        if not found:
            raise TrackerError(
                TRACKER_RESPONSE,
                f"Linear created {created.identifier} but does not list it in {self.config.scope}",
            )
        return found[0]

    async def link_pull_request(self, issue: Issue, url: str, title: str) -> None:
        """An attachment, as `linear_attach_url` makes it (one per URL: see `attach_url`)."""
        call = tools.parse_call(tools.ATTACH_URL, {"url": url, "title": _link_title(title)})
        if isinstance(call, ToolResult):
            raise TrackerError(TRACKER_REJECTED, f"cannot link {url!r}: {call.output['message']}")
        assert isinstance(call, generic.AddLink)
        attached = await writes.attach_url(self.api, issue, call.url, call.label)
        log.info("linear issue linked", issue_identifier=issue.identifier, url=attached.url)

    async def tracker_states(self) -> list[str] | None:
        teams, _ = await writes.scope_teams(self.api, self.config)
        # A project's teams often share state names: each name is listed once, first spelling.
        names: dict[str, str] = {}
        for team in teams:
            for state in team.states:
                names.setdefault(normalize_state(state.name), state.name)
        return list(names.values())

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return []  # workflow states are team settings, made by people in Linear

    async def _assignee(self) -> str | None:
        """The user whose issues are dispatchable; `me` is asked of Linear once, then kept."""
        if self.config.assignee != ASSIGNEE_ME:
            return self.config.assignee
        return await self._viewer()

    async def _viewer(self) -> str:
        """The id of the user the API key belongs to, asked once, then kept."""
        if self._viewer_id is not None:
            return self._viewer_id
        viewer = (await self.api.data(queries.VIEWER)).get("viewer")
        viewer_id = viewer.get("id") if isinstance(viewer, Mapping) else None
        if not isinstance(viewer_id, str) or not viewer_id:
            raise TrackerError(TRACKER_RESPONSE, "Linear did not say who the API key belongs to")
        self._viewer_id = viewer_id
        return viewer_id

    def _issue(self, node: Any, assignee: str | None) -> Issue:
        return issue_from_node(node, terminal_states=self._terminal, assignee_id=assignee)

    def _in_scope(self, issue: Issue) -> bool:
        # A refresh asks by id alone; an issue moved out of the project or team has left scope.
        ref = issue.native_ref or {}
        if self.config.project_slug is not None:
            return ref.get("project_slug_id") == self.config.project_slug
        return ref.get("team_key") == self.config.team_key


def _link_title(title: str) -> str | None:
    """The daemon's link text as the link tool takes it: trimmed, cut to the tool's limit."""
    return title.strip()[: tools.MAX_TITLE_CHARS].strip() or None


def _connection(data: Mapping[str, Any]) -> Mapping[str, Any]:
    connection = data.get("issues")
    if not isinstance(connection, Mapping) or not isinstance(connection.get("nodes"), list):
        raise TrackerError(TRACKER_RESPONSE, "Linear's answer has no issues.nodes list")
    return connection
