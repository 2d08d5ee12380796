"""An in-memory tracker: the tickets are a dict, a person's move is `set_state`, and every write
the daemon makes (moves, comments, pull request links) is kept for the test to read."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from symphony.base.issue import Issue, normalize_state
from symphony.base.tools import ToolResult, ToolSpec
from symphony.tracker.contract import Comment, NewTicket

COMMENT_TOOL = ToolSpec(
    "memory_comment",
    "Post a comment on the ticket.",
    {"type": "object", "properties": {"body": {"type": "string"}}, "required": ["body"]},
)


class MemoryTracker:
    def __init__(self, *issues: Issue, comment_tool: bool = False) -> None:
        self.issues: dict[str, Issue] = {issue.id: issue for issue in issues}
        self.comment_tool = comment_tool
        """Offer agents `memory_comment`, which posts as the daemon does."""
        self.comments: dict[str, list[Comment]] = {}
        self.moves: list[tuple[str, str]] = []
        """(identifier, state) of every move the daemon made."""
        self.links: dict[str, dict[str, str]] = {}
        """identifier -> {url: title} of the pull requests linked; the same URL once."""
        self.reads = 0
        self.states_read: list[tuple[str, ...]] = []
        """The states of every `fetch_issues_by_states`, in order."""

    def set_state(self, identifier: str, state: str) -> None:
        """A person moves the ticket."""
        issue = self.by_identifier(identifier)
        self.issues[issue.id] = dataclasses.replace(issue, state=state)

    def said(self, identifier: str, author: str, body: str, *, member: bool | None) -> None:
        """A person comments on the ticket; `member`: whether the tracker counts them as one
        of its people (None: it cannot say)."""
        issue = self.by_identifier(identifier)
        comments = self.comments.setdefault(issue.id, [])
        comments.append(Comment(str(len(comments) + 1), body, author, author_member=member))

    def by_identifier(self, identifier: str) -> Issue:
        return next(i for i in self.issues.values() if i.identifier == identifier)

    async def fetch_issues_by_states(self, states: Sequence[str]) -> list[Issue]:
        self.reads += 1
        self.states_read.append(tuple(states))
        wanted = {normalize_state(s) for s in states}
        return [i for i in self.issues.values() if normalize_state(i.state) in wanted]

    async def fetch_issues_by_ids(self, ids: Sequence[str]) -> list[Issue]:
        self.reads += 1
        return [self.issues[i] for i in ids if i in self.issues]

    def agent_tools(self) -> list[ToolSpec]:
        return [COMMENT_TOOL] if self.comment_tool else []

    async def execute_tool(self, name: str, arguments: Any, issue: Issue) -> ToolResult:
        if self.comment_tool and name == COMMENT_TOOL.name and isinstance(arguments, dict):
            posted = await self.add_comment(issue, str(arguments.get("body", "")))
            return ToolResult(True, {"id": posted.id})
        return ToolResult.failure("unknown_tool", f"{name!r} is not a tool of this tracker")

    def secret_env_names(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None

    async def move_issue(self, issue: Issue, state: str) -> None:
        self.moves.append((issue.identifier, state))
        self.issues[issue.id] = dataclasses.replace(self.issues[issue.id], state=state)

    async def add_comment(self, issue: Issue, body: str) -> Comment:
        comments = self.comments.setdefault(issue.id, [])
        comments.append(Comment(str(len(comments) + 1), body, "symphony"))
        return comments[-1]

    async def edit_comment(self, issue: Issue, comment_id: str, body: str) -> Comment:
        comments = self.comments[issue.id]
        index = next(n for n, c in enumerate(comments) if c.id == comment_id)
        comments[index] = dataclasses.replace(comments[index], body=body)
        return comments[index]

    async def list_comments(self, issue: Issue) -> list[Comment]:
        return list(self.comments.get(issue.id, []))

    async def create_issue(self, ticket: NewTicket) -> Issue:
        number = len(self.issues) + 1
        created = Issue(
            id=f"id-NEW-{number}",
            identifier=f"NEW-{number}",
            title=ticket.title,
            description=ticket.description,
            state=ticket.state,
            dispatchable=not ticket.blocked_by,
        )
        self.issues[created.id] = created
        return created

    async def link_pull_request(self, issue: Issue, url: str, title: str) -> None:
        self.links.setdefault(issue.identifier, {}).setdefault(url, title)

    async def tracker_states(self) -> list[str] | None:
        return None  # any name is a state, as on the local board

    async def ensure_states(self, states: Sequence[str]) -> list[str]:
        return []
