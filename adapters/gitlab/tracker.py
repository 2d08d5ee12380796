"""`GitLabTracker`: the `Tracker` for the issues of one GitLab project, whose workflow state is
a label, over the shared HTTP client. Reads are `reads.ProjectIssues`; the daemon's writes and
the agent tools run the same functions of `writes`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

from symphony.base.issue import Issue
from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker.contract import Comment, NewTicket

from .._support.creation import CreationGate
from .._support.http import HttpClient, RateLimitHeaders
from .._support.tool_calls import guarded
from . import tools, writes
from .config import GitLabConfig
from .members import ProjectMembers
from .reads import ProjectIssues
from .webhook import GitLabWebhook

# GitLab reports its quota as `RateLimit-*` (reset in epoch seconds) and adds `Retry-After`
# to a 429; the shared client prefers Retry-After, then the reset.
RATE_LIMIT_HEADERS = RateLimitHeaders(remaining="ratelimit-remaining", reset="ratelimit-reset")


def gitlab_client(
    api_url: str,
    token: str,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> HttpClient:
    """The shared HTTP client speaking GitLab's REST API v4 at `api_url` with `token` (the
    tracker's, or the code host's own)."""
    return HttpClient(
        provider="GitLab",
        base_url=api_url,
        headers={"PRIVATE-TOKEN": token, "Accept": "application/json", "User-Agent": "symphony"},
        rate_limits=RATE_LIMIT_HEADERS,
        transport=transport,
        clock=clock,
        sleep=sleep,
    )


class GitLabTracker:
    def __init__(
        self,
        config: GitLabConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self._gate = CreationGate()
        """A ticket is created, then its blockers recorded: reads wait for that."""
        self.http = gitlab_client(
            config.api_url, config.token.value, transport=transport, clock=clock, sleep=sleep
        )
        self.issues = ProjectIssues(self.http, config)
        self.members = ProjectMembers(self.http, f"/projects/{config.project_ref}", clock=clock)

    # Reads

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        if not states:
            return []
        async with self._gate.reading():
            return await self.issues.by_states(states)

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        async with self._gate.reading():
            return await self.issues.by_ids(ids)

    # Tools

    def agent_tools(self) -> list[ToolSpec]:
        config = self.config
        scope = config.label_states
        example = scope.labels.label_for("Human Review")
        states = (
            f"Closing the issue is the state {scope.closed_state!r}; other states are labels "
            f"(configured, or the state name lower-cased after {scope.labels.prefix!r}, "
            f"e.g. 'Human Review' -> {example!r})."
        )
        return tools.tool_specs(config.project, states)

    def secret_env_names(self) -> list[str]:
        secrets = (self.config.token, self.config.webhook_secret)
        return [s.env_name for s in secrets if s is not None and s.env_name]

    def webhook(self) -> GitLabWebhook | None:
        """Deliveries are accepted only with `provider.webhook_secret` set."""
        secret = self.config.webhook_secret
        return GitLabWebhook(self.config, secret.value) if secret is not None else None

    async def aclose(self) -> None:
        await self.http.aclose()

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        call = tools.parse_call(name, arguments, self.config.base_url)
        if isinstance(call, ToolResult):
            return call
        return await guarded(
            "gitlab", name, issue, writes.run_tool(self.http, self.config, call, issue)
        )

    # The daemon's writes (the `Tracker` write contract). Arguments are checked as the tools
    # check them; a refusal made before any request is `tracker_rejected`.

    async def move_issue(self, issue: Issue, state: str) -> None:
        state = writes.checked_state(state, self.config)
        await writes.move(self.http, self.config, issue, state)

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        body = writes.checked_body(body, self.config)
        note = await writes.post_note(self.http, self.config, issue, body)
        return writes.comment_from(note, issue)

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        return await writes.edit_comment(self.http, self.config, issue, comment_id, body)

    async def list_comments(self, issue: Issue) -> list[Comment]:
        return await writes.list_comments(self.http, self.config, issue, self.members)

    async def create_issue(self, ticket: NewTicket) -> Issue:
        async with self._gate.creating():  # created, then its blocking links added
            return await writes.create_issue(self.http, self.config, ticket, self.issues)

    async def link_pull_request(self, issue: Issue, url: str, title: str) -> None:
        """The link tool's note, once per URL (see `writes.link_merge_request`, which also says
        why GitLab shows the merge request's own title rather than `title`), except for a merge
        request of the configured project. The daemon's description of such a merge request
        says `Closes <the issue>`, which GitLab already shows on the issue as the merge request
        that will close it, and the evidence comment names it: a third mention would be noise.
        (A project configured by numeric id cannot be matched to a URL: its links are noted.)"""
        link = writes.checked_link(url)
        if not writes.of_the_project(link, self.config):
            await writes.link_merge_request(self.http, self.config, issue, link)

    async def tracker_states(self) -> list[str] | None:
        return None  # states are labels, and GitLab takes any label name

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return await writes.ensure_states(self.http, self.config, states)
