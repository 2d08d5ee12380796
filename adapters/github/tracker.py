"""`GitHubTracker`: the `Tracker` for GitHub, over one of two scopes (repository labels or a
Projects v2 board), sharing one HTTP client, its quota counters, the daemon's writes and the
agent tools, which run the same write code (the link tool is the daemon's `link_pull_request`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

from symphony.base.issue import Issue
from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker.contract import Comment, NewTicket, TrackerError
from symphony.tracker.tools import AddComment, GraphqlQuery, MoveIssue

from .._support.creation import CreationGate
from .._support.graphql import graphql
from .._support.http import HttpClient, RateLimitHeaders
from .._support.tool_calls import guarded
from . import tools, writes
from .config import GitHubConfig
from .normalize import is_repository
from .project import ProjectScope, is_rate_limited
from .repository import RepositoryScope
from .webhook import GitHubWebhook

API_VERSION = "2022-11-28"


def github_client(
    api_url: str,
    token: str,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> HttpClient:
    """The shared HTTP client speaking GitHub's REST API with `token` (the tracker's, or the
    code host's own)."""
    return HttpClient(
        provider="GitHub",
        base_url=api_url,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "symphony",
        },
        rate_limits=RateLimitHeaders(),
        transport=transport,
        clock=clock,
        sleep=sleep,
    )


class GitHubTracker:
    def __init__(
        self,
        config: GitHubConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self._gate = CreationGate()
        """A ticket is created, then its blockers recorded: reads wait for that."""
        self.http = github_client(
            config.api_url, config.token.value, transport=transport, clock=clock, sleep=sleep
        )
        self.scope: RepositoryScope | ProjectScope = (
            RepositoryScope(self.http, config)
            if config.repository is not None
            else ProjectScope(self.http, config)
        )

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        if not states:
            return []
        async with self._gate.reading():
            return await self.scope.by_states(states)

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        if not ids:
            return []
        async with self._gate.reading():
            return await self.scope.by_ids(ids)

    def agent_tools(self) -> list[ToolSpec]:
        if isinstance(self.scope, RepositoryScope):
            scope = f"labels in {self.config.repository}"
            closed = self.config.label_states.closed_state
            states = (
                f"Closing the issue is the state {closed!r}; other states "
                "are labels (configured, or 'status:<state-name-in-kebab-case>')."
            )
        else:
            project = self.config.project
            assert project is not None
            scope = f"the Status field of project {project.owner}/{project.number}"
            states = "The state must be one of the Status field's options."
        return tools.tool_specs(scope, states)

    def secret_env_names(self) -> list[str]:
        secrets = (self.config.token, self.config.webhook_secret)
        return [s.env_name for s in secrets if s is not None and s.env_name]

    def webhook(self) -> GitHubWebhook | None:
        """Deliveries are accepted only with `provider.webhook_secret` set."""
        secret = self.config.webhook_secret
        return GitHubWebhook(self.config, secret.value) if secret is not None else None

    async def aclose(self) -> None:
        await self.http.aclose()

    # The daemon's writes. The agent tools below run the same code.

    async def move_issue(self, issue: Issue, state: str) -> None:
        state = writes.checked_state(state)
        _, number = self._target(issue)
        await self._move(issue, number, state)

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        repository, number = self._target(issue)
        answer = await writes.post_comment(
            self.http,
            repository,
            number,
            writes.checked_body(body),
            issue_identifier=issue.identifier,
        )
        return writes.comment_from(answer, f"new comment on {issue.identifier}")

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        repository, number = self._target(issue)
        return await writes.edit_comment(
            self.http, repository, number, comment_id, writes.checked_body(body)
        )

    async def list_comments(self, issue: Issue) -> list[Comment]:
        repository, number = self._target(issue)
        return await writes.list_comments(self.http, repository, number)

    async def create_issue(self, ticket: NewTicket) -> Issue:
        async with self._gate.creating():  # opened, then its blockers recorded
            return await self.scope.create(ticket)

    async def link_pull_request(self, issue: Issue, url: str, title: str) -> None:
        """The link tool's comment, once per URL (see `writes.link_pull_request`, which also
        says why GitHub shows the pull request's own title rather than `title`), except for a
        pull request of the scope's own repository. The daemon's body of such a pull request
        says `Closes <the issue>`, which GitHub already shows on the issue as the pull request
        that will close it, and the evidence comment names it: a third mention would be noise.
        (In the project scope no body carries that reference, so every link is commented.)"""
        repository, number = self._target(issue)
        link = writes.checked_link(url)
        own = tools.pull_request_repository(link, self.config.web_host)
        if (
            isinstance(self.scope, RepositoryScope)
            and own is not None
            and own.lower() == self.scope.repository.lower()
        ):
            return
        await writes.link_pull_request(self.http, repository, number, link, issue_url=issue.url)

    async def tracker_states(self) -> list[str] | None:
        if isinstance(self.scope, RepositoryScope):
            return None  # a state is a label: any name can become one
        return await self.scope.states()

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        if isinstance(self.scope, RepositoryScope):
            return await self.scope.ensure_states(states)
        return []  # Status options are the project's to define

    async def _move(self, issue: Issue, number: int, state: str) -> dict[str, Any]:
        if isinstance(self.scope, RepositoryScope):
            return await self.scope.move(issue, number, state)
        return await self.scope.move(issue, state)

    # Agent tools

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = tools.parse_call(name, arguments, self.config.web_host)
        if isinstance(call, ToolResult):
            return call
        return await guarded("github", name, issue, self._execute(call, issue))

    async def _execute(self, call: tools.ToolCall, issue: Issue) -> ToolResult:
        try:
            return await self._run(call, issue)
        except writes.Rejected as exc:
            return ToolResult.failure(exc.code, exc.message)

    async def _run(self, call: tools.ToolCall, issue: Issue) -> ToolResult:
        if isinstance(call, GraphqlQuery):
            try:
                data = await graphql(
                    self.http,
                    call.query,
                    call.variables,
                    path=self.config.graphql_url,
                    is_rate_limited=is_rate_limited,
                )
            except TrackerError as exc:
                category = tools.GRAPHQL_ERROR if exc.category == "tracker_response" else None
                return ToolResult.failure(category or exc.category, exc.message)
            return ToolResult(True, {"data": data})
        repository, number = self._target(issue)
        if isinstance(call, MoveIssue):
            return ToolResult(True, await self._move(issue, number, call.state))
        if isinstance(call, AddComment):
            answer = await writes.post_comment(
                self.http, repository, number, call.body, issue_identifier=issue.identifier
            )
            return ToolResult(
                True,
                {
                    "identifier": issue.identifier,
                    "commented": True,
                    "comment_id": answer.get("id"),
                    "comment_url": answer.get("html_url"),
                },
            )
        linked = await writes.link_pull_request(
            self.http, repository, number, call.url, issue_url=issue.url
        )
        return ToolResult(
            True,
            {
                "identifier": issue.identifier,
                "commented": linked.added,
                "comment_id": linked.comment_id,
                "comment_url": linked.comment_url,
                "pull_request": call.url,
            },
        )

    def _target(self, issue: Issue) -> tuple[str, int]:
        """The issue as (repository, number), checked against the scope; `Rejected` (code
        `not_in_scope`) otherwise."""
        ref = issue.native_ref or {}
        repository, number = ref.get("repository"), ref.get("number")
        if not isinstance(repository, str) or not is_repository(repository):
            raise writes.Rejected(f"{issue.identifier} has no repository", tools.NOT_IN_SCOPE)
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise writes.Rejected(f"{issue.identifier} has no number", tools.NOT_IN_SCOPE)
        if isinstance(self.scope, RepositoryScope) and (
            repository.lower() != self.scope.repository.lower() or issue.id != str(number)
        ):
            raise writes.Rejected(
                f"{issue.identifier} is not an issue of {self.scope.repository}",
                tools.NOT_IN_SCOPE,
            )
        return repository, number
